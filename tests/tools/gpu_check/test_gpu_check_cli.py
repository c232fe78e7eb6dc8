"""scripts/gpu_check.sh without a GPU: the dry run's plan, the refusals, and the check's own code path run end to end
on the CPU at tiny sizes (the parts a GPU run has, in seconds)."""

import json
import re
import subprocess
import sys
import tarfile

import pytest
import torch
from helpers import ROOT

from fairseq_residual_tools.gpu_check import plan

SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def run_script(*args, **kwargs):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT, **kwargs)


@pytest.mark.slow
def test_the_dry_run_lists_every_run_with_its_estimate_within_nine_minutes_and_writes_nothing(tmp_path):
    proc = run_script("--dry-run", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = re.findall(r"^- (run|scoring) (.+?): about (\d+) s", proc.stdout, re.M)
    labels = [label for _, label in ((k, lab) for k, lab, _ in runs)]
    assert len([lab for lab in labels if lab.split()[0] in plan.PRECISIONS]) == 12  # 4 precisions x post, pre, residual
    assert sum(1 for kind, lab, _ in runs if kind == "run" and " e6d6 " in f" {lab} " or " e12d12 " in lab) >= 16
    assert len([k for k, _, _ in runs if k == "scoring"]) == 16  # ResiDual with its output scaled too; hc: opt-in
    assert "--residual-output-scale 0.5" in proc.stdout.split("- run residual-c0.5 e12d12 no-warmup")[1]
    assert "--schemes residual " in proc.stdout.split("- run bench")[1] and "- run hc " not in proc.stdout
    assert {"torchrun", "bench", "compiled"} <= set(labels)
    assert all(int(seconds) > 0 for _, _, seconds in runs)
    total = re.search(r"default parts in all: about (\d+) s", proc.stdout)
    assert total and int(total.group(1)) <= plan.BUDGET_S
    assert "(opt-in: not in the default run)" in proc.stdout.split("## compiled")[1].splitlines()[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_a_gpu_it_stops_with_one_line(tmp_path):
    proc = run_script("--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: no CUDA GPU visible")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


def test_help_lists_every_option_of_the_script_bundle_included():
    """--help printed the Python part's options only: --bundle, which the shell wrapper handles, was missing."""
    proc = run_script("--help")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("usage: scripts/gpu_check.sh")
    for option in ("--bundle DIR", "--dry-run", "--cpu-tiny", "--calibrate", "--out OUT"):
        assert option in proc.stdout, option


def test_bundle_given_to_the_python_part_directly_names_the_script(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_residual_tools.gpu_check", "--bundle", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        f"scripts/gpu_check.sh: error: --bundle is taken by scripts/gpu_check.sh before Python starts: run bash "
        f"scripts/gpu_check.sh --bundle {tmp_path} ..."
    )


def test_a_bundle_that_is_not_one_stops_the_check_in_one_line_before_anything_runs(tmp_path):
    proc = run_script("--bundle", str(tmp_path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: {tmp_path} has no manifest.json: not a complete bundle (make one with make gpu-bundle)"
    ]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_checks_code_path_runs_end_to_end_on_the_cpu_at_tiny_sizes(tmp_path, demo_databin):
    out = tmp_path / "out"
    argv = [
        "--cpu-tiny",
        "--schemes",
        "pre",
        "--precisions",
        "amp,fp16",
        "--depths",
        "1",
        "--skip-bench",
        "--skip-torchrun",
        "--out",
        str(out),
        "--work",
        str(tmp_path / "work"),
        "--data-root",
        str(demo_databin.root),
    ]
    proc = run_script(*argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == ["gpu_check.json", "logs.tar.gz", "report.md"]  # within the 8 files a GPU run may return
    record = json.loads((out / "gpu_check.json").read_text())
    amp = record["precision"]["amp"]["pre"]
    assert amp["loss_finite"] is True and amp["updates"] == plan.CPU_TINY.precision_updates
    assert "needs CUDA" in record["precision"]["fp16"]["pre"]["skipped"]
    assert set(record["claims"]) == {"pre e1d1 warmup", "pre e1d1 no-warmup"}
    for claim in record["claims"].values():
        assert claim["updates"] == plan.CPU_TINY.claims_updates and 0.0 <= claim["bleu"] <= 100.0
        assert "BLEU" in claim["bleu_signature"] or "nrefs" in claim["bleu_signature"]
    assert [t["part"] for t in record["timings"]] == ["bundle install, start, plan", "data", "precision", "claims"]
    report = (out / "report.md").read_text()
    assert "Run on the CPU at tiny sizes" in report
    rows = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in report.splitlines()}
    assert f"{plan.CPU_TINY.claims_updates} updates" in rows[("Pre-LN", "yes")]
    with tarfile.open(out / "logs.tar.gz") as tar:
        names = tar.getnames()
    assert "logs/amp-pre.log" in names and "logs/claims-pre-e1d1-warmup.log" in names
    assert "logs/bleu-pre-e1d1-no-warmup.log" in names
