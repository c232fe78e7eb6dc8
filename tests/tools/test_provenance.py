"""provenance records what a result depends on, without importing fairseq or torch."""

import re
import subprocess
import sys
from importlib import metadata

from fairseq_residual_tools import provenance


def test_provenance_records_versions_git_state_machine_and_utc_date():
    record = provenance.provenance()
    assert record["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["versions"]["torch"] == metadata.version("torch")
    assert record["versions"]["sacrebleu"] == metadata.version("sacrebleu")
    assert record["versions"]["fairseq"] is not None
    head = subprocess.run(
        ["git", "-C", str(provenance.ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert record["git"]["commit"] == head and isinstance(record["git"]["dirty"], bool)
    assert record["machine"]["cpu_count"] >= 1 and record["machine"]["processor"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", record["date"])


def test_recording_provenance_does_not_import_torch_or_fairseq():
    code = (
        "import sys; from fairseq_residual_tools.provenance import provenance; provenance(); "
        "print(sorted(m for m in ('torch', 'fairseq') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_git_state_outside_a_checkout_is_unknown(tmp_path):
    assert provenance.git_state(tmp_path) == {"commit": None, "dirty": None}
    assert provenance.describe_git({"commit": None, "dirty": None}) == "unknown (not a git checkout)"


def test_describe_names_versions_short_commit_and_uncommitted_changes():
    record = {
        "date": "2026-12-01T05:00:00+00:00",
        "versions": {"python": "3.11.7", "torch": "2.13.0", "tabulate": None},
        "git": {"commit": "0123456789abcdef" * 2 + "01234567", "dirty": True},
        "machine": {"platform": "Linux-x", "processor": "AMD EPYC", "cpu_count": 2, "memory_gb": 23.5},
    }
    assert provenance.describe(record) == (
        "Versions: python 3.11.7, torch 2.13.0. Code: git commit 0123456 with uncommitted changes. "
        "Machine: Linux-x, AMD EPYC, 2 CPUs, 24 GB. Date: 2026-12-01T05:00:00+00:00."
    )


def test_the_code_sha256_changes_with_any_byte_of_the_code_and_only_with_the_code(tmp_path):
    for root in (tmp_path / "a", tmp_path / "b"):
        (root / "pkg" / "sub").mkdir(parents=True)
        (root / "pkg" / "m.py").write_text("x = 1\n")
        (root / "pkg" / "sub" / "n.py").write_text("y = 2\n")
        (root / "settings.yaml").write_text("seed: 1\n")
    paths = ["pkg", "settings.yaml"]
    digest = provenance.code_sha256(paths, tmp_path / "a")
    assert re.fullmatch(r"[0-9a-f]{64}", digest)
    assert provenance.code_sha256(paths, tmp_path / "b") == digest  # another checkout of the same files
    (tmp_path / "a" / "pkg" / "sub" / "__pycache__").mkdir()
    (tmp_path / "a" / "pkg" / "sub" / "__pycache__" / "n.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "a" / "pkg" / "notes.txt").write_text("not code")
    assert provenance.code_sha256(paths, tmp_path / "a") == digest
    changed = []
    for path, text in [("pkg/sub/n.py", "y = 3\n"), ("settings.yaml", "seed: 2\n"), ("pkg/o.py", "")]:
        (tmp_path / "b" / path).write_text(text)
        changed.append(provenance.code_sha256(paths, tmp_path / "b"))
    assert len({digest, *changed}) == 4
    (tmp_path / "a" / "pkg" / "m.py").rename(tmp_path / "a" / "pkg" / "k.py")  # the same bytes, another module
    assert provenance.code_sha256(paths, tmp_path / "a") != digest
