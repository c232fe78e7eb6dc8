"""``results/tables.md``: the paper's four tables, measured / paper / difference per cell.

A cell shows its score from ``results/cells/<cell>.json`` when that evaluation was made from a finished
training or says it was not (``--allow-unfinished``), with a dagger when the run departed from the
paper's setting (the reasons are listed under the table); "fails" when the training diverged (read from
that JSON, or from the cell's ``train.log`` once a launch has ended); otherwise the training's state
(``status``; a failed training's last log line is listed under the table) or "scheme not implemented".
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..markdown import table as markdown_table
from .cells import NOT_IMPLEMENTED, PAPER_DIR, ROOT, Cell, PaperTable, paper_tables
from .status import FAILED, FAILS, NOT_RUN, TRAINED, training_state

MEASURED = "measured"
DEFAULT_RESULTS = ROOT / "results" / "cells"
DEFAULT_WORK = ROOT / "checkpoints"
DEFAULT_OUT = ROOT / "results" / "tables.md"


def result_path(results_dir, cell: Cell) -> Path:
    """The cell's evaluation, written by ``evaluate``."""
    return Path(results_dir) / f"{cell.name}.json"


@dataclass
class Measured:
    status: str  # MEASURED, FAILS, a training state's description (status.TrainingState.describe), NOT_IMPLEMENTED
    scores: Dict[str, object] = field(default_factory=dict)
    deviations: List[str] = field(default_factory=list)
    detail: str = ""
    failed: bool = False  # the training failed: the detail (its last log line) is listed under the table


def measured(cell: Cell, results_dir: Path, work_dir: Optional[Path]) -> Measured:
    path = result_path(results_dir, cell)
    if path.is_file():
        record = json.loads(path.read_text(encoding="utf-8"))
        training = record.get("training", {})
        if record["status"] == FAILS:
            return Measured(FAILS, detail=record.get("divergence", ""))
        if record["status"] == MEASURED and (training.get("state") == TRAINED or record.get("unfinished")):
            return Measured(MEASURED, record.get("scores", {}), training.get("deviations", []))
        # a score made before the state was checked (or from an unfinished run): the training decides
    if not cell.implemented:
        return Measured(NOT_IMPLEMENTED)
    if not work_dir:
        return Measured(NOT_RUN)
    state = training_state(Path(work_dir) / cell.name)
    return Measured(state.describe(), detail=state.detail, failed=state.name == FAILED)


def _number(value) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) else None


def render(table: PaperTable, results_dir: Path, work_dir: Optional[Path]) -> str:
    with_warmup = any(not r.warmup for r in table.rows)
    header = ["method"] + (["warmup"] if with_warmup else [])
    header += [f"{column} {kind}" for column in table.columns for kind in ("measured", "paper", "diff")]
    rows, footnotes, failures = [], {}, {}
    for row in table.rows:
        cells = [row.method] + (["yes" if row.warmup else "no"] if with_warmup else [])
        for column in table.columns:
            cell, metric = table.cell_and_metric(row, column)
            result = measured(cell, results_dir, work_dir)
            paper = row.paper.get(column)
            value = _number(result.scores.get(metric)) if result.status == MEASURED else None
            if value is not None:
                shown = f"{value:.2f}"
                if result.deviations:
                    footnotes[cell.name] = result.deviations
                    shown += " †"
            else:
                shown = result.status
                if result.failed:
                    failures[cell.name] = f"{result.status}: {result.detail}"
            if value is not None and _number(paper) is not None:
                diff = f"{value - _number(paper):+.2f}"
            elif result.status == FAILS:
                diff = "both fail" if paper == FAILS else "fails here only"
            elif value is not None and paper == FAILS:
                diff = "trains here, fails in the paper"
            else:
                diff = ""
            cells += [shown, "fails" if paper == FAILS else f"{paper:.{table.decimals}f}", diff]
        rows.append(cells)
    lines = [f"## {table.title}", "", markdown_table(header, rows), "", f"Paper figures: {table.source}. {table.note}"]
    if footnotes:
        lines += ["", "† not the paper's setting, not a reproduction:"]
        lines += [f"- `{name}`: {'; '.join(dev)}" for name, dev in sorted(footnotes.items())]
    if failures:
        lines += ["", "Failed trainings (exit status: the last line of the log):"]
        lines += [f"- `{name}`: {text}" for name, text in sorted(failures.items())]
    return "\n".join(lines) + "\n"


def make_tables(results_dir, work_dir, out, paper_dir=PAPER_DIR) -> str:
    parts = [
        "# ResiDual: measured results beside the paper's",
        "",
        "Generated by `python scripts/make_tables.py` from `results/cells/**/*.json` (written by "
        "`scripts/evaluate.sh`), the cells' training logs, and the paper's figures in `results/paper/` "
        "(labelled there as the paper's). Each cell is scored as the paper scores its table "
        '(docs/reproduce.md). "fails": the training diverged (NaN, exploding or stalled loss in its log). '
        "Do not edit by hand.",
        "",
    ]
    for table in paper_tables(paper_dir).values():
        parts.append(render(table, Path(results_dir), Path(work_dir) if work_dir else None))
    text = "\n".join(parts)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text, encoding="utf-8")
    return text
