"""Whether two systems' BLEU on one test set differ beyond its sampling noise: a two-sided paired bootstrap of the
difference that resamples whole documents, and Holm's correction over a report's family of comparisons.

The test set's n sentences fall into G documents (the Bible's chapters, WMT's documents; a sentence its own
document where none are known). sacreBLEU's sufficient statistics of each sentence (hypothesis and reference
length, matches and totals of 1- to 4-grams) are summed per document: S[g]. Resample b draws G documents with
replacement, the same draws for every system of a report, and c[b, g] counts the draws of g:

    BLEU_x(b) = BLEU(sum_g c[b, g] S_x[g]),      d_b = BLEU_sys(b) - BLEU_base(b),      d = BLEU_sys - BLEU_base
    p         = (1 + #{b : |d_b - mean(d_.)| >= |d|}) / (B + 1)         two-sided; the resampled differences
                                                                        shifted to mean 0 stand for "no difference"
    interval  = the 2.5th and 97.5th percentiles of d_b                 (95 %, of the difference)

Documents, not sentences, are resampled because neighbouring sentences share words, names and style: verses
drawn as if independent understate the noise. Holm (1979) over a family of m comparisons, p sorted ascending:

    p_holm(i) = max_{j <= i} min(1, (m - j + 1) p(j))

A comparison is "told apart" when p_holm < ``ALPHA``; where runs of several seeds exist, a claim that one scheme
ends above another needs that, with the same sign, at every seed (``at_every_seed``).
"""

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

RESAMPLES = 10_000  # resolves p near 0.05 to about +-0.004 (its binomial standard error)
SEED = 12345  # the draws, the same for every comparison of a report
ALPHA = 0.05
ORDER = 4  # BLEU's n-gram orders


def sentence_statistics(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool) -> np.ndarray:
    """sacreBLEU's per-sentence statistics (tokenize 13a): rows [hyp_len, ref_len, matches_1..4, totals_1..4]."""
    from sacrebleu.metrics import BLEU

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    metric = BLEU(lowercase=lowercase, effective_order=True)  # the sentence's own score aside: counts are raw
    rows = []
    for hypothesis, reference in zip(hypotheses, references):
        s = metric.sentence_score(hypothesis, [reference])
        rows.append([s.sys_len, s.ref_len, *s.counts, *s.totals])
    return np.asarray(rows, dtype=np.float64)


def bleu_of(statistics: np.ndarray) -> np.ndarray:
    """Corpus BLEU (sacreBLEU's formula: geometric mean of the n-gram precisions in percent, brevity penalty) of each
    row of summed statistics (``sentence_statistics``' columns). sacreBLEU's "exp" smoothing of an order without a
    match is applied where a row has one (never at the size of a test set, but a resample may)."""
    statistics = np.atleast_2d(statistics)
    sys_len, ref_len = statistics[:, 0], statistics[:, 1]
    matches, totals = statistics[:, 2 : 2 + ORDER], statistics[:, 2 + ORDER :]
    precisions = np.empty_like(matches)
    smooth = np.ones(len(statistics))
    for n in range(ORDER):
        zero = matches[:, n] == 0
        smooth = np.where(zero, smooth * 2, smooth)
        with np.errstate(divide="ignore", invalid="ignore"):
            precisions[:, n] = np.where(zero, 100 / (smooth * totals[:, n]), 100 * matches[:, n] / totals[:, n])
    with np.errstate(divide="ignore", invalid="ignore"):
        brevity = np.where(sys_len < ref_len, np.exp(1 - ref_len / np.maximum(sys_len, 1e-16)), 1.0)
        score = brevity * np.exp(np.log(precisions).mean(axis=1))
    # sacreBLEU's 0 for a row without any match, or without an n-gram of some order
    return np.where((matches.sum(axis=1) > 0) & (totals.min(axis=1) > 0), score, 0.0)


@dataclass(frozen=True)
class Draws:
    """How often each of G documents is drawn in each of B resamples (B x G), and which document each sentence is in."""

    counts: np.ndarray
    document_of: np.ndarray
    unit: str  # what was resampled, for the test's description ("chapters", "verses")

    @classmethod
    def of(cls, documents: Sequence[str], unit: str, resamples: int = RESAMPLES, seed: int = SEED) -> "Draws":
        names, document_of = np.unique(np.asarray(documents, dtype=object).astype(str), return_inverse=True)
        rng = np.random.default_rng(seed)
        drawn = rng.integers(0, len(names), size=(resamples, len(names)))
        counts = np.zeros((resamples, len(names)))
        np.add.at(counts, (np.arange(resamples)[:, None], drawn), 1)
        return cls(counts, document_of, unit)

    @property
    def documents(self) -> int:
        return self.counts.shape[1]

    def resampled(self, statistics: np.ndarray) -> np.ndarray:
        """BLEU of each resample of a system's per-sentence ``statistics``."""
        per_document = np.zeros((self.documents, statistics.shape[1]))
        np.add.at(per_document, self.document_of, statistics)
        return bleu_of(self.counts @ per_document)

    def describe(self) -> str:
        return (
            f"two-sided paired bootstrap of the BLEU difference, {len(self.counts):,} resamples of the test set's "
            f"{self.documents:,} {self.unit} (seed {SEED})"
        )


def paired_test(system: np.ndarray, baseline: np.ndarray, draws: Draws) -> Dict[str, Any]:
    """The system's and the baseline's BLEU, their difference, its 95 % interval and the two-sided p (None where
    the two are the same translations: no difference to test)."""
    if system.shape != baseline.shape or len(system) != len(draws.document_of):
        raise ValueError("paired test: the systems and the draws cover different test sentences")
    observed = float(bleu_of(system.sum(axis=0))[0] - bleu_of(baseline.sum(axis=0))[0])
    differences = draws.resampled(system) - draws.resampled(baseline)
    low, high = np.percentile(differences, [2.5, 97.5])
    same = bool(np.array_equal(system, baseline))
    extreme = np.abs(differences - differences.mean()) >= abs(observed) - 1e-9
    p = None if same else float((1 + extreme.sum()) / (len(differences) + 1))
    return {
        "sacrebleu": round(float(bleu_of(system.sum(axis=0))[0]), 2),
        "against_sacrebleu": round(float(bleu_of(baseline.sum(axis=0))[0]), 2),
        "delta": round(observed, 2),
        "ci95": [round(float(low), 2), round(float(high), 2)],
        "p": None if p is None else round(p, 4),
    }


def holm(pvalues: Sequence[Optional[float]]) -> List[Optional[float]]:
    """Holm's step-down adjustment of a family's p-values (None: not tested, left out of the family)."""
    tested = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    adjusted: List[Optional[float]] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[i] = round(running, 4)
    return adjusted


def with_holm(rows: List[Dict]) -> List[Dict]:
    """``rows`` (each with a "p") with "p_holm" added, the whole list one family."""
    return [dict(row, p_holm=p) for row, p in zip(rows, holm([r["p"] for r in rows]))]


def p_text(p: float) -> str:
    """``= 0.007``, or ``< 0.001`` below what three decimals show (the test's floor is 1 / (B + 1))."""
    return "< 0.001" if p < 0.0005 else f"= {p:.3f}"


def told_apart(row: Dict) -> bool:
    return row.get("p_holm") is not None and row["p_holm"] < ALPHA


def at_every_seed(rows: Sequence[Dict]) -> Optional[int]:
    """+1 where every row (one comparison at each seed) tells the two apart with the system above, -1 with it below;
    None otherwise (a seed that does not, or signs that differ)."""
    if not rows or not all(told_apart(r) for r in rows):
        return None
    signs = {1 if r["delta"] > 0 else -1 for r in rows}
    return signs.pop() if len(signs) == 1 else None
