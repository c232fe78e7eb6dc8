"""scripts/gpu_check.sh without a GPU: argument handling, --dry-run, the refusal to run, and the reading of
fairseq's JSON training logs that the GPU run's report is made of."""

import json
import subprocess

import pytest
import torch
from helpers import ROOT

from fairseq_residual_tools.bench import compiled
from fairseq_residual_tools.gpu_check import (
    bench_outcome,
    parse_args,
    report_markdown,
    run,
    speed_ratios,
    summarise_run,
    torchrun_outcome,
)
from fairseq_residual_tools.provenance import provenance

SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def run_script(*args):
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_dry_run_prints_every_precision_and_scheme_and_the_torchrun_launch(tmp_path):
    proc = run_script("--dry-run", "--updates", "200", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if "fairseq_cli.train" in line]
    assert len(lines) == 9
    for precision, flags in [
        ("fp16", " --fp16"),
        ("memory-efficient-fp16", " --memory-efficient-fp16 --fp16-init-scale 8"),
        ("amp", " --amp"),
    ]:
        runs = [line for line in lines if line.endswith(flags)]
        assert len(runs) == 3, precision
        assert {line.split("--residual-scheme ")[1].split()[0] for line in runs} == {"post", "pre", "residual"}
    assert all("--encoder-layers 18 --decoder-layers 18" in line and "--max-update 200" in line for line in lines)
    torchrun = [line for line in proc.stdout.splitlines() if "scripts/train.sh" in line]
    assert len(torchrun) == 1 and "--launcher torchrun" in torchrun[0]
    assert not (tmp_path / "out").exists()  # a dry run writes nothing


def test_dry_run_lists_the_benchmark_on_the_gpu_unless_skipped(tmp_path, capsys):
    run(parse_args(["--dry-run", "--out", str(tmp_path / "out")]))
    (bench,) = [line for line in capsys.readouterr().out.splitlines() if "scripts/bench.py" in line]
    assert bench.endswith(f"scripts/bench.py --device cuda --sizes wmt-e18d18 --out {tmp_path / 'out' / 'bench'}")
    run(parse_args(["--dry-run", "--skip-bench", "--out", str(tmp_path / "out")]))
    assert "scripts/bench.py" not in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_dry_run_lists_the_compiled_training_run_unless_skipped(tmp_path, capsys):
    run(parse_args(["--dry-run", "--out", str(tmp_path / "out")]))
    (compiled,) = [line for line in capsys.readouterr().out.splitlines() if "bench.compiled" in line]
    assert compiled.endswith(
        f"--device cuda --size wmt-e18d18 --scheme residual --out {tmp_path / 'out' / 'compiled.json'}"
    )
    run(parse_args(["--dry-run", "--skip-compiled", "--out", str(tmp_path / "out")]))
    assert "bench.compiled" not in capsys.readouterr().out


def test_compiled_run_trains_the_compiled_model_from_eager_weights_and_reports_one_line(tmp_path):
    argv = ["--size", "tiny", "--device", "cpu", "--backend", "eager", "--steps", "2", "--warmup", "1"]
    record = compiled.main([*argv, "--dropout", "0", "--out", str(tmp_path / "compiled.json")])
    assert json.loads((tmp_path / "compiled.json").read_text())["compiled"]["losses"] == record["compiled"]["losses"]
    eager, graphs = record["eager"]["losses"], record["compiled"]["losses"]
    assert len(eager) == len(graphs) == 3 and eager[0] > eager[-1]  # Adam steps on one batch: the loss falls
    assert record["first_loss_difference"] == 0.0  # same weights, same batch, no dropout
    assert record["compiled_over_eager_speed"] > 0
    assert compiled.outcome(record).startswith("residual at tiny, eager: compiled / eager training speed ")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_a_gpu_it_stops_with_one_line(tmp_path):
    proc = run_script("--out", str(tmp_path / "out"), "--work", str(tmp_path / "work"))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: no CUDA GPU visible")
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--schemes", "post,foo"], "unknown scheme or precision foo"),
        (["--precisions", "bf16"], "unknown scheme or precision bf16"),
        (["--schemes", "post,residual"], "must include pre"),
        (["--updates", "5"], "at least 20"),
    ],
)
def test_bad_arguments_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def train_inner(updates, loss, wps, loss_scale=None, gb_free=None):
    """One per-interval record as fairseq-train --log-format json writes it."""
    rec = {"epoch": 1, "update": 0.5, "loss": f"{loss}", "wps": f"{wps}", "num_updates": str(updates)}
    if gb_free is not None:
        rec["gb_free"] = str(gb_free)
    if loss_scale is not None:
        rec["loss_scale"] = str(loss_scale)
    return f"2026-12-01 06:00:00 | INFO | train_inner | {json.dumps(rec)}"


def test_summary_reads_losses_loss_scale_and_tokens_per_second():
    log = "\n".join(
        [
            "2026-12-01 06:00:00 | INFO | fairseq.trainer | NOTE: gradient overflow detected, ignoring gradient,"
            " setting loss scale to: 64.0",
            train_inner(10, 9.5, 1000.0, 64),  # the first interval (start-up) is left out of tokens/s
            train_inner(20, 8.25, 20000.0, 64),
            train_inner(30, 7.5, 22000.0, 128, gb_free=101.5),
            train_inner(40, 7.0, 21000.0, 128, gb_free=100.2),
            '2026-12-01 06:00:09 | INFO | train | {"epoch": 1, "train_loss": "7.9", "train_num_updates": "40"}',
        ]
    )
    run = summarise_run(log)
    assert run["updates"] == 40 and run["loss_finite"] is True
    assert run["losses"] == [(10, 9.5), (20, 8.25), (30, 7.5), (40, 7.0)]
    assert run["loss_scale"] == [(10, 64.0), (20, 64.0), (30, 128.0), (40, 128.0)]
    assert run["tokens_per_s"] == 21000.0 and run["overflow_messages"] == 1 and run["gpu_gb_free_min"] == 100.2
    diverged = summarise_run("\n".join([train_inner(10, 9.5, 1.0), train_inner(20, "nan", 1.0)]))
    assert diverged["loss_finite"] is False


def test_report_gives_each_schemes_speed_as_a_ratio_to_pre_ln():
    runs = {
        "post": {"tokens_per_s": 9000.0, "losses": [(10, 7.0)], "loss_finite": True, "loss_scale": [(10, 8.0)]},
        "pre": {"tokens_per_s": 10000.0, "losses": [(10, 7.0)], "loss_finite": True, "loss_scale": [(10, 8.0)]},
        "residual": {"error": "residual failed (exit status 1): boom; full log: x.log"},
    }
    assert speed_ratios(runs) == {"post": 0.9, "pre": 1.0}
    record = {
        "command": "bash scripts/gpu_check.sh",
        "provenance": provenance(),
        "cuda": "12.8",
        "gpus": ["NVIDIA H200"],
        "updates": 300,
        "precision": {"amp": runs},
    }
    table = report_markdown(record)
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("|")]
    assert ["amp", "post", "True", "7.000", "8, 8, 8", "9000", "0.900", "-"] in cells
    assert "GPUs: NVIDIA H200 (CUDA 12.8)" in table
    assert ["amp", "residual", "failed: residual failed (exit status 1): boom; full log: x.log", *[""] * 5] in cells


def test_torchrun_outcome_reads_world_size_and_ranks():
    config = "[2026-12-01][fairseq_cli.train][INFO] - {'distributed_training': {'distributed_world_size': 2, 'x': 1}}"
    joined = [f"[2026-12-01][fairseq.distributed.utils][INFO] - initialized host gpu-node as rank {r}" for r in (0, 1)]
    assert torchrun_outcome("\n".join([config, *joined])) == "world size 2, ranks in a process group: ['0', '1']"
    alone = config.replace("'distributed_world_size': 2", "'distributed_world_size': 1")
    assert torchrun_outcome(alone) == "world size 1, ranks in a process group: []"


def test_the_benchmark_outcome_gives_its_targets_and_the_report_shows_it():
    # ten rounds: the interval of the median is the 2nd to the 9th ratio (97.9 %)
    train = {"stock-pre": {"wall_s": [1.0] * 10}, "residual": {"wall_s": [1 / 0.99] * 5 + [1 / 0.995] * 5}}
    generate = {"stock-pre": {"wall_s": [1.0] * 10}, "residual": {"wall_s": [1 / 0.95] * 10}}
    bench = {
        "sizes": [
            {
                "size": {"name": "wmt-e18d18"},
                "train": train,
                "generate": generate,
                "memory": {"residual": {"peak_mb_ratio": 1.0}},
            }
        ]
    }
    outcome = bench_outcome(bench)
    assert "ResiDual training speed / stock Pre-LN 0.993 [0.990–0.995] (>= 0.99: holds)" in outcome
    assert "ResiDual peak training memory / stock Pre-LN 1.000 (<= 1.0: holds)" in outcome
    assert "ResiDual generation speed / stock Pre-LN 0.950 [0.950–0.950] (>= 0.99: does not hold)" in outcome
    record = {
        "command": "bash scripts/gpu_check.sh",
        "provenance": provenance(),
        "cuda": "12.8",
        "gpus": ["NVIDIA H200"],
        "updates": 300,
        "precision": {},
        "bench": {"command": "python scripts/bench.py --device cuda", "outcome": "finished; " + outcome},
    }
    assert f"## Benchmark on the GPU\n\n`python scripts/bench.py --device cuda`: finished; {outcome}" in (
        report_markdown(record)
    )
