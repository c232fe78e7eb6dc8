"""``results/tables.md``: the paper's four tables, measured / paper / difference per cell (docs/reproduce.md,
"Tables"): a score only from an evaluation of a finished training (or one marked ``--allow-unfinished``), compared
with the paper only when the cell was trained on the paper's data; other cells are listed under the table with
their data named."""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from ..files import write_text
from ..markdown import table as markdown_table
from .cells import NOT_IMPLEMENTED, ROOT, Cell, PaperTable, paper_tables
from .data_record import data_record
from .data_record import describe as describe_data
from .status import FAILED, FAILS, TRAINED, launch_records, training_state

MEASURED = "measured"
OTHER_DATA = "other data"  # shown for a cell trained on other data than the paper's, listed under its table
SACREBLEU_METRICS = {"sacrebleu", "EX", "XE", "ALL"}  # the tables' figures that are sacreBLEU (WMT, OPUS-100)
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
    failure: str = ""  # a failed training's last log line, listed under the table
    data: Optional[dict] = None  # the record's data (data_record.data_record); None: not named in it

    @property
    def papers_data(self) -> bool:
        return bool(self.data and self.data.get("papers_data"))


def measured(cell: Cell, results_dir, work_dir) -> Measured:
    path = result_path(results_dir, cell)
    if path.is_file():
        record = json.loads(path.read_text(encoding="utf-8"))
        training = record.get("training", {})
        if record["status"] == FAILS:
            return Measured(FAILS, data=record.get("data"))
        if record["status"] == MEASURED and (training.get("state") == TRAINED or record.get("unfinished")):
            return Measured(MEASURED, record.get("scores", {}), training.get("deviations", []), data=record.get("data"))
        # a score made before the state was checked (or from an unfinished run): the training decides
    if not cell.implemented:
        return Measured(NOT_IMPLEMENTED)
    cell_dir = Path(work_dir) / cell.name
    state = training_state(cell_dir)
    if state.name == FAILS:  # diverged, not evaluated yet: judged on the data its last launch trained on
        data = launch_records(cell_dir)[-1].get("data")
        return Measured(FAILS, data=data_record(data, cell.dataset) if data else None)
    return Measured(state.describe(), failure=state.detail if state.name == FAILED else "")


def render(table: PaperTable, results_dir, work_dir) -> str:
    with_warmup = any(not r.warmup for r in table.rows)
    header = ["method"] + (["warmup"] if with_warmup else [])
    header += [f"{column} {kind}" for column in table.columns for kind in ("measured", "paper", "diff")]
    rows, footnotes, failures, apart, signatures = [], {}, {}, {}, set()
    for row in table.rows:
        cells = [row.method] + (["yes" if row.warmup else "no"] if with_warmup else [])
        for column in table.columns:
            cell, metric = table.cell_and_metric(row, column)
            result = measured(cell, results_dir, work_dir)
            paper = row.paper[column]  # a figure or "fails"
            value = result.scores.get(metric) if result.status == MEASURED else None  # a float or None
            if result.status in (MEASURED, FAILS) and not result.papers_data:
                apart[cell.name] = _other_data(result, value, metric)
                cells += [OTHER_DATA, "fails" if paper == FAILS else f"{paper:.{table.decimals}f}", ""]
                continue
            if value is not None:
                shown = f"{value:.2f}"
                if metric in SACREBLEU_METRICS:
                    signatures.update(_signatures(result.scores))
                if result.deviations:
                    footnotes[cell.name] = result.deviations
                    shown += " †"
            else:
                shown = result.status
                if result.failure:
                    failures[cell.name] = f"{result.status}: {result.failure}"
            if isinstance(value, (int, float)) and isinstance(paper, (int, float)):  # measured; not "fails"
                diff = f"{value - paper:+.2f}"
            elif result.status == FAILS:
                diff = "both fail" if paper == FAILS else "fails here only"
            elif value is not None and paper == FAILS:
                diff = "trains here, fails in the paper"
            else:
                diff = ""
            cells += [shown, "fails" if paper == FAILS else f"{paper:.{table.decimals}f}", diff]
        rows.append(cells)
    lines = [f"## {table.title}", "", markdown_table(header, rows), "", f"Paper figures: {table.source}. {table.note}"]
    if signatures:
        lines += ["", "Measured sacreBLEU signature: " + ", ".join(f"`{sig}`" for sig in sorted(signatures))]
    if footnotes:
        lines += ["", "† not the paper's setting, not a reproduction:"]
        lines += [f"- `{name}`: {'; '.join(dev)}" for name, dev in sorted(footnotes.items())]
    if failures:
        lines += ["", "Failed trainings (exit status: the last line of the log):"]
        lines += [f"- `{name}`: {text}" for name, text in sorted(failures.items())]
    if apart:
        lines += ["", f"{OTHER_DATA}: trained on data other than the paper's, not compared with its figures:"]
        lines += [f"- `{name}`: {text}" for name, text in sorted(apart.items())]
    return "\n".join(lines) + "\n"


def _signatures(scores: Dict[str, object]) -> List[str]:
    """The sacreBLEU signature(s) of a cell's scores (OPUS-100 records one per tokenisation)."""
    one, several = scores.get("sacrebleu_signature"), scores.get("sacrebleu_signatures")
    return [str(one)] if one else [str(s) for s in several] if isinstance(several, list) else []


def _other_data(result: Measured, value, metric: str) -> str:
    """What a cell trained on other data than the paper's measured, and on which data."""
    outcome = "fails" if result.status == FAILS else f"{metric} {value:.2f}" if value is not None else "no score"
    why = (result.data or {}).get("not_the_papers_because")
    text = f"{outcome}; {describe_data(result.data)}" + (f"; not the paper's data: {why}" if why else "")
    return text + "".join(f"; {deviation}" for deviation in result.deviations)


def make_tables(results_dir, work_dir, out) -> str:
    parts = [
        "# ResiDual: measured results beside the paper's",
        "",
        "Generated by `python scripts/make_tables.py` from `results/cells/**/*.json` (written by "
        "`scripts/evaluate.sh`), the cells' training logs, and the paper's figures in `results/paper/` "
        "(labelled there as the paper's). Each cell is scored as the paper scores its table "
        "(docs/reproduce.md): IWSLT-14 by fairseq's tokenised BLEU; WMT'14 by sacreBLEU against the official "
        "references of each of newstest2010-2016, averaged (B2T's protocol); OPUS-100 by sacreBLEU per direction. "
        "Every sacreBLEU is against the test set's untouched text as released, never against the references as the "
        "recipe prepared them (tokenised, perhaps lowercased); each cell's JSON holds its signature, and the second "
        "figures (sacreBLEU for IWSLT-14, tokenised BLEU with compound splitting for WMT'14). "
        '"fails": the training diverged (NaN, exploding or stalled loss in its log). '
        f'Only cells trained on the paper\'s data are compared with its figures; "{OTHER_DATA}" marks the others, '
        "listed under each table with their data named. Do not edit by hand.",
        "",
        *(render(table, results_dir, work_dir) for table in paper_tables().values()),
    ]
    text = "\n".join(parts)
    write_text(out, text)
    return text
