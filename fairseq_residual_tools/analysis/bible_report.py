"""The Bible study's report (``bible_study``): the BLEU, sacreBLEU, end-update and loss tables by scheme, warmup and
depth beside the paper's IWSLT table, every run's line, the validation curves, and the block that README.md and
docs/results.md show between their markers (``publish``)."""

import json
import math
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple

from ..errors import ConfigError
from ..files import write_json, write_text
from ..markdown import table, write_block
from ..provenance import ROOT, describe
from ..training_log import RULE as FAILS_RULE
from .bible_reading import AFTER_RESIDUAL, PAPER_BASELINES, shallower, with_warmup
from .bible_reading import reading as computed_reading
from .plateau import Plateau, best_until
from .significance import RESAMPLES, Draws, p_text, paired_test, sentence_statistics, with_holm
from .study import ablation_table, failure_list, format_cell, losses_at_table

#: the paper's IWSLT-14 BLEU (shared/paper/README.md: its Table 1 and warmup ablation), for the report's side table
PAPER_IWSLT = {
    ("post", True): ("35.37", "fails"),
    ("pre", True): ("35.12", "35.18"),
    ("deepnet", True): ("35.34", "35.39"),
    ("admin", True): ("35.50", "35.67"),
    ("tfixup", True): ("34.88", "35.45"),
    ("residual", True): ("35.63", "36.09"),
    ("post", False): ("fails", "fails"),
    ("pre", False): ("32.28", "31.82"),
    ("residual", False): ("35.76", "35.57"),
}

#: the pages that show the study's table (``publish``), and the lines around it
PAGES = (ROOT / "README.md", ROOT / "docs" / "results.md")
#: the validation points shown beside the end: where the project's other figures stop (500-2,000) and 4,000, two
#: thirds of the way to where the study's recipe ends (Pre-LN E6D6: 6,000)
ALONG_THE_WAY = (500, 1000, 2000, 4000)
#: beside the records in OUT/runs: each scored run's test translations (Moses-detokenised) and, once, the untouched
#: test verses and the chapter of each: what sacreBLEU and the significance test read
HYPOTHESES, REFERENCES, CHAPTERS = ".test.detok", "test-references.txt", "test-chapters.txt"
#: the Bible recipe lowercases what the model learns: sacreBLEU scores with -lc (signature "case:lc")
LOWERCASED = True
UNDER_WAY_PNG = "under_way.png"  # the curves of the runs not finished yet, beside their snapshot
README_BLOCK = (
    "<!-- the Bible study's table, written from results/bible-study/results.json by the study: do not edit -->",
    "<!-- end of the Bible study's table -->",
)
#: the studies whose table the ``PAGES`` show, by report folder under results/, and the lines around each
BLOCKS = {
    "bible-study": README_BLOCK,
    "paper-table": (
        "<!-- the paper table's table, written from results/paper-table/results.json by the study: do not edit -->",
        "<!-- end of the paper table's table -->",
    ),
}


def published_folder(out) -> Optional[str]:
    """The name in ``BLOCKS`` of the report folder ``out`` (None: a report no page shows, e.g. a pilot's)."""
    out = Path(out).resolve()
    return out.name if out.parent == (ROOT / "results").resolve() and out.name in BLOCKS else None


def under_way_text(runs: Sequence[Dict], date: str) -> str:
    if not runs:
        return ""
    where = "; ".join(
        f"{r['name']} at update {r['update']} (best validation loss {r['best_valid_loss']:.3f})" for r in runs
    )
    return (
        f"Under way when this report was written ({date[:16].replace('T', ' ')} UTC; not results): {where}. "
        f"Their validation curves so far: [{UNDER_WAY_PNG}]({UNDER_WAY_PNG})."
    )


def zoom_start(runs: Sequence[Dict], settings: Dict) -> int:
    """Where the zoomed curves start: ``--zoom-from``, or half the longest run's updates (on a validation), so that
    the zoom shows how the runs end."""
    if settings.get("zoom_from") is not None:
        return settings["zoom_from"]
    step = settings["validate_every"]
    longest = max((r["valid_curve"][-1][0] for r in runs if r["valid_curve"]), default=2 * step)
    return max(step, longest // 2 // step * step)


def plot_curves(runs: Sequence[Dict], path: Path, title: str, zoom_from: Optional[int], whole: bool = False) -> None:
    """The runs' validation curves at ``path``: one panel per depth and warmup (from update ``zoom_from`` on if
    given; ``whole``: the whole curves beside those), one line per scheme and seed, the legend below the panels."""
    from .lm_study import curve_panels
    from .plotting import plot_loss_curves

    by_cell: Dict[str, List[Dict]] = {}
    for r in runs:
        by_cell.setdefault(f"E{r['layers']}D{r['layers']}, warmup {'yes' if r['warmup'] else 'no'}", []).append(r)
    panels = {}
    for cell, cell_runs in by_cell.items():
        for panel, lines in curve_panels(cell_runs, ".", zoom_from).items():
            if zoom_from is None or whole or "from update" in panel:
                panels[cell + panel.partition(" layers")[2]] = lines
    plot_loss_curves(
        panels,
        "valid_curve",
        path,
        title,
        "validation loss (label-smoothed CE, base 2)",
        columns=min(2, len(panels)),
        sharey=False,
        legend="outside",
    )


def cell_table(results: List[Dict], key: str, digits: int, meta: Optional[Dict] = None) -> str:
    """Rows: scheme x warmup (the paper's ablation layout), each with a run in the plan of ``meta`` (results.json's
    "plan"), else each with a finished run; columns: depths; mean ± half-range over the seeds that finished. A cell
    without a finished run reads "cut" when each of its planned runs was cut, "-" when the plan has none, else "not
    finished" (under way or not started)."""
    plan = (meta or {}).get("plan")
    if not meta or not plan:
        return ablation_table(results, key, digits, first="scheme", only_run=True, empty="not finished")
    cut, depths, rows = set(cut_runs(meta)), sorted({p["layers"] for p in plan}), []
    for scheme in dict.fromkeys(p["scheme"] for p in plan):
        for warmup in (True, False):
            planned = [p for p in plan if (p["scheme"], p["warmup"]) == (scheme, warmup)]
            if planned:
                rows.append([scheme, "yes" if warmup else "no"])
                rows[-1] += [
                    plan_cell(results, [p for p in planned if p["layers"] == d], cut, key, digits) for d in depths
                ]
    return table(["scheme", "warmup"] + [f"E{d}D{d}" for d in depths], rows)


def plan_cell(results: List[Dict], planned: Sequence[Dict], cut: Set[str], key: str, digits: int) -> str:
    """``cell_table``'s cell of the ``planned`` runs of one scheme, warmup and depth; where seeds of it are still to
    finish, how many of them have."""
    names = {p["name"] for p in planned}
    runs = [r for r in results if r["name"] in names]
    to_come = names - {r["name"] for r in runs} - cut
    if runs:
        return format_cell(runs, key, digits) + (
            f" ({len(runs)} of {len(runs) + len(to_come)} seeds)" if to_come else ""
        )
    if not names:
        return "-"
    return "cut" if names <= cut else "not finished"


#: the paper's WMT figures (average BLEU over newstest 2010-2016, B2T's protocol; shared/paper/README.md)
PAPER_WMT = {
    "pre": ("26.10", "26.57"),
    "post": ("26.59", "fails"),
    "dlcl": ("26.52", "26.90"),
    "tfixup": ("26.43", "26.94"),
    "deepnet": ("26.38", "27.13"),
    "admin": ("26.49", "26.86"),
    "b2t": ("26.53", "27.30"),
    "residual": ("26.85", "27.65"),
}


def paper_table() -> str:
    rows = [[scheme, "yes" if warmup else "no", *cells] for (scheme, warmup), cells in PAPER_IWSLT.items()]
    return table(["method", "warmup", "E6D6", "E12D12"], sorted(rows, key=lambda r: (r[1] == "no", r[0])))


def paper_wmt_table() -> str:
    return table(["method", "E6D6", "E18D18"], [[scheme, *cells] for scheme, cells in PAPER_WMT.items()])


def budget_section(results: List[Dict], settings: Dict) -> str:
    """With ``--budget``: each depth's budget, and where the plateau rule would have stopped each run (its best
    validation loss there) beside its end; empty without budgets."""
    budgets = dict(settings.get("budget") or [])
    if not budgets:
        return ""
    listed = ", ".join(f"E{d}D{d} {u:,} updates" for d, u in sorted(budgets.items()))
    rows = [
        [
            r["name"],
            f"{r['end_update']:,}",
            r["stop"],
            "-" if r.get("plateau_update") is None else f"{r['plateau_update']:,}",
        ]
        + ["-" if r.get("best_valid_loss_at_plateau") is None else f"{r['best_valid_loss_at_plateau']:.3f}"]
        + [f"{r['best_valid_loss']:.3f}" if r["best_valid_loss"] is not None else "-"]
        for r in results
    ]
    headers = ["run", "ended at", "why", "the plateau rule's stop", "best valid loss there", "best valid loss"]
    return (
        f"**Equal budgets**: {listed}; a run the rule fails at its plateau stops there. Where the plateau rule "
        f"would have stopped each run, and its best validation loss there:\n\n{table(headers, rows)}\n\n"
    )


def last_quarter_gain(run: Dict, rule: Plateau) -> str:
    """How much the run's best validation loss fell over the last quarter up to its end, the plateau rule's measure,
    in hundredths of a percent rounded down, so that a fall under the rule's fraction never reads as equal to it."""
    end = run["end_update"]
    before, now = best_until(run["valid_curve"], end * (1 - rule.window)), best_until(run["valid_curve"], end)
    if not before or now is None or end < rule.min_updates:
        return "-"
    return f"{math.floor((before - now) / before * 1e4 + 1e-9) / 100:.2f}%"


def run_list(results: List[Dict], rule: Plateau) -> str:
    rows = [
        [
            r["name"],
            r["stop"],
            r["end_update"],
            last_quarter_gain(r, rule),
            f"{r['best_valid_loss']:.3f}" if r["best_valid_loss"] is not None else "-",
            r["bleu"] if r["bleu"] is not None else "-",
            r["sacrebleu"] if r["sacrebleu"] is not None else "-",
            f"{r['train_seconds'] / 3600:.1f}",
            f"{r['seconds_per_update']:.2f}" if r.get("seconds_per_update") else "-",
            r["fails"] or ("reused" if r.get("reused_from") else "trained"),
        ]
        for r in results
    ]
    headers = [
        "run",
        "why it stopped",
        "at update",
        "last quarter",
        "best valid loss",
        "BLEU",
        "sacreBLEU",
        "hours",
        "s / update",
    ]
    headers.append("verdict")
    return table(headers, rows)


def plan_table(
    planned: Sequence[str], results: Sequence[Dict], running: Sequence[Dict], rule: Plateau, cut: Sequence[str] = ()
) -> str:
    """Every planned run in the plan's order and where it stands: how it ended, where it is, cut, or not started."""
    done, going = {r["name"]: r for r in results}, {r["name"]: r for r in running}
    rows = []
    for n, name in enumerate(planned, 1):
        if name in done:
            r = done[name]
            fails = f"; fails ({r['fails']})" if r["fails"] else ""
            how = "reused: ended" if r.get("reused_from") else "finished"
            where = f"{how} at update {r['end_update']}: {r['stop']}{fails}"
            best, quarter = r["best_valid_loss"], last_quarter_gain(r, rule)
        elif name in going:
            r = going[name]
            where, best = f"under way at update {r['update']}", r["best_valid_loss"]
            quarter = last_quarter_gain({**r, "end_update": r["update"]}, rule)
        else:
            where, best, quarter = "cut" if name in cut else "not started", None, "-"
        rows.append([n, name, where, f"{best:.3f}" if best is not None else "-", quarter])
    return table(["#", "run", "where it stands", "best valid loss", "last quarter"], rows)


def run_id(run: Dict) -> str:
    """``<name>-<key>``: the stem of a record's files in ``OUT/runs`` and its folder in ``--work``/runs."""
    return f"{run['name']}-{run['key']}"


def hypotheses_file(runs: Path, run: Dict) -> Path:
    return runs / f"{run_id(run)}{HYPOTHESES}"


def baselines(scheme: str) -> Sequence[str]:
    """What a scheme's translations are tested against: Pre-LN, the paper's baseline; ResiDual against Post-LN too
    (the paper compares it with both); and ResiDual for the paper's other baselines (DeepNet, Admin, T-Fixup, B2T,
    DLCL: its tables set ResiDual against each) and for what is built on it or came after it (its options,
    Hyper-Connections, SiameseNorm, Attention Residuals)."""
    if scheme == "residual":
        return ("pre", "post")
    against_residual = scheme.startswith("residual:") or scheme in AFTER_RESIDUAL + PAPER_BASELINES
    return ("pre", "residual") if against_residual else ("pre",)


class TestSet:
    """The untouched test verses and their chapters beside the records in ``runs``, each run's sentence statistics
    (computed once), and the chapter draws every comparison of one report shares."""

    def __init__(self, runs: Path):
        self.runs = runs
        self.references = (runs / REFERENCES).read_text(encoding="utf-8").splitlines()
        self.draws = Draws.of((runs / CHAPTERS).read_text(encoding="utf-8").splitlines(), "chapters")
        self.statistics: Dict[str, object] = {}

    @classmethod
    def beside(cls, runs: Path) -> Optional["TestSet"]:
        return cls(runs) if (runs / REFERENCES).is_file() and (runs / CHAPTERS).is_file() else None

    def of(self, run: Dict, folder: Optional[Path] = None):
        key = run_id(run)
        if key not in self.statistics:
            lines = hypotheses_file(folder or self.runs, run).read_text(encoding="utf-8").splitlines()
            self.statistics[key] = sentence_statistics(lines, self.references, LOWERCASED)
        return self.statistics[key]

    def test(self, system: Dict, baseline: Dict, baseline_folder: Optional[Path] = None) -> Dict:
        """``significance.paired_test`` of ``system``'s translations against ``baseline``'s (those beside the
        records, or in ``baseline_folder``)."""
        return paired_test(self.of(system), self.of(baseline, baseline_folder), self.draws)

    def describe(self) -> str:
        return self.draws.describe()


def comparisons(results: List[Dict], runs: Path) -> Tuple[List[Dict], str]:
    """Each scored run against its ``baselines`` of the same depth, warmup and seed, a cell's best run by BLEU
    against its second where no baseline pairs them, each run without warmup against its scheme with warmup of
    the same depth and seed (the paper's ablation), and each run at a deeper depth against its scheme at the nearest
    depth below, of the same warmup and seed: the chapter-level paired bootstrap (``significance``) on their test
    translations, Holm-corrected over all of them (the report's one family). Rows: the cell, scheme, against
    (``against_warmup``, ``against_layers`` where it is another depth: the run it is tested against), both
    sacreBLEUs, difference, interval, p and Holm's p; and the test's description ("" where nothing was compared)."""
    test_set = TestSet.beside(runs)
    if test_set is None:
        return [], ""
    rows: List[Dict] = []
    scored = [r for r in results if not r["fails"] and hypotheses_file(runs, r).is_file()]
    for layers, warmup, seed in dict.fromkeys((r["layers"], r["warmup"], r["seed"]) for r in scored):
        cell = {r["scheme"]: r for r in scored if (r["layers"], r["warmup"], r["seed"]) == (layers, warmup, seed)}
        pairs = [(s, b) for b in ("pre", "post", "residual") if b in cell for s in cell if s != b and b in baselines(s)]
        ranked = sorted(cell, key=lambda s: -cell[s]["bleu"])
        if len(ranked) > 1 and not {(ranked[0], ranked[1]), (ranked[1], ranked[0])} & set(pairs):
            pairs.append((ranked[0], ranked[1]))  # the best against its second
        for scheme, against in pairs:
            where = dict(layers=layers, warmup=warmup, seed=seed, scheme=scheme, against=against)
            rows.append({**where, "against_warmup": warmup, **test_set.test(cell[scheme], cell[against])})
    for cold in (r for r in scored if not r["warmup"]):
        warm = with_warmup(cold, scored)
        if warm is not None:
            scheme = cold["scheme"]
            where = dict(layers=cold["layers"], warmup=False, seed=cold["seed"], scheme=scheme, against=scheme)
            rows.append({**where, "against_warmup": True, **test_set.test(cold, warm)})
    for deep in scored:
        shallow = shallower(deep, scored)
        if shallow is not None:
            scheme = deep["scheme"]
            where = dict(layers=deep["layers"], warmup=deep["warmup"], seed=deep["seed"], scheme=scheme, against=scheme)
            where.update(against_warmup=deep["warmup"], against_layers=shallow["layers"])
            rows.append({**where, **test_set.test(deep, shallow)})
    return with_holm(rows), test_set.describe() if rows else ""


def extended_rows(folder: Path) -> List[Dict]:
    """Every comparison on the extensions' page (``bible_extend``; ``folder``: OUT/extended), each with the name of
    the extension it is against and Holm's p over the page (its one family), in the page's order."""
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
    return with_holm([dict(c, extension=r["name"]) for r in records for c in r["compared"]])


#: in a report's summary.md, the figures the report writes from the records (``render_figures``), never typed:
#: {{sacrebleu RUN}}, {{bleu RUN}}, {{best RUN}} (best validation loss) and {{RUN vs RUN}} (a comparison the report
#: or its extensions' page makes: the difference, first minus second, and its Holm p)
FIGURE = re.compile(r"\{\{(?:(sacrebleu|bleu|best) ([^\s{}]+)|([^\s{}]+) vs ([^\s{}]+))\}\}")


def render_figures(text: str, results: Sequence[Dict], compared: Sequence[Dict], out: Path) -> str:
    """``text`` with every ``FIGURE`` replaced by its value from the finished runs, the extensions' records and the
    comparisons (``comparisons``, ``extended_rows``); one that names no finished run or made comparison stops the
    report in one line."""
    extended = out / "extended"
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(extended.glob("*.json"))]
    runs = {r["name"]: r for r in [*results, *records]}
    named = {(r["scheme"], r["layers"], r["warmup"], r["seed"]): r["name"] for r in results}
    pairs: Dict[Tuple[str, str], Dict] = {}
    for c in compared:
        system = named[(c["scheme"], c["layers"], c["warmup"], c["seed"])]
        baseline = named[(c["against"], c.get("against_layers", c["layers"]), c["against_warmup"], c["seed"])]
        pairs[(system, baseline)] = c
    pairs.update({(c["name"], c["extension"]): c for c in extended_rows(extended)})

    def value(match) -> str:
        kind, run, first, second = match.groups()
        if kind:
            if run not in runs or runs[run].get("bleu") is None:
                raise ConfigError(f"summary.md: {match[0]}: {run} is not a scored run of this report")
            field = {"sacrebleu": "sacrebleu", "bleu": "bleu", "best": "best_valid_loss"}[kind]
            return f"{runs[run][field]:.{3 if kind == 'best' else 2}f}"
        row, sign = pairs.get((first, second)), 1
        if row is None:
            row, sign = pairs.get((second, first)), -1
        if row is None:
            raise ConfigError(f"summary.md: {match[0]}: not a comparison this report or its extensions' page makes")
        if row["p"] is None:
            return "the same sacreBLEU"
        return f"sacreBLEU {sign * row['delta']:+.2f}, Holm p {p_text(row['p_holm'])}"

    return FIGURE.sub(value, text)


def same_comparison(row: Dict) -> Tuple:
    """What a comparison is apart from its seed."""
    keys = ("layers", "warmup", "scheme", "against", "against_warmup", "against_layers")
    return tuple(row.get(k) for k in keys)


def every_seed_column(compared: List[Dict]) -> List[Tuple[str, str]]:
    """For each row, over the seeds its comparison was made at: the difference's mean ± half-range (the seed spread
    beside the test), and whether each seed tells the two apart with one sign (``significance.at_every_seed``):
    "above" / "below" / "no"; "-" and "one seed" where it was made at one."""
    from .significance import at_every_seed

    groups: Dict[Tuple, List[Dict]] = {}
    for c in compared:
        groups.setdefault(same_comparison(c), []).append(c)
    column = []
    for c in compared:
        group = groups[same_comparison(c)]
        if len(group) < 2:
            column.append(("-", "one seed"))
            continue
        deltas = [g["delta"] for g in group]
        spread = f"{sum(deltas) / len(deltas):+.2f} ± {(max(deltas) - min(deltas)) / 2:.2f}"
        column.append((spread, {1: "above", -1: "below", None: "no"}[at_every_seed(group)]))
    return column


def significance_table(compared: List[Dict], signature: str) -> str:
    """``comparisons``' rows as a table with the test's description; a sentence where nothing was compared."""
    if not compared:
        return "No cell has two scored runs yet."
    rows = []
    for c, (spread, every) in zip(compared, every_seed_column(compared)):
        rows.append([f"E{c['layers']}D{c['layers']}", "yes" if c["warmup"] else "no", c["seed"], c["scheme"]])
        against = c["against"] + (" with warmup" if c["against_warmup"] and not c["warmup"] else "")
        below = c.get("against_layers", c["layers"])
        against += f" at E{below}D{below}" if below != c["layers"] else ""
        rows[-1] += [against, f"{c['against_sacrebleu']:.2f}", f"{c['sacrebleu']:.2f}", f"{c['delta']:+.2f}"]
        rows[-1] += [f"[{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}]"]
        rows[-1] += ["-" if c["p"] is None else f"{c['p']:.4f}", "-" if c["p_holm"] is None else f"{c['p_holm']:.4f}"]
        rows[-1] += [spread, every]
    headers = ["depth", "warmup", "seed", "scheme", "against", "against: sacreBLEU", "sacreBLEU", "difference"]
    headers += ["95 % interval", "p", "Holm p", "over seeds", "at every seed"]
    return f"{table(headers, rows)}\n\nTest: {signature}; Holm's correction over every comparison in this table."


def test_set_size(runs: Path) -> str:
    chapters = runs / CHAPTERS
    return f"{len(set(chapters.read_text(encoding='utf-8').splitlines())):,}" if chapters.is_file() else "?"


def published_block(results: Dict, folder: str = "bible-study") -> str:
    """What README.md and docs/results.md show of the study's results.json (in results/``folder``): the BLEU table,
    how much of the plan has finished, and where the rest is."""
    runs, planned, cut = results["runs"], plan_names(results), cut_runs(results)
    report = f"`results/{folder}/README.md`"
    accounted = {r["name"] for r in runs} | set(cut)
    left = [name for name in planned if name not in accounted]
    status = f"{len(runs)} of the {len(planned)} planned runs finished"
    if cut:
        status += f"; {len(cut)} cut (each named, with the reason, in {report})"
    if len(left) > 3:  # a long plan is counted: the report names each run and where it stands
        status += f"; {len(left)} not yet trained (each named in {report})"
    elif left:
        status += f"; not yet trained: {', '.join(left)}"
    made = f"{results['provenance']['date'][:10]}, runs trained at {', '.join(sorted({r['git'] for r in runs}))}"
    reused = [r["name"] for r in runs if r.get("reused_from")]
    if reused:
        status += f"; {', '.join(reused)} reused from another study's records"
    budgets = dict((results.get("settings") or {}).get("budget") or [])
    end = "each run"
    if budgets:
        listed = ", ".join(f"E{d}D{d} {u:,} updates" for d, u in sorted(budgets.items()))
        end += f" (equal budgets: {listed}; a run the rule fails stops at its plateau)"
    return (
        f"{cell_table(runs, 'bleu', 2, results)}\n\nTest BLEU (tokenised, as the paper's IWSLT table) at the end of "
        f"{end}, mean ± half-range over seeds. {status}. From `results/{folder}/results.json` ({made})."
    )


def reused_text(results: Sequence[Dict]) -> str:
    """The line naming the runs reported from another study's records (``bible_reuse``), where each came from and
    the criterion it trained with; empty where none is."""
    reused = [r for r in results if r.get("reused_from")]
    if not reused:
        return ""
    each = "; ".join(f"`{r['name']}` from `{r['reused_from']}` ({r['criterion']})" for r in reused)
    return f"**Reused, not trained here** (the same recipe, seed and model, ending at this plan's budget): {each}."


def plan_names(meta: Dict) -> List[str]:
    """The names of the study's planned runs, in the order it trains them (``meta["plan"]``)."""
    return [p["name"] for p in meta.get("plan", [])]


def cut_runs(meta: Dict) -> List[str]:
    """The planned runs ``--cut-after`` or ``--cut`` left untrained (``meta["cut"]``, none when nothing was cut)."""
    return list((meta.get("cut") or {}).get("runs", []))


def cut_text(meta: Dict) -> str:
    """The cut runs and why, under the plan's table; empty when nothing was cut."""
    cut = meta.get("cut") or {}
    if not cut.get("runs"):
        return ""
    how, flags = [], []
    if cut.get("after") is not None:
        how.append(f"the plan after its run {cut['after']}")
        flags.append(f"--cut-after {cut['after']}")
    if cut.get("named"):
        how.append(f"{len(cut['named'])} named")
        flags.append(f"--cut {' '.join(cut['named'])}")
    return f"**Cut: {len(cut['runs'])} runs** ({' and '.join(how)}, not trained, `{' '.join(flags)}`): {cut['reason']}"


def publish(results: Dict, pages: Sequence[Path], folder: str = "bible-study") -> None:
    """Replace the block of the study in results/``folder`` on every page in ``pages`` with its
    ``published_block``."""
    for page in pages:
        write_block(page, *BLOCKS[folder], published_block(results, folder))


def write_report(results: List[Dict], meta: Dict, out: Path, running: Sequence[Dict] = ()):
    """The report (README.md, curves, results.json) of the finished ``results``; ``running``: ``under_way``'s
    snapshot of the runs not finished yet, named with the time of writing."""
    out.mkdir(parents=True, exist_ok=True)
    snapshot = under_way_text(running, meta["provenance"]["date"])
    so_far = out / UNDER_WAY_PNG
    so_far.unlink(missing_ok=True)  # a snapshot of other runs, or of none, is not left beside this report
    if running:
        when = meta["provenance"]["date"][:16].replace("T", " ")
        title = f"Bible es-en: under way at {when} UTC (not results)"
        plot_curves(running, so_far, title, zoom_start(running, meta["settings"]), whole=True)
    summary_file = out / "summary.md"
    reading = summary_file.read_text().strip() if summary_file.exists() else ""
    s = meta["settings"]
    rule = Plateau(fraction=s["plateau_fraction"], min_updates=s["plateau_min_updates"])
    plan = (
        'The plan, in the order it trains ("last quarter": how much the best validation loss fell over the last '
        f"quarter of the run so far, the plateau rule's measure: {rule.describe()}):\n\n"
        f"{plan_table(plan_names(meta), results, running, rule, cut_runs(meta))}"
    )
    for said in (cut_text(meta), reused_text(results)):
        plan += f"\n\n{said}" if said else ""
    if not results:
        write_json(out / "results.json", {**meta, "runs": []})  # the plan, which a few of its runs trained alone keep
        write_text(
            out / "README.md",
            "# The Bible study: no run has finished yet\n\n"
            + (f"{snapshot}\n\n" if snapshot else "")
            + f"{plan}\n\n"
            + (f"{reading}\n\n" if reading else "")
            + f"Started with:\n\n    {meta['command']}\n",
        )
        return
    compared, test_signature = comparisons(results, out / "runs")
    reading = render_figures(reading, results, compared, out)
    title = "Bible es-en, trained to the plateau (a CPU-scale run)"
    plot_curves(results, out / "valid_loss.png", title, None)
    zoom = zoom_start(results, meta["settings"])
    plot_curves(results, out / "valid_loss_zoom.png", title, zoom)
    write_json(out / "results.json", {**meta, "runs": results})
    data = meta["data"]
    signature = next((r["sacrebleu_signature"] for r in results if r.get("sacrebleu_signature")), "n/a")
    hours = sum(r["train_seconds"] for r in results) / 3600
    progress = (
        f"**{len(results)} of the {len(plan_names(meta)) or len(results)} planned runs have finished**"
        + (f", {len(cut_runs(meta))} were cut." if cut_runs(meta) else ".")
        + (f"\n\n{snapshot}" if snapshot else "")
        + f"\n\n{plan}"
    )
    budgeted = bool(s.get("budget"))
    heading = (
        "The paper's comparison at equal budgets: its baselines beside ResiDual on the Spanish-English Bible"
        if budgeted
        else "Where training ends: the schemes trained to their plateau on the Spanish-English Bible"
    )
    wmt = (
        "\n\nThe paper's WMT figures (average BLEU over newstest 2010-2016, B2T's protocol; 4.5M pairs, width 512, "
        f"GPUs), **the paper's, not measured here**:\n\n{paper_wmt_table()}"
        if budgeted
        else ""
    )
    depths = " / ".join(f"E{d}D{d}" for d in sorted({p["layers"] for p in meta.get("plan", [])} or {6, 12}))
    body = f"""# {heading}

A **CPU-scale run on another corpus**, not a reproduction of the paper's IWSLT-14 cells: width {s["dim"]} instead of
256, {data["pairs"]["train"]:,} training verse pairs (Reina-Valera 1909 -> World English Bible) instead of about
160,000 TED sentences, one CPU core per run. It answers, on real text, where each scheme ends, not how large the
paper's differences are.

{progress}

{reading}

## What the finished runs say (computed from their records)

{computed_reading(results, compared)}

## Test BLEU at the end (tokenised, lowercased: the measure of the paper's IWSLT table; mean ± half-range over seeds)

{cell_table(results, "bleu", 2, meta)}

The paper's IWSLT-14 figures (de->en, 160k pairs, width 256, GPUs; shared/paper/README.md), **the paper's, not
measured here**:

{paper_table()}{wmt}

## sacreBLEU (Moses-detokenised output against the untouched test verses, lowercased as the recipe lowercases)

{cell_table(results, "sacrebleu", 2, meta)}

Signature: `{signature}`.

## Which differences the test set can tell apart

A two-sided paired bootstrap of each sacreBLEU difference that resamples the test set's
{test_set_size(out / "runs")} whole chapters (verses of a chapter share names and style: resampled as if
independent they understate the noise), {RESAMPLES:,} resamples, the same draws for every comparison
(`analysis/significance.py`), of each run against Pre-LN of the same depth, warmup and seed, of ResiDual's options,
the paper's other baselines (`deepnet`, `admin`, `tfixup`, `b2t`, `dlcl`) and the designs that came after it (`hc`,
`siamese`, `attn-res`) also against ResiDual, of a cell's best run against
its second where neither is the other's baseline, of each run without warmup against its scheme with warmup of the
same depth and seed ("with warmup"), and of each run at a deeper depth against its scheme at the nearest depth below,
of the same warmup and seed (e.g. "pre at E6D6"). "p": how often the resampled difference, centred on zero, is at
least as far from zero as the one measured; "Holm p": p corrected by Holm's method over every comparison in this
table (one family). A difference with Holm p above 0.05 is one this test set cannot tell from noise. "at every
seed": where the comparison was made at several seeds, whether each tells the two apart with the same sign (a claim
that one scheme ends above another needs that); "over seeds": its difference's mean ± half-range over those seeds.

{significance_table(compared, test_signature)}

## Where each run ended

{budget_section(results, s)}Plateau: {rule.describe()}; at most {s["max_update_cap"]} updates. Updates to the end
(mean ± half-range):

{cell_table(results, "end_update", 0, meta)}

Best validation loss:

{cell_table(results, "best_valid_loss", 3, meta)}

Validation loss along the way, against the best at the end above: whether a gap early in training closes
("not logged": no run of the cell trained that far):

{losses_at_table(results, ("scheme", "warmup"), ALONG_THE_WAY, lambda d, u: f"E{d}D{d} at {u:,}")}

"fails" is `fairseq_residual_tools.training_log.divergence` ({FAILS_RULE}), judged on the whole run where it
stopped. A failed run is not decoded.

{failure_list(results)}

Every run ("last quarter": how much its best validation loss fell over the last quarter of the run, the rule's
measure; "hours": fairseq-train's wall time summed over the run's attempts, pauses and time shared with other jobs
included; "s / update": its pace, the median attempt's wall time per update, `training_log.seconds_per_update`):

{run_list(results, rule)}

Curves: [valid_loss.png](valid_loss.png) (whole runs), [valid_loss_zoom.png](valid_loss_zoom.png) (from update
{zoom}). Every run's numbers, curves, commands and provenance: [results.json](results.json) and
[runs/](runs/).

## Setting

- Data: `data-prep/prepare-bible.sh --src {s["src"]} --tgt {s["tgt"]} --bpe-merges {s["bpe_merges"]}` (modules
  {", ".join(f"{m['module']} {m['version']}" for m in data["modules"].values())}): {data["pairs"]["train"]:,} /
  {data["pairs"]["valid"]:,} / {data["pairs"]["test"]:,} pairs (train after cleaning / valid / test, the held-out
  splits whole chapters), {data["verses"]["chapters_dropped"]} chapters left out where the modules' verses do not pair.
- Models: {depths} `residual_transformer_iwslt_de_en` at width {s["dim"]}, FFN {4 * s["dim"]}, 4 heads, shared
  embeddings; attention and activation dropout 0.1, Adam (0.9, 0.98), weight decay 1e-4, label smoothing 0.1, fp32,
  no clipping: the paper's IWSLT recipe; dropout {s["dropout"]:g} (the paper's: 0.3). Peak lr {s["lr"]:g},
  inverse_sqrt over {s["warmup"]} warmup updates from 1e-7 (warmup "no": starting at the peak, constant for
  {s["warmup"]} updates, then the same decay); {s["max_tokens"]} tokens a batch; validation and a checkpoint every
  {s["validate_every"]} updates.
- BLEU: the last {s["average"]} interval checkpoints up to the end averaged, `fairseq-generate` beam 5, max length
  1.2 x source + 10, BPE removed.
- Machine: {s["jobs"]} runs at a time, one torch thread each, `nice -n 5`; {hours:.1f} hours of training summed over the
  {len(results)} runs. Runs trained at {", ".join(sorted({r.get("git") or "?" for r in results}))} (per run in
  results.json). This report: {describe(meta["provenance"])}

Regenerate (resumable; a finished run's record in runs/ is reused; a second invocation on the same `--work`
leaves each run the first is training to it and trains the rest):

    {meta["command"]}
"""
    write_text(out / "README.md", body)
