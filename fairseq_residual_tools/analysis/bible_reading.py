"""The Bible study's reading, computed from the finished runs so that it stays true as runs are added: for each
depth, warmup and seed, who ends best, whether ResiDual's early gap to Pre-LN closes by the end, whether
``--residual-output-scale 0.5`` moves ResiDual's end point, where the designs after ResiDual (``hc``, ``siamese``,
``attn-res``) end against it, and who failed by the rule; for each depth and warmup
trained at several seeds, each scheme's spread and whether the order holds; for each depth and seed, what training
without warmup does to each scheme against its run with warmup (the paper's ablation); for each deeper depth, warmup
and seed, each scheme against itself at the shallower depth (who fails only at depth: the paper's E12D12 column), and
whether the schemes' order by BLEU at the shallowest depth holds there (the paper's E6D6 against its E18D18).

The early gap is the difference of validation losses at update ``EARLY``; the end gap the difference of each run's
best validation loss (where the plateau rule ended it):

    early = L_residual(EARLY) - L_pre(EARLY)        end = min_u L_residual(u) - min_u L_pre(u)

"closes": early > 0 and end <= 0; "narrows": 0 < end < early. Runs of a cell end at different updates (each where
the rule stopped it), so they are also compared at the same budget, the update ``U`` where the first of them ended:

    L_scheme(<= U) = min_{u <= U} L_scheme(u)

A sacreBLEU difference is one the test set tells apart where the chapter-level two-sided paired bootstrap,
Holm-corrected over the report's comparisons, gives p < ``significance.ALPHA`` (``bible_report.comparisons``); a claim
over seeds needs that at every seed (``significance.at_every_seed``)."""

from typing import Dict, List, Optional, Sequence

from .plateau import best_until
from .significance import at_every_seed, p_text, told_apart
from .study import format_cell, loss_at

EARLY = 1000  # where the project's short CPU runs stop, and ResiDual trails there (results/output-scale)
NAMES = {
    "post": "Post-LN",
    "pre": "Pre-LN",
    "residual": "ResiDual",
    "residual:scale=0.5": "ResiDual with output scale 0.5",
    "hc": "HC",
    "siamese": "SiameseNorm",
    "attn-res": "Attention Residuals",
    "deepnet": "DeepNet",
    "admin": "Admin",
    "tfixup": "T-Fixup",
    "b2t": "B2T",
    "dlcl": "DLCL",
}

AFTER_RESIDUAL = ("hc", "siamese", "attn-res")  # the designs that came after ResiDual: tested against it too
PAPER_BASELINES = ("deepnet", "admin", "tfixup", "b2t", "dlcl")  # the paper's tables hold ResiDual against these
# what each cell's reading holds against ResiDual: its option, the paper's baselines and the designs after it
AGAINST_RESIDUAL = {"residual:scale=0.5": "Output scale 0.5", **{s: NAMES[s] for s in PAPER_BASELINES + AFTER_RESIDUAL}}


def name(scheme: str) -> str:
    return NAMES.get(scheme, scheme)


def tests_where(compared: Sequence[Dict], **where) -> List[Dict]:
    """The rows of ``comparisons`` whose fields hold the values ``where`` gives."""
    return [c for c in compared if all(c.get(key) == value for key, value in where.items())]


def with_warmup(cold: Dict, runs: Sequence[Dict]) -> Optional[Dict]:
    """The run of ``runs`` that is ``cold``'s scheme, depth and seed with warmup (None while there is none)."""
    same = (cold["scheme"], cold["layers"], cold["seed"], True)
    return next((r for r in runs if (r["scheme"], r["layers"], r["seed"], r["warmup"]) == same), None)


def shallower(deep: Dict, runs: Sequence[Dict]) -> Optional[Dict]:
    """The run of ``runs`` that is ``deep``'s scheme, warmup and seed at the nearest depth below its (None: none)."""
    same = (deep["scheme"], deep["warmup"], deep["seed"])
    below = [r for r in runs if (r["scheme"], r["warmup"], r["seed"]) == same and r["layers"] < deep["layers"]]
    return max(below, key=lambda r: r["layers"], default=None)


def bleu_difference(compared: Optional[Dict]) -> str:
    """``compared``: one of ``comparisons``' rows (None: not tested, e.g. a run not decoded)."""
    if compared is None:
        return "BLEU not compared"
    if compared["p"] is None:
        return "the same sacreBLEU"
    told = "told apart" if told_apart(compared) else "within the test set's noise"
    return f"sacreBLEU {compared['delta']:+.2f} (Holm p {p_text(compared['p_holm'])}: {told})"


def early_gap(residual: Dict, pre: Dict) -> str:
    """Whether ResiDual's validation-loss gap to Pre-LN at update EARLY closes by their best losses."""
    early_r, early_p = loss_at(residual, EARLY), loss_at(pre, EARLY)
    end = residual["best_valid_loss"] - pre["best_valid_loss"]
    if early_r is None or early_p is None:
        return f"validation loss {end:+.3f} at the best (no point at update {EARLY:,})"
    early = early_r - early_p
    said = f"validation loss {early:+.3f} at update {EARLY:,}, {end:+.3f} at the best"
    if early <= 0:
        return f"{said}: ResiDual is not behind at update {EARLY:,}"
    if end <= 0:
        return f"{said}: the early gap closes"
    return f"{said}: the early gap {'narrows but does not close' if end < early else 'does not narrow'}"


def at_equal_updates(trained: Sequence[Dict]) -> Optional[str]:
    """The runs' best validation loss by the update where the first of them ended (None where all end together)."""
    first = min(r["end_update"] for r in trained)
    if all(r["end_update"] == first for r in trained):
        return None
    so_far = sorted((best_until(r["valid_curve"], first), name(r["scheme"])) for r in trained)
    who = " and ".join(name(r["scheme"]) for r in trained if r["end_update"] == first)
    listed = ", ".join(f"{scheme} {loss:.3f}" for loss, scheme in so_far)
    return f"At update {first:,}, where {who} ended, the best validation loss so far, lowest first: {listed}"


def cell_reading(runs: Sequence[Dict], compared: Sequence[Dict]) -> List[str]:
    """The lines for one depth, warmup and seed: its runs and the comparisons made within it."""
    by = {r["scheme"]: r for r in runs}
    trained = sorted((r for r in runs if not r["fails"]), key=lambda r: -r["bleu"])
    r0 = runs[0]
    head = f"E{r0['layers']}D{r0['layers']} {'with' if r0['warmup'] else 'without'} warmup, seed {r0['seed']}"
    ranked = ", ".join(f"{name(r['scheme'])} {r['bleu']:.2f}" for r in trained) or "none"
    lines = [f"**{head}** ({len(runs)} finished): BLEU, best first: {ranked}."]
    failed = [r for r in runs if r["fails"]]
    if failed:
        lines.append("Failed by the rule: " + "; ".join(f"{name(r['scheme'])} ({r['fails']})" for r in failed) + ".")

    def tested(scheme, against):
        return next((c for c in compared if (c["scheme"], c["against"]) == (scheme, against)), None)

    if len(trained) > 1:
        best, second = trained[0]["scheme"], trained[1]["scheme"]
        c = tested(best, second) or tested(second, best)
        if c is not None and c["scheme"] != best:  # tested the other way round: the best's difference is the negative
            c = dict(c, delta=-c["delta"])
        if c is not None and {best, second} != {"residual", "pre"}:  # that pair has its own line below
            lines.append(f"{name(best)} against {name(second)}: {bleu_difference(c)}.")
        same_budget = at_equal_updates(trained)
        if same_budget:
            lines.append(same_budget + ".")
    residual, pre = by.get("residual"), by.get("pre")
    if residual and pre and not residual["fails"] and not pre["fails"]:
        lines.append(
            f"ResiDual against Pre-LN: {early_gap(residual, pre)}; {bleu_difference(tested('residual', 'pre'))}."
        )
    for scheme, label in AGAINST_RESIDUAL.items():
        other = by.get(scheme)
        if other and residual and not other["fails"] and not residual["fails"]:
            end = other["best_valid_loss"] - residual["best_valid_loss"]
            lines.append(
                f"{label} against ResiDual: best validation loss {end:+.3f}, ended at update "
                f"{other['end_update']:,} against {residual['end_update']:,}; "
                f"{bleu_difference(tested(scheme, 'residual'))}."
            )
    return lines


def seeds_reading(results: Sequence[Dict], compared: Sequence[Dict]) -> List[str]:
    """For each depth and warmup trained at more than one seed: each scheme's BLEU over its seeds, whether the
    schemes trained at every seed rank alike at each, and ResiDual against Pre-LN at each seed where tested."""
    paragraphs = []
    for layers, warmup in dict.fromkeys((r["layers"], r["warmup"]) for r in results):
        runs = [r for r in results if (r["layers"], r["warmup"]) == (layers, warmup)]
        seeds = sorted({r["seed"] for r in runs})
        if len(seeds) < 2:
            continue
        schemes = list(dict.fromkeys(r["scheme"] for r in runs))
        listed = []
        for scheme in schemes:
            mine = [r for r in runs if r["scheme"] == scheme]
            cell = format_cell(mine, "bleu", 2)
            count = "" if any(r["fails"] for r in mine) else f" ({len(mine)} seed{'s' if len(mine) > 1 else ''})"
            listed.append(f"{name(scheme)} {cell}{count}")
        bleu = {(r["scheme"], r["seed"]): r["bleu"] for r in runs if not r["fails"]}
        common = [s for s in schemes if all((s, k) in bleu for k in seeds)]
        seen = ", ".join(map(str, seeds[:-1])) + f" and {seeds[-1]}"
        said = [
            f"**Over seeds, E{layers}D{layers} {'with' if warmup else 'without'} warmup** (seeds {seen}): BLEU, "
            f"mean ± half-range: {', '.join(listed)}."
        ]
        if len(common) > 1:
            orders = {k: ", ".join(name(s) for s in sorted(common, key=lambda s: -bleu[s, k])) for k in seeds}
            if len(set(orders.values())) == 1:
                said.append(f"The order by BLEU is the same at every seed: {orders[seeds[0]]}.")
            else:
                each = "; ".join(f"seed {k}: {order}" for k, order in orders.items())
                said.append(f"The order by BLEU differs between seeds: {each}.")
        where = dict(layers=layers, warmup=warmup, against_warmup=warmup, scheme="residual", against="pre")
        tests = tests_where(compared, **where)
        if len(tests) > 1:
            each = ", ".join(
                f"at seed {c['seed']} {bleu_difference(c)}" for c in sorted(tests, key=lambda c: c["seed"])
            )
            verdicts = {1: "above Pre-LN at every seed", -1: "below Pre-LN at every seed"}
            verdict = verdicts.get(at_every_seed(tests) or 0, "not told apart from Pre-LN at every seed")
            said.append(f"ResiDual against Pre-LN: {each}: {verdict}.")
        paragraphs.append(" ".join(said))
    return paragraphs


#: how ``two_runs`` names each run: (first, second, first again, second again, second beside a number)
WARMUP_LABELS = ("with warmup", "without warmup", "with it", "without it", "without")


def depth_labels(shallow: Dict, deep: Dict):
    at = [f"at E{r['layers']}D{r['layers']}" for r in (shallow, deep)]
    return (at[0], at[1], at[0], at[1], at[1])


def two_runs(first: Dict, second: Dict, labels, compared: Optional[Dict]) -> str:
    """One scheme's run ``first`` against its run ``second`` under another setting (``labels``, as
    ``WARMUP_LABELS``); ``compared``: their test, if made."""
    who, (one, two, one_again, two_again, two_short) = name(first["scheme"]), labels
    if first["fails"] and second["fails"]:
        return f"{who} fails {one} ({first['fails']}) and {two_again} ({second['fails']})"
    if second["fails"]:
        return f"{who} fails {two} ({second['fails']}), not {one_again} (BLEU {first['bleu']:.2f})"
    if first["fails"]:
        return f"{who} fails {one} ({first['fails']}), not {two_again} (BLEU {second['bleu']:.2f})"
    return (
        f"{who} BLEU {first['bleu']:.2f} {one}, {second['bleu']:.2f} {two_short}, best validation loss "
        f"{first['best_valid_loss']:.3f} and {second['best_valid_loss']:.3f}, ended at update "
        f"{first['end_update']:,} and {second['end_update']:,}: {bleu_difference(compared)}"
    )


def warmup_reading(results: Sequence[Dict], compared: Sequence[Dict]) -> List[str]:
    """For each depth and seed that has runs without warmup, each of them against its scheme with warmup."""
    paragraphs = []
    for layers, seed in dict.fromkeys((r["layers"], r["seed"]) for r in results if not r["warmup"]):
        said = []
        for cold in (r for r in results if (r["layers"], r["seed"], r["warmup"]) == (layers, seed, False)):
            warm = with_warmup(cold, results)
            if warm is None:  # its run with warmup has not finished yet
                continue
            scheme = cold["scheme"]
            where = dict(layers=layers, warmup=False, seed=seed, scheme=scheme, against=scheme, against_warmup=True)
            said.append(two_runs(warm, cold, WARMUP_LABELS, next(iter(tests_where(compared, **where)), None)))
        if said:
            paragraphs.append(
                f"**Without warmup against with it, E{layers}D{layers}, seed {seed}**: {'; '.join(said)}."
            )
    return paragraphs


def depth_reading(results: Sequence[Dict], compared: Sequence[Dict]) -> List[str]:
    """For each deeper depth, warmup and seed: each of its runs against its scheme at the nearest depth below
    (``shallower``), where that has finished too: who fails only at depth, and what depth does to the others."""
    paragraphs = []
    for layers, warmup, seed in dict.fromkeys((r["layers"], r["warmup"], r["seed"]) for r in results):
        said, below = [], set()
        for deep in (r for r in results if (r["layers"], r["warmup"], r["seed"]) == (layers, warmup, seed)):
            shallow = shallower(deep, results)
            if shallow is None:
                continue
            below.add(shallow["layers"])
            where = dict(layers=layers, warmup=warmup, seed=seed, scheme=deep["scheme"], against=deep["scheme"])
            test = next(iter(tests_where(compared, against_layers=shallow["layers"], **where)), None)
            said.append(two_runs(shallow, deep, depth_labels(shallow, deep), test))
        if said:
            than = " and ".join(f"E{n}D{n}" for n in sorted(below))
            head = f"E{layers}D{layers} against {than}, {'with' if warmup else 'without'} warmup, seed {seed}"
            paragraphs.append(f"**{head}**: {'; '.join(said)}.")
    return paragraphs


def order_reading(results: Sequence[Dict]) -> List[str]:
    """For each deeper depth, warmup and seed: the order by BLEU of the schemes trained there and at the shallowest
    depth of the same warmup and seed (the runs that failed at either aside, named), and which pairs swap places."""
    paragraphs = []
    cells = dict.fromkeys((r["layers"], r["warmup"], r["seed"]) for r in results)
    for layers, warmup, seed in cells:
        shallowest = min(d for d, w, k in cells if (w, k) == (warmup, seed))
        if layers == shallowest:
            continue
        at = {
            d: {r["scheme"]: r for r in results if (r["layers"], r["warmup"], r["seed"]) == (d, warmup, seed)}
            for d in (shallowest, layers)
        }
        both = [s for s in at[layers] if s in at[shallowest]]
        failed = [s for s in both if at[layers][s]["fails"] or at[shallowest][s]["fails"]]
        common = [s for s in both if s not in failed]
        if len(common) < 2:
            continue
        order = {d: sorted(common, key=lambda s: -at[d][s]["bleu"]) for d in at}
        rank = {d: {s: n for n, s in enumerate(order[d])} for d in at}
        swapped = [
            f"{name(a)} and {name(b)}"
            for n, a in enumerate(order[shallowest])
            for b in order[shallowest][n + 1 :]
            if rank[layers][a] > rank[layers][b]
        ]
        head = f"**The order at E{shallowest}D{shallowest} against E{layers}D{layers}, "
        head += f"{'with' if warmup else 'without'} warmup, seed {seed}** (by BLEU, best first"
        head += f"; failed at either depth, left out: {', '.join(map(name, failed))})" if failed else ")"
        listed = {d: ", ".join(name(s) for s in order[d]) for d in at}
        pairs = len(common) * (len(common) - 1) // 2
        verdict = (
            "the same order" if not swapped else f"{len(swapped)} of {pairs} pairs swap places: {'; '.join(swapped)}"
        )
        paragraphs.append(
            f"{head}: E{shallowest}D{shallowest} {listed[shallowest]}; E{layers}D{layers} {listed[layers]}: {verdict}. "
            "An order at one seed, not a ranking the test set tells apart (the comparisons above say which "
            "differences it does)."
        )
    return paragraphs


def reading(results: Sequence[Dict], compared: Sequence[Dict]) -> str:
    """Every cell's lines, in the order its first run appears in ``results``, then the spread over seeds
    (``seeds_reading``), what training without warmup did (``warmup_reading``) and what depth did
    (``depth_reading``); ``compared``: ``comparisons``' rows."""
    cells = dict.fromkeys((r["layers"], r["warmup"], r["seed"]) for r in results)
    parts = []
    for cell in cells:
        runs = [r for r in results if (r["layers"], r["warmup"], r["seed"]) == cell]
        tests = [c for c in compared if (c["layers"], c["warmup"], c["seed"]) == cell]
        parts.append(" ".join(cell_reading(runs, tests)))
    parts += seeds_reading(results, compared) + warmup_reading(results, compared) + depth_reading(results, compared)
    parts += order_reading(results)
    return "\n\n".join(parts) if parts else "No run has finished yet."
