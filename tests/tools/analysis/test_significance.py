"""The paired bootstrap (``analysis.significance``) against the definition in its docstring, computed here with
sacreBLEU's public corpus score on each resample."""

import random

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from fairseq_residual_tools.analysis.significance import paired_bootstrap

WORDS = "the lord said unto moses and aaron speak to the children of israel saying".split()


def corpus(seed, n=120):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(n)]


def noisy(lines, rate, seed):
    """``lines`` with each word replaced by a random one with probability ``rate``."""
    rng = random.Random(seed)
    return [" ".join(w if rng.random() > rate else rng.choice(WORDS) for w in line.split()) for line in lines]


def by_definition(base, system, refs, resamples, seed=12345):
    """p = (#{b: d_b - mean(d) > d} + 1) / (B + 1), d_b = |BLEU_sys(b) - BLEU_base(b)| on the same index draws."""
    score = lambda hyps, idx: BLEU().corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score  # noqa: E731
    whole = range(len(refs))
    observed = abs(score(system, whole) - score(base, whole))
    draws = np.random.default_rng(seed).choice(len(refs), size=(resamples, len(refs)), replace=True)
    d = np.array([abs(score(system, idx) - score(base, idx)) for idx in draws])
    return (np.sum(d - d.mean() > observed) + 1) / (resamples + 1)


def test_the_p_value_and_difference_are_the_definitions():
    refs = corpus(0)
    base, better, close = noisy(refs, 0.5, 1), noisy(refs, 0.3, 2), noisy(refs, 0.48, 3)
    systems = {"better": better, "close": close}
    base_score, compared, signature = paired_bootstrap(base, systems, refs, resamples=200)
    base_bleu = BLEU().corpus_score(base, [refs]).score
    assert base_score == pytest.approx(base_bleu, abs=0.005)
    for name, hyps in systems.items():
        bleu = BLEU().corpus_score(hyps, [refs]).score
        assert compared[name]["sacrebleu"] == pytest.approx(bleu, abs=0.005)
        assert compared[name]["delta"] == pytest.approx(bleu - base_bleu, abs=0.01)
        assert compared[name]["p"] == pytest.approx(by_definition(base, hyps, refs, 200), abs=1e-4), name
    assert compared["better"]["p"] < 0.01 < 0.05 < compared["close"]["p"]  # far apart, then within the noise
    assert "bs:200" in signature and "seed:12345" in signature and "tok:13a" in signature


def test_an_exact_tie_has_no_p_value_and_unequal_lengths_are_refused():
    refs = corpus(1, n=20)
    hyps = noisy(refs, 0.5, 4)
    _, compared, _ = paired_bootstrap(hyps, {"same": list(hyps)}, refs, resamples=50)
    assert compared["same"]["delta"] == 0 and compared["same"]["p"] is None  # sacreBLEU would say p = 1/51
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap(hyps, {"short": hyps[:-1]}, refs)
