"""A probe's depth profiles (``probes``): which stacks a run measured, the shapes the paper predicts for a profile
over the blocks k = 1..N, and their least-squares fits. No torch: the figures (``plotting``) read these too."""

import math
import statistics
from typing import Dict, List, Optional, Sequence

import numpy as np

STACKS = ("encoder", "decoder")


def stacks_of(run: Dict) -> List[str]:
    """The stacks a run (or summary cell) measured: both for translation, the decoder for a language model."""
    return [side for side in STACKS if side in run]


#: one-parameter shapes y = c * s(k) fitted to a profile; k is the 1-based block index, n the depth
DIVERSITY_SHAPES = {
    "c/k": lambda k, n: 1.0 / k,  # Theorem 3.3 as the paper states it (Pre-LN)
    "c/sqrt(k)": lambda k, n: 1.0 / math.sqrt(k),  # LN of a sum of k independent terms
    "c": lambda k, n: 1.0,  # Theorem 3.6 (Post-LN, ResiDual): independent of k
}


def post_ln_gradient_shape(k, n):
    return 0.5 ** ((n - k) / 2)  # Theorem 3.1


def fit_shape(values: Sequence[float], shape) -> Dict[str, float]:
    """Least squares of log y = log c + log s(k): c and the RMS log residual (0 = exact shape)."""
    logs = [math.log(v) - math.log(shape(k, len(values))) for k, v in enumerate(values, 1)]
    return {"c": math.exp(statistics.fmean(logs)), "rms_log_residual": statistics.pstdev(logs)}


def fit_geometric_decay(values: Sequence[float]) -> Dict[str, float]:
    """Fit g_k = c * r^(N-k) (log-linear least squares); r < 1 means decay toward the bottom."""
    xs, ys = np.arange(len(values))[::-1], np.log(values)
    slope, log_c = np.polyfit(xs, ys, 1)
    rms = math.sqrt(np.mean((ys - (log_c + slope * xs)) ** 2))
    return {"r": math.exp(slope), "c": math.exp(log_c), "rms_log_residual": rms}


def fits(profile: Dict[str, List[float]]) -> Optional[Dict]:
    """All fits of one (scheme, depth, stack) mean profile; None if a value is not positive."""
    if min(profile["rel_diff"] + profile["grad_norm"]) <= 0:
        return None
    shapes = {name: fit_shape(profile["rel_diff"], s) for name, s in DIVERSITY_SHAPES.items()}
    return {
        "rel_diff": shapes,
        "rel_diff_best_shape": min(shapes, key=lambda name: shapes[name]["rms_log_residual"]),
        "grad_norm_geometric": fit_geometric_decay(profile["grad_norm"]),
        "grad_norm_post_ln_shape": fit_shape(profile["grad_norm"], post_ln_gradient_shape),
        "grad_norm_bottom_over_top": profile["grad_norm"][0] / profile["grad_norm"][-1],
    }
