"""A Bible report's committed records scored again from their committed translations: sacreBLEU against the untouched
test verses, and every extension's comparisons made again with the chapter-level test.

    python -m fairseq_residual_tools.analysis.rescore results/bible-study results/bible-study/dropout-0.3 ...

Until 2026-12-07 the study scored sacreBLEU against fairseq-generate's ``T-`` lines detokenised (the references after
Moses tokenisation, lowercasing and BPE) under a ``case:mixed`` signature. For each FOLDER this writes the untouched
test verses and their chapters from ``--data`` (the Bible recipe's ``test_text`` record) beside the records
(``FOLDER/runs``, and ``FOLDER/extended`` where there is one), sets each scored record's ``sacrebleu`` and
``sacrebleu_signature`` from its translations (``.test.detok``, which the runs wrote), keeps what it had as
``sacrebleu_against_round_trip``, and makes each extension's comparisons again (``bible_extend.compare``). A record
scored this way already is left as it is, and said so. The report itself is rewritten by ``bible_study
--report-only`` with the folder's command (its results.json).
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List

from ..errors import ConfigError, exit_on_user_error
from ..files import write_json, write_lines
from ..provenance import ROOT
from . import bible_extend, bible_study
from .bible_report import CHAPTERS, REFERENCES, hypotheses_file

#: the file the records' references were in before: the detokenised T- lines
ROUND_TRIP_REFERENCES = "test-references.detok"


def write_test_text(folder: Path, test: Dict) -> None:
    """The untouched verses and their chapters in ``folder``; the round-tripped references it held before, gone."""
    write_lines(folder / REFERENCES, test["references"])
    write_lines(folder / CHAPTERS, test["documents"])
    (folder / ROUND_TRIP_REFERENCES).unlink(missing_ok=True)


def rescore(record: Dict, folder: Path, test: Dict) -> bool:
    """Set ``record``'s sacreBLEU from its translations in ``folder``; False where it holds that score already."""
    from ..repro.scoring import reference_sacrebleu  # fairseq: loaded only to score

    lines = hypotheses_file(folder, record).read_text(encoding="utf-8").splitlines()
    score, signature = reference_sacrebleu(lines, test["references"], test["lowercase"])
    if (record.get("sacrebleu"), record.get("sacrebleu_signature")) == (score, signature):
        return False
    if "sacrebleu_against_round_trip" not in record:
        before = {"sacrebleu": record["sacrebleu"], "signature": record.get("sacrebleu_signature")}
        record["sacrebleu_against_round_trip"] = before
    record.update(sacrebleu=score, sacrebleu_signature=signature)
    return True


def rescore_folder(report: Path, test: Dict) -> List[str]:
    """Every scored record of one report (``runs/``, ``extended/``); what changed, a line each."""
    runs, changed = report / "runs", []
    if not runs.is_dir():
        raise ConfigError(f"{report} has no runs/ folder: not a Bible study's report")
    write_test_text(runs, test)
    records = {}
    for path in sorted(runs.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        records[record["name"]] = record
        if record["bleu"] is not None and rescore(record, runs, test):
            write_json(path, record)
            changed.append(
                f"{path}: sacreBLEU {record['sacrebleu_against_round_trip']['sacrebleu']} -> {record['sacrebleu']}"
            )
    extended = report / bible_extend.EXTENDED
    if extended.is_dir():
        write_test_text(extended, test)
        for path in sorted(extended.glob("*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            if record["bleu"] is None:
                continue
            scored = rescore(record, extended, test)
            others = [records[c["name"]] for c in record["compared"]]
            compared = bible_extend.compare(record, extended, others, runs)
            if scored or compared != record["compared"]:
                record["compared"] = compared
                write_json(path, record)
                changed.append(f"{path}: sacreBLEU {record['sacrebleu']}, {len(compared)} comparisons made again")
        bible_extend.write_readme(extended)
    return changed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="fairseq-residual-rescore", description=__doc__.splitlines()[0])
    p.add_argument("reports", nargs="+", type=Path, help="Bible study report folders (each with runs/)")
    p.add_argument(
        "--data",
        type=Path,
        default=ROOT / "work" / "bible-study" / "data",
        help="the Bible recipe's output folder (prepare-bible.sh --out): its test_text record",
    )
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    test = bible_study.test_text(args.data / "bin")
    for report in args.reports:
        changed = rescore_folder(report, test)
        said = "\n  ".join(changed) if changed else "nothing to do: every record holds this score already"
        print(f"{report}:\n  {said}")
    return 0


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error(main))
