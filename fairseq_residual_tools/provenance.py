"""Where a result came from: package versions, the checkout's git state, the machine, the date.

Every tool that writes a result (demo, study, probes, the reproduction harness, the benchmark)
records ``provenance()`` beside it, so a number can be traced to the code and environment
that produced it. Versions are read from the installed distributions' metadata, not by
importing them: recording provenance costs milliseconds, not fairseq's start-up.
"""

import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parents[1]

#: what a result's numbers depend on: label -> distribution names to try (fairseq's import
#: package ``fairseq`` comes from ``fairseq-fixed`` here, from ``fairseq`` elsewhere)
PACKAGES = {
    "torch": ("torch",),
    "fairseq": ("fairseq-fixed", "fairseq"),
    "sacrebleu": ("sacrebleu",),
    "sacremoses": ("sacremoses",),
    "subword-nmt": ("subword-nmt",),
    "sentencepiece": ("sentencepiece",),
    "numpy": ("numpy",),
}


def versions() -> Dict[str, Optional[str]]:
    """Python's and each of PACKAGES' installed version (None where not installed)."""
    found: Dict[str, Optional[str]] = {"python": platform.python_version()}
    for label, distributions in PACKAGES.items():
        found[label] = None
        for name in distributions:
            try:
                found[label] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def git_state(root: Path = ROOT) -> Dict[str, object]:
    """The checkout's commit and whether tracked files differ from it (both None outside git)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def machine() -> Dict[str, object]:
    """Operating system, CPU model, CPU count and memory: what speed figures depend on."""
    processor = platform.processor() or platform.machine()
    memory_gb = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            processor = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M).group(1)
        with open("/proc/meminfo", encoding="utf-8") as f:
            memory_gb = round(int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1)) / 2**20, 1)
    except (OSError, AttributeError):  # not Linux
        pass
    return {
        "platform": platform.platform(),
        "processor": processor,
        "cpu_count": os.cpu_count(),
        "memory_gb": memory_gb,
    }


def provenance() -> Dict[str, object]:
    """Versions, git state, machine and the UTC date, as one JSON-ready dict."""
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": versions(),
        "git": git_state(),
        "machine": machine(),
    }


def describe_git(git: Dict[str, object]) -> str:
    """``0123abc`` or ``0123abc with uncommitted changes``, for a report's text."""
    if isinstance(git, str):  # records written before provenance() held the short commit only
        return git[:7]
    if not git.get("commit"):
        return "unknown (not a git checkout)"
    return str(git["commit"])[:7] + (" with uncommitted changes" if git.get("dirty") else "")


def describe(record: Dict[str, object]) -> str:
    """One line of Markdown for a report: versions, code, machine, date.

    ``record`` is a ``provenance()`` dict, or a results file written before there was one (the same
    keys at its top level, the machine as one line of text).
    """
    versions_text = ", ".join(f"{name} {version}" for name, version in record["versions"].items() if version)
    m = record["machine"]
    if isinstance(m, str):
        machine_text = m
    else:
        memory = f", {m['memory_gb']:.0f} GB" if m.get("memory_gb") else ""
        machine_text = f"{m['platform']}, {m['processor']}, {m['cpu_count']} CPUs{memory}"
    return (
        f"Versions: {versions_text}. Code: git commit {describe_git(record['git'])}. "
        f"Machine: {machine_text}. Date: {record['date']}."
    )
