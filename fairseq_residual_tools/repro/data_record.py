"""What a cell was trained on, as its record names it, and whether that is the paper's data (docs/reproduce.md,
"Whose data").

The record names the data-bin and the sha256 of its dictionaries and binaries, and from data prep's ``summary.json``
beside it the recipe, the languages, the sentence pairs per split, the release archives it was made from and the
data-bin's sha256 when data prep wrote it. Data is the paper's when all of that says so: made by the dataset's own
recipe, from release archives with the checksums the package pins, with the recipe's own settings (its defaults: the
paper's), and not changed since (the same sha256). The tables compare only such cells with the paper's figures and
list every other cell apart, with its data named.
"""

import json
from importlib import import_module
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..dataprep.download import DEFAULT_CHECKSUMS, Checksums
from ..dataprep.pipeline import databin_sha256

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
        )
    problems = not_the_papers(dataset, record)
    record.update(papers_data=not problems, not_the_papers_because="; ".join(problems) or None)
    return record


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
