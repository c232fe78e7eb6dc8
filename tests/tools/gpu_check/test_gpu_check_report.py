"""What the GPU check reads from fairseq's logs and writes into report.md."""

import json

from helpers import ROOT

from fairseq_residual_tools.gpu_check.report import (
    bench_outcome,
    claims_table,
    report_markdown,
    speed_ratios,
    summarise_training,
    torchrun_outcome,
)
from fairseq_residual_tools.provenance import provenance


def train_inner(updates, loss, wps, loss_scale=None, gb_free=None):
    """One per-interval record as fairseq-train --log-format json writes it."""
    rec = {"epoch": 1, "update": 0.5, "loss": f"{loss}", "wps": f"{wps}", "num_updates": str(updates)}
    if gb_free is not None:
        rec["gb_free"] = str(gb_free)
    if loss_scale is not None:
        rec["loss_scale"] = str(loss_scale)
    return f"2026-12-01 06:00:00 | INFO | train_inner | {json.dumps(rec)}"


def cells(markdown):
    return [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines() if line.startswith("|")]


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
    run = summarise_training(log)
    assert run["updates"] == 40 and run["loss_finite"] is True
    assert run["losses"] == [(10, 9.5), (20, 8.25), (30, 7.5), (40, 7.0)]
    assert run["loss_scale"] == [(10, 64.0), (20, 64.0), (30, 128.0), (40, 128.0)]
    assert run["tokens_per_s"] == 21000.0 and run["overflow_messages"] == 1 and run["gpu_gb_free_min"] == 100.2
    diverged = summarise_training("\n".join([train_inner(10, 9.5, 1.0), train_inner(20, "nan", 1.0)]))
    assert diverged["loss_finite"] is False


def test_torchrun_outcome_reads_world_size_and_ranks():
    config = "[2026-12-01][fairseq_cli.train][INFO] - {'distributed_training': {'distributed_world_size': 2, 'x': 1}}"
    joined = [f"[2026-12-01][fairseq.distributed.utils][INFO] - initialized host gpu-node as rank {r}" for r in (0, 1)]
    assert torchrun_outcome("\n".join([config, *joined])) == "world size 2, ranks in a process group: ['0', '1']"
    alone = config.replace("'distributed_world_size': 2", "'distributed_world_size': 1")
    assert torchrun_outcome(alone) == "world size 1, ranks in a process group: []"


def test_the_benchmark_outcome_gives_its_targets():
    # ten rounds: the interval of the median is the 2nd to the 9th ratio (97.9 %)
    train = {"stock-pre": {"wall_s": [1.0] * 10}, "residual": {"wall_s": [1 / 0.99] * 5 + [1 / 0.995] * 5}}
    generate = {"stock-pre": {"wall_s": [1.0] * 10}, "residual": {"wall_s": [1 / 0.95] * 10}}
    size = {"size": {"name": "wmt-e18d18"}, "train": train, "generate": generate}
    outcome = bench_outcome({"sizes": [{**size, "memory": {"residual": {"peak_mb_ratio": 1.0}}}]})
    assert "ResiDual training speed / stock Pre-LN 0.993 [0.990–0.995] (>= 0.99: holds)" in outcome
    assert "ResiDual peak training memory / stock Pre-LN 1.000 (<= 1.0: holds)" in outcome
    assert "ResiDual generation speed / stock Pre-LN 0.950 [0.950–0.950] (>= 0.99: does not hold)" in outcome


def claim(bleu, fails, updates):
    return {"bleu": bleu, "fails": fails, "updates": updates}


def test_claims_table_puts_each_measured_cell_beside_the_papers_warmup_ablation():
    paper = json.loads((ROOT / "results" / "paper" / "warmup_ablation.json").read_text())
    claims = {
        "post e6d6 warmup": claim(40.25, None, 1500),
        "post e12d12 no-warmup": claim(0.5, "stuck on a plateau (...)", 700),
        "pre e6d6 no-warmup": {"error": "pre e6d6 no-warmup failed (exit status 1): boom"},
    }
    rows = cells(claims_table(claims, (6, 12), paper))
    assert rows[0] == ["method", "warmup", "E6D6 (measured)", "E12D12 (measured)", "E6D6 (paper)", "E12D12 (paper)"]
    assert ["Post-LN", "yes", "40.25, trained, 1500 updates", "not run", "35.37", "fails"] in rows
    assert ["Post-LN", "no", "not run", "0.50, fails (stuck on a plateau (...)), 700 updates", "fails", "fails"] in rows
    assert [
        "Pre-LN",
        "no",
        "failed: pre e6d6 no-warmup failed (exit status 1): boom",
        "not run",
        "32.28",
        "31.82",
    ] in rows


def test_claims_table_lists_scaled_residual_and_hc_after_the_papers_rows_with_no_paper_cells():
    paper = json.loads((ROOT / "results" / "paper" / "warmup_ablation.json").read_text())
    claims = {
        "residual e6d6 warmup": claim(30.5, None, 900),
        "residual-c0.5 e6d6 warmup": claim(33.25, None, 880),
        "residual-c0.5 e12d12 no-warmup": claim(31.0, None, 500),
        "hc e12d12 warmup": claim(29.5, None, 450),
    }
    rows = cells(claims_table(claims, (6, 12), paper))
    scaled = [row for row in rows if row[0] == "ResiDual, --residual-output-scale 0.5"]
    assert scaled == [
        ["ResiDual, --residual-output-scale 0.5", "yes", "33.25, trained, 880 updates", "not run", "-", "-"],
        ["ResiDual, --residual-output-scale 0.5", "no", "not run", "31.00, trained, 500 updates", "-", "-"],
    ]
    assert rows.index(scaled[0]) == len(rows) - 4  # after the paper's six rows
    assert rows[-2:] == [
        ["Hyper-Connections (4 streams)", "yes", "not run", "29.50, trained, 450 updates", "-", "-"],
        ["Hyper-Connections (4 streams)", "no", "not run", "not run", "-", "-"],
    ]
    assert ["ResiDual", "yes", "30.50, trained, 900 updates", "not run", "35.63", "36.09"] in rows


def test_report_gives_speed_ratios_to_pre_ln_times_beside_estimates_and_the_node_packages():
    runs = {
        "post": {
            "tokens_per_s": 9000.0,
            "losses": [(10, 7.0)],
            "loss_finite": True,
            "loss_scale": [(10, 8.0)],
            "updates": 10,
        },
        "pre": {
            "tokens_per_s": 10000.0,
            "losses": [(10, 7.0)],
            "loss_finite": True,
            "loss_scale": [(10, 8.0)],
            "updates": 10,
        },
        "residual": {"error": "residual failed (exit status 1): boom; full log: x.log"},
    }
    assert speed_ratios(runs) == {"post": 0.9, "pre": 1.0}
    record = {
        "command": "bash scripts/gpu_check.sh",
        "provenance": provenance(),
        "cpu_tiny": False,
        "cuda": "13.0",
        "gpus": ["NVIDIA H200"],
        "assumptions": "assumed",
        "timings": [
            {"part": "precision", "estimate_s": 120.0, "seconds": 101.4},
            {"part": "bench", "estimate_s": 90.0, "note": "not run: 20 s of the budget left"},
        ],
        "precision": {"amp": runs},
        "packages": {"torch": "2.11.0+cu130", "numpy": "2.5.2"},
    }
    text = report_markdown(record, ROOT)
    rows = cells(text)
    assert ["amp", "post", "True", "10", "7.000", "8, 8, 8", "9000", "0.900", "-"] in rows
    assert ["amp", "residual", "failed: residual failed (exit status 1): boom; full log: x.log", *[""] * 6] in rows
    assert ["precision", "120", "101", ""] in rows and [
        "bench",
        "90",
        "not run",
        "not run: 20 s of the budget left",
    ] in rows
    assert "GPUs: NVIDIA H200 (CUDA 13.0)" in text and "torch 2.11.0+cu130, numpy 2.5.2" in text


def test_the_fused_loss_part_reads_its_record_into_one_line_of_the_report(tmp_path):
    """The opt-in part's outcome (cli) from bench.fused_loss's record, and its section of report.md; the part runs
    end to end on the simulated node (results/gpu-check/simulated-node-fused-loss)."""
    from fairseq_residual_tools.gpu_check.cli import _fused_loss_outcome

    def row(ratio, saved, kernel):
        return {"speed_ratio": ratio, "peak_saved_mb": saved, "fused": {"kernel": kernel}}

    path = tmp_path / "fused-loss.json"
    path.write_text(json.dumps({"rows": [row(1.31, 412.4, "liger"), row(0.97, 120.0, "torch")]}))
    line = _fused_loss_outcome(path)
    assert line == (
        "fused x stock 0.97 to 1.31 over 2 row(s), peak memory 120 to 412 MB lower, kernel liger, torch "
        "(fused-loss/fused-loss.md)"
    )
    record = {
        "command": "c",
        "provenance": provenance(),
        "cpu_tiny": False,
        "timings": [],
        "gpus": ["H100"],
        "cuda": "13.0",
        "assumptions": "a",
    }
    record["fused-loss"] = {"command": "python -m fairseq_residual_tools.bench.fused_loss", "outcome": line}
    text = report_markdown(record, ROOT)
    section = text.split("## The fused loss beside fairseq's: step time and peak memory")[1]
    assert f"`python -m fairseq_residual_tools.bench.fused_loss`: {line}" in section
