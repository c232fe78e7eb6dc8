"""The checks that need a CUDA GPU, as one prepared run: ``bash scripts/gpu_check.sh`` (< 10 min on one GPU).

Post-LN, Pre-LN and ResiDual at E18D18 trained with each of ``PRECISIONS``, a one-node ``torchrun`` launch
through ``scripts/train.sh``, ``make bench``'s benchmark with ``--device cuda`` and ResiDual at E18D18 trained
under ``torch.compile`` beside eager (``bench/compiled.py``); results/gpu-check/README.md says what each
records. ``--dry-run`` prints the commands and runs nothing.
"""

import argparse
import json
import math
import re
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .bench.compiled import outcome as compiled_outcome
from .errors import UserError, exit_on_user_error
from .files import write_json, write_text
from .markdown import table
from .provenance import describe, provenance
from .runner import PLUGIN_DIR, fairseq_command, run_logged
from .training_log import json_record

ROOT = PLUGIN_DIR.parent

PRECISIONS: Dict[str, List[str]] = {
    "fp16": ["--fp16"],
    "memory-efficient-fp16": ["--memory-efficient-fp16", "--fp16-init-scale", "8"],  # the authors' OPUS-100 setting
    "amp": ["--amp"],
}
SCHEMES = ["post", "pre", "residual"]
REFERENCE = "pre"
TORCHRUN_CELL = "iwslt14/residual/e6d6"
#: the benchmark's sizes: the depth the precision runs train (the others would take the check past ten minutes)
BENCH_SIZES = "wmt-e18d18"


def train_command(databin, scheme: str, precision: str, updates: int) -> List[str]:
    """fairseq-train of the WMT E18D18 model, no checkpoints, no validation, JSON logs every 10 updates."""
    return fairseq_command(
        "train",
        databin,
        *("--user-dir", PLUGIN_DIR, "--arch", "residual_transformer_wmt_en_de", "--residual-scheme", scheme),
        *("--encoder-layers", 18, "--decoder-layers", 18, "--share-all-embeddings"),
        *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "5e-4"),
        *("--lr-scheduler", "inverse_sqrt", "--warmup-updates", 100),
        *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
        *("--max-tokens", 4096, "--max-update", updates, "--no-save", "--disable-validation", "--seed", 1),
        *("--log-format", "json", "--log-interval", 10),
        *PRECISIONS[precision],
    )


def torchrun_command(databin, work: Path, gpus: int, updates: int) -> List[str]:
    """scripts/train.sh with torchrun on ``gpus`` GPUs, the demo's src-tgt data, no validation or checkpoints."""
    return [
        *("bash", str(ROOT / "scripts" / "train.sh"), "--cell", TORCHRUN_CELL, "--data", str(databin)),
        *("--gpus", str(gpus), "--launcher", "torchrun"),
        *("--work", str(work / "torchrun"), "--results", str(work / "torchrun-results"), "--"),
        *(f"optimization.max_update={updates}", "task.source_lang=src", "task.target_lang=tgt"),
        *("task.eval_bleu=false", "dataset.disable_validation=true", "checkpoint.no_save=true"),
    ]


def bench_command(out: Path) -> List[str]:
    bench = [sys.executable, str(ROOT / "scripts" / "bench.py")]
    return [*bench, "--device", "cuda", "--sizes", BENCH_SIZES, "--out", str(out / "bench")]


def compiled_command(out: Path) -> List[str]:
    module = [sys.executable, "-m", "fairseq_residual_tools.bench.compiled"]
    return [
        *module,
        "--device",
        "cuda",
        "--size",
        BENCH_SIZES,
        "--scheme",
        "residual",
        "--out",
        str(out / "compiled.json"),
    ]


def bench_outcome(bench: dict) -> str:
    """The benchmark's targets (``bench.json``'s ratios to stock Pre-LN), as one line."""
    from .bench.report import target_checks

    checks = [
        f"{c['what']} {c['value']:.3f}{_interval(c)} ({c['target']}: {c['verdict']})" for c in target_checks(bench)
    ]
    return "; ".join(checks) + "; the tables are in bench/bench.md"


def _interval(check: dict) -> str:
    return f" [{check['interval'][0]:.3f}–{check['interval'][1]:.3f}]" if "interval" in check else ""


def torchrun_outcome(text: str) -> str:
    """World size and ranks joined, from a torchrun training log (the config fairseq logs, its init lines)."""
    world = re.findall(r"'distributed_world_size': (\d+)", text)
    # fairseq logs "initialized host ... as rank N" once a process group (NCCL on GPUs) is up
    ranks = re.findall(r"initialized host .* as rank (\d+)", text)
    return f"world size {world[0] if world else 'not logged'}, ranks in a process group: {sorted(set(ranks))}"


def summarise_run(text: str) -> dict:
    """Losses, loss-scale history and tokens/s of one training log."""
    parsed = (json_record(line) for line in text.splitlines() if "train_inner" in line)
    records = [r for r in parsed if r is not None and "num_updates" in r and "loss" in r]
    losses = [(int(r["num_updates"]), float(r["loss"])) for r in records]
    scales = [(int(r["num_updates"]), float(r["loss_scale"])) for r in records if "loss_scale" in r]
    wps = [float(r["wps"]) for r in records[1:] if "wps" in r]  # the first interval includes start-up
    free = [float(r["gb_free"]) for r in records if "gb_free" in r]  # on a GPU: total minus peak allocated
    return {
        "updates": losses[-1][0] if losses else 0,
        "losses": losses,
        "loss_finite": bool(losses) and all(math.isfinite(x) for _, x in losses),
        "loss_scale": scales,
        "overflow_messages": len(re.findall(r"gradient overflow detected", text)),
        "tokens_per_s": statistics.median(wps) if wps else None,
        "gpu_gb_free_min": min(free) if free else None,
    }


def speed_ratios(runs: Dict[str, dict]) -> Dict[str, float]:
    """Each scheme's tokens/s divided by Pre-LN's (one precision)."""
    reference = runs.get(REFERENCE, {}).get("tokens_per_s")
    return {s: r["tokens_per_s"] / reference for s, r in runs.items() if reference and r.get("tokens_per_s")}


def report_markdown(record: dict) -> str:
    lines = [
        "# GPU check",
        "",
        f"Command: `{record['command']}`  ",
        describe(record["provenance"]),
        "",
        f"GPUs: {', '.join(record['gpus'])} (CUDA {record['cuda']})",
        "",
        f"## E18D18 training, {record['updates']} updates on the embedded corpus",
        "",
    ]
    headers = ["precision", "scheme", "loss finite", "last loss", "loss scale (first, min, last)", "tokens/s"]
    headers += ["/ Pre-LN", "GPU GB free (min)"]
    rows = []
    for precision, runs in record["precision"].items():
        ratios = speed_ratios(runs)
        for scheme, run in runs.items():
            if "error" in run:
                rows.append([precision, scheme, f"failed: {run['error']}", *[""] * 5])
                continue
            scales = [s for _, s in run["loss_scale"]]
            scale = f"{scales[0]:g}, {min(scales):g}, {scales[-1]:g}" if scales else "-"
            last = f"{run['losses'][-1][1]:.3f}" if run["losses"] else "-"
            speed = f"{run['tokens_per_s']:.0f}" if run["tokens_per_s"] else "-"
            ratio = f"{ratios[scheme]:.3f}" if scheme in ratios else "-"
            free = f"{run['gpu_gb_free_min']:.1f}" if run.get("gpu_gb_free_min") is not None else "-"
            rows.append([precision, scheme, str(run["loss_finite"]), last, scale, speed, ratio, free])
    lines.append(table(headers, rows))
    sections = [("torchrun", "torchrun through scripts/train.sh"), ("bench", "Benchmark on the GPU")]
    for key, title in sections + [("compiled", "ResiDual E18D18 under torch.compile beside eager")]:
        if key in record:
            lines += ["", f"## {title}", "", f"`{record[key]['command']}`: {record[key]['outcome']}"]
    return "\n".join(lines) + "\n"


def failure(command: List[str], log: Path, label: str) -> Optional[str]:
    """Run ``command`` with its output in a fresh ``log``; why it failed, or None."""
    log.unlink(missing_ok=True)  # run_logged appends
    try:
        run_logged(command, log, label=label)
    except UserError as e:
        return str(e)
    return None


def run(args) -> dict:
    out, work = Path(args.out), Path(args.work)
    databin = work / "demo" / "data-bin"
    plan = {(p, s): train_command(databin, s, p, args.updates) for p in args.precisions for s in args.schemes}
    import torch

    gpus = [] if args.dry_run else [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    launches = {}
    if not args.skip_torchrun:
        launches["torchrun"] = torchrun_command(databin, work, max(len(gpus), 1), args.torchrun_updates)
    if not args.skip_bench:
        launches["bench"] = bench_command(out)
    if not args.skip_compiled:
        launches["compiled"] = compiled_command(out)
    if args.dry_run:
        print(f"data: the embedded corpus prepared into {databin}")
        for cmd in [*plan.values(), *launches.values()]:
            print(shlex.join(cmd))
        return {}
    if not gpus:
        raise UserError(
            "no CUDA GPU visible (torch.cuda.is_available() is False): run this on a GPU machine, "
            "or add --dry-run to see the commands"
        )
    from .demo.prepare import prepare_demo_data

    prepare_demo_data(work / "demo")
    record: Dict[str, Any] = {
        "command": "bash scripts/gpu_check.sh " + shlex.join(args.argv),
        "provenance": provenance(),
    }
    record.update(gpus=gpus, cuda=torch.version.cuda, updates=args.updates, precision={p: {} for p in args.precisions})
    for (precision, scheme), cmd in plan.items():
        log = out / "logs" / f"{precision}-{scheme}.log"
        error = failure(cmd, log, f"{precision} {scheme}")
        summary = {"error": error} if error else summarise_run(log.read_text())
        record["precision"][precision][scheme] = summary
        print(f"{precision} {scheme}: {summary}", flush=True)
    outcomes = {
        "torchrun": lambda: torchrun_outcome((out / "logs" / "torchrun.log").read_text()),
        "bench": lambda: bench_outcome(json.loads((out / "bench" / "bench.json").read_text())),
        "compiled": lambda: compiled_outcome(json.loads((out / "compiled.json").read_text())),
    }
    for key, cmd in launches.items():
        error = failure(cmd, out / "logs" / f"{key}.log", key)
        outcome = f"failed: {error}" if error else "finished; " + outcomes[key]()
        record[key] = {"command": shlex.join(cmd), "outcome": outcome}
    write_json(out / "gpu_check.json", record)
    write_text(out / "report.md", report_markdown(record))
    return record


def parse_args(argv: Sequence[str]):
    from fairseq_residual.schemes import SCHEMES as REGISTERED

    parser = argparse.ArgumentParser(prog="scripts/gpu_check.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "results" / "gpu-check"), help="results folder")
    parser.add_argument("--work", default=str(ROOT / "work" / "gpu-check"), help="data and scratch folder")
    parser.add_argument("--updates", type=int, default=200, help="updates per precision run (default 200)")
    parser.add_argument("--torchrun-updates", type=int, default=50, help="updates of the torchrun launch")
    parser.add_argument("--schemes", default=",".join(SCHEMES), help=f"comma-separated (default {SCHEMES})")
    parser.add_argument("--precisions", default=",".join(PRECISIONS), help=f"comma-separated, from {list(PRECISIONS)}")
    parser.add_argument("--skip-torchrun", action="store_true", help="leave out the torchrun launch")
    parser.add_argument("--skip-bench", action="store_true", help="leave out the benchmark on the GPU")
    parser.add_argument("--skip-compiled", action="store_true", help="leave out the torch.compile training run")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    args.argv = list(argv)
    args.schemes = [s for s in args.schemes.split(",") if s]
    args.precisions = [p for p in args.precisions.split(",") if p]
    unknown = [s for s in args.schemes if s not in REGISTERED] + [p for p in args.precisions if p not in PRECISIONS]
    if unknown:
        parser.error(
            f"unknown scheme or precision {', '.join(unknown)}: "
            f"schemes {list(REGISTERED)}, precisions {list(PRECISIONS)}"
        )
    if REFERENCE not in args.schemes:
        parser.error(f"--schemes must include {REFERENCE} (the speed ratios are to Pre-LN)")
    if args.updates < 20:
        parser.error("--updates must be at least 20 (two logged intervals)")
    return args


def main(argv=None) -> int:
    return exit_on_user_error(run, parse_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    raise SystemExit(main())
