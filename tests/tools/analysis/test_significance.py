"""The document-level paired bootstrap and Holm's correction (``analysis.significance``) against the definitions in
its docstring, computed here with sacreBLEU's public corpus score on each resample's sentences written out."""

import random

import numpy as np
import pytest
from sacrebleu.metrics import BLEU

from fairseq_residual_tools.analysis import significance

WORDS = "the lord said unto moses and aaron speak to the children of israel saying".split()


def corpus(seed, n=120):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) for _ in range(n)]


def noisy(lines, rate, seed):
    """``lines`` with each word replaced by a random one with probability ``rate``."""
    rng = random.Random(seed)
    return [" ".join(w if rng.random() > rate else rng.choice(WORDS) for w in line.split()) for line in lines]


def by_definition(base, system, refs, documents, resamples, seed=significance.SEED):
    """d_b = BLEU_sys(b) - BLEU_base(b) over the sentences of G documents drawn with replacement (numpy's generator,
    as the module draws), p = (1 + #{b: |d_b - mean(d)| >= |d|}) / (B + 1); the interval's percentiles."""
    score = lambda hyps, idx: BLEU().corpus_score([hyps[i] for i in idx], [[refs[i] for i in idx]]).score  # noqa: E731
    names = sorted(set(documents))
    members = {name: [i for i, d in enumerate(documents) if d == name] for name in names}
    observed = score(system, range(len(refs))) - score(base, range(len(refs)))
    draws = np.random.default_rng(seed).integers(0, len(names), size=(resamples, len(names)))
    d = []
    for row in draws:
        idx = [i for g in row for i in members[names[g]]]
        d.append(score(system, idx) - score(base, idx))
    d = np.array(d)
    p = (1 + np.sum(np.abs(d - d.mean()) >= abs(observed) - 1e-9)) / (resamples + 1)
    return observed, p, np.percentile(d, [2.5, 97.5])


def stats(hyps, refs):
    return significance.sentence_statistics(hyps, refs, lowercase=False)


def test_corpus_bleu_from_summed_sentence_statistics_is_sacrebleus_corpus_score():
    refs = corpus(0)
    for rate in (0.2, 0.5, 0.9):
        hyps = noisy(refs, rate, 1)
        assert significance.bleu_of(stats(hyps, refs).sum(axis=0))[0] == pytest.approx(
            BLEU().corpus_score(hyps, [refs]).score, abs=1e-9
        )
    # a corpus without a 4-gram match (sacreBLEU's "exp" smoothing) and one with no match at all
    for hyps, ref in ((["a b c d e"], ["a b c x d e"]), (["p q r"], ["a b c"])):
        assert significance.bleu_of(stats(hyps, ref).sum(axis=0))[0] == pytest.approx(
            BLEU().corpus_score(hyps, [ref]).score, abs=1e-9
        )
    lowered = significance.sentence_statistics(["The Lord"], ["the lord"], lowercase=True)
    assert (
        significance.bleu_of(lowered.sum(axis=0))[0]
        == BLEU(lowercase=True).corpus_score(["The Lord"], [["the lord"]]).score
    )


def test_the_difference_interval_and_two_sided_p_resampling_whole_documents_are_the_definitions():
    refs = corpus(0)
    documents = [f"chapter {i // 10}" for i in range(len(refs))]  # 12 chapters of 10 sentences
    base, better, close = noisy(refs, 0.5, 1), noisy(refs, 0.3, 2), noisy(refs, 0.49, 3)
    draws = significance.Draws.of(documents, "chapters", resamples=120)
    assert draws.documents == 12 and draws.counts.sum(axis=1).tolist() == [12] * 120
    for hyps in (better, close):
        row = significance.paired_test(stats(hyps, refs), stats(base, refs), draws)
        observed, p, (low, high) = by_definition(base, hyps, refs, documents, 120)
        assert row["delta"] == pytest.approx(observed, abs=0.005)
        assert row["sacrebleu"] == pytest.approx(BLEU().corpus_score(hyps, [refs]).score, abs=0.005)
        assert row["p"] == pytest.approx(p, abs=1e-4)
        assert row["ci95"] == pytest.approx([low, high], abs=0.005)
    worse = significance.paired_test(stats(base, refs), stats(better, refs), draws)
    assert worse["delta"] < 0 and worse["p"] < 0.01  # two-sided: a system below its baseline is told apart too


def test_resampling_chapters_gives_larger_p_than_resampling_verses_when_neighbours_move_together():
    refs = corpus(5, n=200)
    documents = [f"chapter {i // 20}" for i in range(200)]
    # the system is better on some chapters and worse on others: verses of a chapter move together
    system = [noisy([r], 0.2 if (i // 20) % 2 else 0.6, i)[0] for i, r in enumerate(refs)]
    base = noisy(refs, 0.42, 99)
    s, b = stats(system, refs), stats(base, refs)
    by_chapter = significance.paired_test(s, b, significance.Draws.of(documents, "chapters", resamples=2000))
    by_verse = significance.paired_test(s, b, significance.Draws.of(list(range(200)), "verses", resamples=2000))
    assert by_chapter["delta"] == by_verse["delta"]
    assert by_chapter["p"] > by_verse["p"]
    assert by_chapter["ci95"][1] - by_chapter["ci95"][0] > by_verse["ci95"][1] - by_verse["ci95"][0]


def test_identical_translations_have_no_p_and_mismatched_sentences_are_refused():
    refs = corpus(1, n=20)
    hyps = noisy(refs, 0.5, 4)
    draws = significance.Draws.of(list(range(20)), "verses", resamples=50)
    row = significance.paired_test(stats(hyps, refs), stats(list(hyps), refs), draws)
    assert row["delta"] == 0 and row["p"] is None
    with pytest.raises(ValueError, match="different test sentences"):
        significance.paired_test(stats(hyps[:-1], refs[:-1]), stats(hyps[:-1], refs[:-1]), draws)


def test_holm_is_the_step_down_adjustment_and_untested_rows_stay_out_of_the_family():
    # sorted 0.01, 0.02, 0.03, 0.04 over m = 4: 0.04, 0.06, 0.06 (max with the previous), 0.06
    assert significance.holm([0.03, 0.01, None, 0.04, 0.02]) == [0.06, 0.04, None, 0.06, 0.06]
    assert significance.holm([0.5, 0.9]) == [1.0, 1.0]
    rows = significance.with_holm([{"p": 0.001, "delta": 1.0}, {"p": 0.04, "delta": 0.5}])
    assert [r["p_holm"] for r in rows] == [0.002, 0.04]
    assert [significance.told_apart(r) for r in rows] == [True, True]


def test_a_claim_holds_at_every_seed_only_when_each_seed_tells_the_two_apart_with_one_sign():
    up, down = {"p_holm": 0.01, "delta": 0.8}, {"p_holm": 0.01, "delta": -0.3}
    noise = {"p_holm": 0.2, "delta": 0.6}
    assert significance.at_every_seed([up, up]) == 1
    assert significance.at_every_seed([down]) == -1
    assert significance.at_every_seed([up, noise]) is None and significance.at_every_seed([up, down]) is None


def test_a_p_below_what_three_decimals_show_reads_as_below_one_thousandth():
    assert significance.p_text(0.0001) == "< 0.001" and significance.p_text(0.0068) == "= 0.007"
