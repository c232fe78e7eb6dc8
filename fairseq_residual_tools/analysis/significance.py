"""Whether a system's BLEU differs from a baseline's beyond the test set's sampling noise: sacreBLEU's paired
bootstrap resampling (Koehn 2004; ``sacrebleu --paired-bs``, as Moses' bootstrap-hypothesis-difference-significance.pl)
on the same test sentences.

For B resamples of the sentence indices (drawn with replacement, the same draws for every system), d_b =
|BLEU_sys(b) - BLEU_base(b)|; with the observed d = |BLEU_sys - BLEU_base|, p = (#{b: d_b - mean(d) > d} + 1) / (B + 1).
The 95 % interval is of the system's BLEU over the resamples."""

from typing import Dict, List, Optional, Sequence, Tuple

RESAMPLES = 1000  # sacreBLEU's default for the paired bootstrap


def paired_bootstrap(
    baseline: Sequence[str], systems: Dict[str, Sequence[str]], references: Sequence[str], resamples: int = RESAMPLES
) -> Tuple[float, Dict[str, Dict[str, Optional[float]]], str]:
    """The baseline's sacreBLEU; each of ``systems`` (name -> detokenised hypotheses) against ``baseline``: its
    sacreBLEU, the difference, the half-width of its 95 % interval and the p-value (None where the scores are equal:
    sacreBLEU's test would call an exact tie significant); and the test's signature (metric, resamples, seed)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest, Result

    sizes = {len(baseline), len(references), *(len(h) for h in systems.values())}
    if len(sizes) != 1:
        raise ValueError(f"paired bootstrap: the systems and references differ in length ({sorted(sizes)} lines)")
    named: List[Tuple[str, Sequence[str]]] = [("baseline", baseline), *systems.items()]
    test = PairedTest(named, {"BLEU": BLEU()}, [list(references)], test_type="bs", n_samples=resamples)
    signatures, scores = test()
    results = [r for r in scores["BLEU"] if isinstance(r, Result)]  # the baseline's first, then the systems'
    base = results[0].score
    compared: Dict[str, Dict[str, Optional[float]]] = {}
    for name, result in zip(systems, results[1:]):
        delta = round(result.score - base, 2)
        compared[name] = {
            "sacrebleu": round(result.score, 2),
            "delta": delta,
            "ci95": round(float(result.ci or 0.0), 2),
            "p": round(float(result.p_value or 0.0), 4) if delta else None,
        }
    return round(base, 2), compared, str(signatures["BLEU"])
