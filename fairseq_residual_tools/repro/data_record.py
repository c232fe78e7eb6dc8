"""What a cell was trained on, as its record names it, and whether that is the paper's data (docs/reproduce.md,
"Whose data").

The record names the data-bin and the sha256 of its dictionaries and binaries, and from data prep's ``summary.json``
beside it the recipe, the languages, the sentence pairs per split, the release archives it was made from and the
data-bin's sha256 when data prep wrote it. Data is the paper's when all of that says so: made by the dataset's own
recipe, from release archives with the checksums the package pins, with the recipe's own settings (its defaults: the
paper's), and not changed since (the same sha256). The tables compare only such cells with the paper's figures and
list every other cell apart, with its data named.

It also reads what sacreBLEU scores against: the untouched test text data prep keeps beside the data-bin
(``untouched_test_sets``).
"""

import json
from importlib import import_module
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional

from ..dataprep.download import DEFAULT_CHECKSUMS, Checksums
from ..dataprep.pipeline import databin_sha256, file_sha256
from ..errors import DataError

#: data prep's options that do not change the data it makes (where it is written, how, and from which mirror: the
#: archives' checksums are checked instead)
IGNORED_OPTIONS = {"out", "workers", "force", "quiet", "download_dir", "base_url", "checksums", "record_checksum"}


def data_record(data, dataset: str) -> dict:
    """The ``data`` field of a cell's record: the data-bin ``data`` named, and judged for a cell of ``dataset``."""
    data = Path(data)
    record: Dict[str, Any] = {
        "data_bin": str(data),
        "data_bin_sha256": databin_sha256(data) if data.is_dir() else None,
        "summary_json": None,
    }
    summary_path = data.parent / "summary.json"
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        translation = summary.get("translation", {})
        pair = [translation.get("source_lang"), translation.get("target_lang")]
        record.update(
            summary_json=str(summary_path),
            recipe=summary.get("recipe"),
            languages="-".join(pair) if all(pair) else ",".join(summary.get("lang_pairs", [])) or None,
            pairs=summary.get("pairs"),
            archives=summary.get("archives"),
            data_bin_sha256_at_prep=summary.get("data_bin_sha256"),
            tokenize=translation.get("tokenizer"),
            subword=summary.get("subword"),
            lowercase=translation.get("lowercase"),
            options=summary.get("options"),
            test_text=summary.get("test_text"),
        )
    problems = not_the_papers(dataset, record)
    record.update(papers_data=not problems, not_the_papers_because="; ".join(problems) or None)
    return record


class UntouchedText(NamedTuple):
    """A test set's reference text as its release ships it (data prep's ``test_text`` record), what sacreBLEU
    scores against: fairseq's sample id i is line ``line_of_sample[i]`` (line i when None)."""

    split: str  # fairseq's name of the test set in the data-bin
    name: str
    lines: List[str]
    line_of_sample: Optional[List[int]]
    lowercase: bool  # the recipe lowercased the text the model learnt: sacreBLEU scores with -lc
    path: str
    sha256: str
    official: Optional[str]  # the sacrebleu test set it is, e.g. "-t wmt14/full -l en-de"


def untouched_test_sets(data, src: str, tgt: str) -> Dict[str, UntouchedText]:
    """Split -> the untouched reference text of each test set of ``src`` -> ``tgt`` that data prep recorded beside
    the data-bin ``data``, checked against the sha256 it recorded. A data-bin without that record stops the
    evaluation in one line naming the recipe to run again."""
    data = Path(data)
    summary_path = data.parent / "summary.json"
    if not summary_path.is_file():
        raise DataError(
            f"{data} has no data prep summary.json beside it: sacreBLEU scores against the untouched test text that "
            "data-prep/prepare-*.sh records there; prepare the data with one of them (prepare-custom.sh for a corpus "
            "of your own)"
        )
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    rerun = f"bash data-prep/prepare-{summary.get('recipe')}.sh with the options in {summary_path}"
    if "test_text" not in summary:
        raise DataError(f"{data} was prepared before data prep recorded the untouched test text: re-run {rerun}")
    record = summary["test_text"]
    found = {}
    for entry in record["sets"]:
        files = entry["files"]
        if set(files) != {src, tgt}:
            continue
        path = summary_path.parent / files[tgt]["path"]
        if not path.is_file() or file_sha256(path) != files[tgt]["sha256"]:
            raise DataError(f"{path} is not the test text data prep recorded (missing or changed): re-run {rerun}")
        mapping = entry["line_of_sample"]
        line_of = json.loads((summary_path.parent / mapping).read_text(encoding="utf-8")) if mapping else None
        with open(path, encoding="utf-8", newline="\n") as f:  # as the sacrebleu command reads a reference file
            lines = [line.rstrip() for line in f]
        found[entry["split"]] = UntouchedText(
            split=entry["split"],
            name=entry["name"],
            lines=lines,
            line_of_sample=line_of,
            lowercase=record["lowercase"],
            path=str(path),
            sha256=files[tgt]["sha256"],
            official=entry.get("sacrebleu"),
        )
    if not found:
        raise DataError(f"{summary_path} records no untouched test text for {src}-{tgt}: re-run {rerun}")
    return found


def not_the_papers(dataset: str, record: dict) -> List[str]:
    """Why the data of ``record`` (a ``data_record``) is not the paper's data for ``dataset``; empty if it is."""
    if record["summary_json"] is None:
        return ["no data prep summary.json beside the data-bin: what it holds is unknown"]
    if record["recipe"] != dataset:
        return [f"made by data prep's {record['recipe']} recipe, not by {dataset}'s"]
    problems = []
    pinned = Checksums(DEFAULT_CHECKSUMS).data.get("archives", {})
    for name, checksum in (record.get("archives") or {}).items():
        expected = pinned.get(name, {}).get("sha256") or pinned.get(name, {}).get("md5")
        if expected is None:
            problems.append(f"the package pins no checksum of archive {name} ({DEFAULT_CHECKSUMS.name})")
        elif checksum != expected:
            problems.append(f"archive {name} has checksum {checksum}, not the release's {expected}")
    if not record.get("archives"):
        problems.append("its summary.json names no release archive (written before it did: run data prep again)")
    defaults = vars(import_module(f"..dataprep.{dataset}", __package__).build_parser().parse_args([]))
    for key, value in sorted((record.get("options") or {}).items()):
        if key not in IGNORED_OPTIONS and key in defaults and value != defaults[key]:
            problems.append(f"--{key.replace('_', '-')} {value} instead of the recipe's {defaults[key]}")
    at_prep, now = record.get("data_bin_sha256_at_prep"), record["data_bin_sha256"]
    if at_prep is None:
        problems.append("its summary.json has no sha256 of the data-bin (written before it did: run data prep again)")
    elif at_prep != now:
        problems.append(
            f"the data-bin changed after data prep (sha256 {_short(now)}, data prep wrote {_short(at_prep)})"
        )
    return problems


def describe(record: Optional[dict]) -> str:
    """The data of a record in one line, for the tables."""
    if not record:
        return "data not named (scripts/evaluate.sh records it)"
    data_bin = Path(record["data_bin"])
    parts = [f"data-bin {data_bin.parent.name}/{data_bin.name}"]  # no machine paths in the published tables
    if record.get("recipe"):
        parts.append(f"data prep's {record['recipe']} recipe")
    if record.get("languages"):
        parts.append(str(record["languages"]))
    if record.get("pairs"):
        parts.append(" / ".join(f"{n:,} {split}" for split, n in record["pairs"].items()) + " pairs")
    parts.append(f"sha256 {_short(record.get('data_bin_sha256'))}")
    return ", ".join(parts)


def _short(sha256: Optional[str]) -> str:
    return sha256[:12] if sha256 else "none (no data-bin)"
