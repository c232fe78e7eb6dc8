"""PNG figures of the probes and the CPU study (matplotlib, Agg backend)."""

import itertools
import logging
import statistics
from typing import Any, Dict

logging.getLogger("matplotlib").setLevel(logging.WARNING)  # before import: it logs while loading
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from . import profiles  # noqa: E402


def scheme_colors(schemes):
    """One colour per scheme, by its place in the registry (the same in every figure)."""
    from fairseq_residual.schemes import SCHEMES

    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    order = list(SCHEMES) + [s for s in schemes if s not in SCHEMES]
    return {s: cycle[order.index(s) % len(cycle)] for s in schemes}


def save(fig, path, dpi):
    fig.savefig(path, dpi=dpi)
    plt.close(fig)


def plot_loss_curves(panels, curve, path, suptitle, ylabel, columns, sharey=True, legend="inside"):
    """Loss per update (``curve``: a run's key), one panel per ``title: [(run, label, plot options), ...]``,
    ``columns`` panels a row (one y-axis for all unless not ``sharey``); each run in its scheme's colour, its
    label marked "(fails)" when it failed. ``legend="outside"``: one legend for all panels, below them, where it
    hides no curve."""
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(5 * columns, 3.7 * rows), squeeze=False, sharey=sharey, layout="constrained"
    )
    colors = scheme_colors(list(dict.fromkeys(run["scheme"] for lines in panels.values() for run, _, _ in lines)))
    for ax, (title, lines) in zip(axes.flat, panels.items()):
        labels = [label + (" (fails)" if run["fails"] else "") for run, label, _ in lines]
        for (run, _, options), label in zip(lines, labels):
            if run[curve]:
                ax.plot(*zip(*run[curve]), color=colors[run["scheme"]], label=label, **options)
        if not ax.lines:  # a zoom past where each run of the panel ended: say so rather than show an empty frame
            note = "no point in this range:\n" + ", ".join(labels)
            ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=8)
            ax.set(xticks=[], yticks=[])
        ax.set(title=title, xlabel="updates")
        ax.grid(alpha=0.3)
        if legend == "inside" and ax.lines:
            ax.legend(fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    if legend == "outside":
        labelled = {label: handle for ax in axes.flat for handle, label in zip(*ax.get_legend_handles_labels())}
        ncols = min(4, len(labelled))
        fig.legend(
            labelled.values(), labelled.keys(), loc="outside lower center", ncols=ncols, fontsize=7, handlelength=3.5
        )  # long enough handles that a seed's dashes show
    fig.suptitle(suptitle)
    save(fig, path, dpi=100)


PROFILE_LABELS = {
    "grad_norm": "||dL/dw_k|| (gradient norm of block k)",
    "rel_diff": "||x^ln_{k+1} - x^ln_k|| / ||x^ln_k||",
    "cosine": "cos(x^ln_{k+1}, x^ln_k)",
}


#: the fitted reference lines of a (scheme, profile) and their line styles: the paper's prediction,
#: and for Pre-LN also c/sqrt(k) (LN of a sum of k independent terms)
REFERENCES = {
    ("pre", "rel_diff"): {"c/k": "--", "c/sqrt(k)": ":"},
    ("post", "rel_diff"): {"c": "--"},
    ("residual", "rel_diff"): {"c": "--"},
    ("post", "grad_norm"): {"(1/2)^((N-k)/2)": "--"},
}
SHAPES = {**profiles.DIVERSITY_SHAPES, "(1/2)^((N-k)/2)": profiles.post_ln_gradient_shape}


def _figure_legend(fig, axes):
    """One legend under all panels (labels deduplicated); the figure's constrained layout makes room for it."""
    entries: Dict[str, Any] = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    fig.legend(list(entries.values()), list(entries), loc="outside lower center", ncol=min(len(entries), 6), fontsize=8)


def plot_profiles(summary, metric, path):
    """One panel per (stack, depth); x = block k, one curve per scheme (mean ± std over seeds),
    dashed/dotted: predicted shapes fitted to that scheme's curve (see ``REFERENCES``)."""
    schemes = list(summary)
    depths = sorted({int(d) for s in summary.values() for d in s})
    stacks = profiles.stacks_of(next(iter(summary[schemes[0]].values())))
    colors = scheme_colors(schemes)
    size = (4.2 * len(depths), 3.75 * len(stacks))
    fig, axes = plt.subplots(len(stacks), len(depths), figsize=size, squeeze=False, layout="constrained")
    for ax, (side, depth) in zip(axes.flat, itertools.product(stacks, depths)):
        for scheme in schemes:
            cell = summary[scheme].get(str(depth))
            if not cell:
                continue
            mean, std = np.array(cell[side][metric]["mean"]), np.array(cell[side][metric]["std"])
            ks = list(range(1, len(mean) + 1))
            ax.plot(ks, mean, color=colors[scheme], label=scheme)
            ax.fill_between(ks, mean - std, mean + std, color=colors[scheme], alpha=0.2)
            for name, style in REFERENCES.get((scheme, metric), {}).items() if len(mean) >= 2 else []:
                c = profiles.fit_shape(mean.tolist(), SHAPES[name])["c"]
                fitted = [c * SHAPES[name](k, len(mean)) for k in ks]
                ax.plot(ks, fitted, style, color=colors[scheme], lw=1, label=f"{scheme}: fitted {name}")
        if metric != "cosine":
            ax.set_yscale("log")
        xlabel = "block k" if metric == "grad_norm" else "block k (pair k, k+1)"
        ax.set(title=f"{side}, N = {depth}", xlabel=xlabel, ylabel=PROFILE_LABELS[metric] if depth == depths[0] else "")
        ax.grid(alpha=0.3)
    fig.suptitle(f"{PROFILE_LABELS[metric]} at initialisation (shaded: ± std over seeds)")
    _figure_legend(fig, axes)
    save(fig, path, dpi=90)


def plot_versus_depth(runs, path):
    """Model depth N on the x-axis: gradient norm of the bottom block relative to the top one, and
    the relative difference of the top pair of block inputs; mean ± std over seeds."""
    schemes = list(dict.fromkeys(r["scheme"] for r in runs))
    colors = scheme_colors(schemes)
    quantities = (
        ("grad_norm", lambda v: v[0] / v[-1], "gradient norm, block 1 / block N"),
        ("rel_diff", lambda v: v[-1], "||x^ln_N - x^ln_{N-1}|| / ||x^ln_{N-1}||"),
    )
    stacks = profiles.stacks_of(runs[0])
    fig, axes = plt.subplots(2, len(stacks), figsize=(5 * len(stacks), 7.5), squeeze=False, layout="constrained")
    for ax, ((metric, value, label), side) in zip(axes.flat, itertools.product(quantities, stacks)):
        for scheme in schemes:
            depths = sorted({r["layers"] for r in runs if r["scheme"] == scheme})
            stats = []
            for depth in depths:
                values = [value(r[side][metric]) for r in runs if (r["scheme"], r["layers"]) == (scheme, depth)]
                stats.append((statistics.fmean(values), statistics.pstdev(values)))
            means, stds = zip(*stats)
            ax.errorbar(depths, means, yerr=stds, marker="o", capsize=3, color=colors[scheme], label=scheme)
        ax.set(yscale="log", xlabel="layers per stack N", ylabel=label, title=side)
        ax.grid(alpha=0.3)
    fig.suptitle("Probes at initialisation versus depth (mean ± std over seeds)")
    _figure_legend(fig, axes)
    save(fig, path, dpi=90)


def plot_probes(summary, runs, out):
    for metric in PROFILE_LABELS:
        plot_profiles(summary, metric, out / f"{metric}.png")
    plot_versus_depth(runs, out / "versus_depth.png")
