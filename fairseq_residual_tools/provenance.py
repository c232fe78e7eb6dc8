"""Where a result came from: package versions, the checkout's git state, the machine, the date.

Every tool that writes a result records ``provenance()`` beside it. Versions are read from the
installed distributions' metadata, not by importing them: milliseconds, not fairseq's start-up.
"""

import hashlib
import os
import platform
import re
import subprocess
from contextlib import suppress
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Optional

ROOT = Path(__file__).resolve().parents[1]
#: the distributions a result's numbers depend on
PACKAGES = ("torch", "fairseq", "sacrebleu", "sacremoses", "subword-nmt", "sentencepiece", "numpy")


def _version(distribution: str) -> Optional[str]:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def versions() -> Dict[str, Optional[str]]:
    """Python's and each of PACKAGES' installed version (None where not installed)."""
    found = {"python": platform.python_version(), **{name: _version(name) for name in PACKAGES}}
    # the import package fairseq comes from the distribution fairseq-fixed here, from fairseq elsewhere
    found["fairseq"] = _version("fairseq-fixed") or found["fairseq"]
    return found


def git_state(root: Path = ROOT) -> Dict[str, object]:
    """The checkout's commit and whether tracked files differ from it (both None outside git)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def machine() -> Dict[str, object]:
    """Operating system, CPU model, CPU count and memory: what speed figures depend on."""
    processor, memory_gb = platform.processor() or platform.machine(), None
    with suppress(OSError):  # not Linux
        found = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        processor = found.group(1) if found else processor
    with suppress(AttributeError, ValueError):  # no sysconf (Windows)
        memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    return {
        "platform": platform.platform(),
        "processor": processor,
        "cpu_count": os.cpu_count(),
        "memory_gb": memory_gb,
    }


def code_sha256(paths, root: Path = ROOT) -> str:
    """sha256 over the relative paths and bytes of ``paths`` (files, and folders' ``*.py`` files, in path order):
    the code a result was computed with, comparable in any checkout (a clone, a branch, a tarball) without git."""
    digest = hashlib.sha256()
    for path in sorted({f for p in paths for f in ([root / p] if (root / p).is_file() else (root / p).rglob("*.py"))}):
        digest.update(f"{path.relative_to(root).as_posix()}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


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


def describe(record: Dict[str, Any]) -> str:
    """One line of Markdown for a report: versions, code, machine, date. ``record`` is a ``provenance()`` dict, or a
    results file written before there was one (the same keys at its top level, the machine as one line of text)."""
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
