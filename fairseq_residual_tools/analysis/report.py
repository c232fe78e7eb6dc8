"""The README of a probe run: its command and setting, the key numbers as tables, the fits."""

import statistics
from pathlib import Path
from typing import Callable, Dict, List

from ..markdown import table
from ..provenance import describe
from . import probes


def _depth_table(runs: List[Dict], value: Callable[[Dict], float], fmt: str) -> str:
    """Rows scheme, columns 'stack N' with mean ± std over seeds of value(run[stack])."""
    columns = [(side, d) for side in probes.STACKS for d in sorted({r["layers"] for r in runs})]

    def cell(scheme: str, side: str, depth: int) -> str:
        values = [value(r[side]) for r in runs if (r["scheme"], r["layers"]) == (scheme, depth)]
        return f"{statistics.fmean(values):{fmt}} ± {statistics.pstdev(values):{fmt}}" if values else ""

    schemes = dict.fromkeys(r["scheme"] for r in runs)
    rows = [[scheme, *(cell(scheme, side, depth) for side, depth in columns)] for scheme in schemes]
    return table(["scheme", *(f"{side[:3]} N={d}" for side, d in columns)], rows)


def _fit_table(summary: Dict) -> str:
    """At each scheme's largest depth: RMS log residual of each diversity shape, the best one,
    and the fitted per-block gradient ratio r of g_k = c r^(N-k)."""
    shapes = list(probes.DIVERSITY_SHAPES)
    headers = ["scheme", "N", "stack", *(f"rms log resid. {s}" for s in shapes)]
    headers += ["best shape", "gradient r per block", "rms log resid. (1/2)^((N-k)/2)"]
    rows = []
    for scheme, by_depth in summary.items():
        depth = max(by_depth, key=int)
        for side in probes.STACKS:
            fit = by_depth[depth][side].get("fits")
            if not fit:
                continue
            residuals = [f"{fit['rel_diff'][s]['rms_log_residual']:.3f}" for s in shapes]
            r, post_ln = fit["grad_norm_geometric"]["r"], fit["grad_norm_post_ln_shape"]["rms_log_residual"]
            rows.append([scheme, depth, side, *residuals, fit["rel_diff_best_shape"], f"{r:.3f}", f"{post_ln:.2f}"])
    return table(headers, rows)


def probe_readme(summary: Dict, runs: List[Dict], meta: Dict, out: Path) -> str:
    s = meta["settings"]
    summary_file = Path(out) / "summary.md"
    reading = summary_file.read_text().strip() if summary_file.exists() else ""
    fresh = f"fresh models (width {s['dim']}, FFN {s['ffn']}, {s['heads']} heads, dropout off, shared embeddings)"
    fresh += f", initialisation seeds {', '.join(map(str, s['seeds']))}"
    source = "checkpoints " + ", ".join(s["checkpoint"]) if s.get("checkpoint") else fresh
    return f"""# Probes of the paper's claims at initialisation

{reading}

## What is measured

{source}; one batch: the first {s["sentences"]} sentence pairs of the `{s["split"]}` split of
`{meta["data"]}`; loss: token-level cross-entropy (mean over target tokens). Per encoder/decoder
block k (a fairseq layer): the L2 norm of the gradient of all its parameters, and for adjacent
blocks the relative difference ||x^ln_(k+1) - x^ln_k|| / ||x^ln_k|| and the cosine similarity
of their inputs, per token (padding excluded) and averaged. x^ln_k is what block k hands its
first sub-layer (self-attention): LN(x^a_k) for Pre-LN, the block input for Post-LN, the x^ln
half of ResiDual's packed input (definition and per-scheme notes: `fairseq_residual_tools/analysis/probes.py`).
Numbers below: mean ± std over seeds.

## Gradient norm of the bottom block relative to the top block (Theorem 3.1)

{_depth_table(runs, lambda r: r["grad_norm"][0] / r["grad_norm"][-1], ".3g")}

## Median |g| over the bottom block's gradient coordinates (Theorem 3.2)

Adam's first step is alpha g / (|g| + eps): once a block's typical |g| nears eps (fairseq's default
1e-8), its update is no longer about alpha sign(g) and its sensitivity to gradient noise, alpha eps /
(|g| + eps)^2, approaches its peak alpha / eps.

{_depth_table(runs, lambda r: r["median_abs_grad"][0], ".2g")}

## Relative difference of the top pair of block inputs, k = N-1 (Theorems 3.3 and 3.6)

{_depth_table(runs, lambda r: r["rel_diff"][-1], ".3f")}

## The same for the bottom pair, k = 1

{_depth_table(runs, lambda r: r["rel_diff"][0], ".3f")}

## Fits of the predicted shapes (mean profile, largest depth)

One-parameter fits y = c s(k) of the relative difference by least squares on log y; the RMS of the
log residuals says how well each shape fits (0.1 is about 10 % scatter). The paper predicts c/k for
Pre-LN (Theorem 3.3 as stated) and a constant for Post-LN and ResiDual (Theorem 3.6); c/sqrt(k) is
what LN of a sum of k independent unit-variance terms gives. Gradient: r of a fitted g_k = c r^(N-k)
(the paper's Post-LN rate is (1/2)^(1/2) = 0.707 per block; r > 1 means the gradient grows toward
the bottom), and the RMS log residual of the paper's Post-LN shape with only c fitted.
The dashed lines in the plots are these fits.

{_fit_table(summary)}

## Files

- [grad_norm.png](grad_norm.png), [rel_diff.png](rel_diff.png), [cosine.png](cosine.png): profiles
  over block k, one panel per stack and depth, one curve per scheme (shaded: ± std over seeds).
- [versus_depth.png](versus_depth.png): bottom/top gradient ratio and top-pair difference versus N.
- [probes.json](probes.json): every number of every run, the per-block means/stds and all fits.

## Provenance

- Command: `{meta["command"]}` ({meta["wall_seconds"]:.0f} s wall), on a machine shared with other jobs.
- {describe(meta.get("provenance", meta))}
"""
