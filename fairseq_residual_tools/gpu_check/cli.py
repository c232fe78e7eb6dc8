"""``bash scripts/gpu_check.sh [--bundle DIR] [--dry-run | --cpu-tiny | --calibrate] [--out DIR] ...``

The parts and their estimates: plan.py. The run writes report.md, gpu_check.json and logs.tar.gz (and the
benchmark's bench/, compiled.json) into ``--out`` after every part, so a run stopped early keeps what it measured.
"""

import argparse
import json
import os
import shlex
import sys
import tarfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Sequence

from ..errors import UserError, exit_on_user_error
from ..files import atomic_outputs, write_json, write_text
from ..provenance import provenance
from . import bible, plan
from .estimate import Estimator, calibrate, describe_assumptions

ROOT = plan.ROOT
ESTIMATES = ROOT / "results" / "gpu-check" / "estimates.json"
#: the distributions whose versions the report records (the node's own ones included, to pin its simulation)
PACKAGES = (
    "torch",
    "numpy",
    "fairseq-fixed",
    "hydra-core",
    "omegaconf",
    "sacrebleu",
    "sacremoses",
    "subword-nmt",
    "sentencepiece",
    "tensorboardX",
    "bitarray",
    "tabulate",
    "tqdm",
    "scikit-learn",
    "regex",
    "triton",
    "nvidia-nccl-cu13",
    "nvidia-cudnn-cu13",
)


def packages() -> Dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def prepare_data(args):
    """The embedded corpus at the demo's settings, prepared into ``--work`` (or the one given with --data-root)."""
    import yaml

    from ..demo.prepare import DemoData, prepare_demo_data

    if args.data_root:
        root = plan.corpus_root(args)
        return DemoData(root, root / "data-bin", {split: root / "raw" / split for split in ("train", "valid", "test")})
    settings = yaml.safe_load((ROOT / "configs" / "demo.yaml").read_text())
    corpus = dict(settings["corpus"])
    merges = corpus.pop("bpe_merges")
    return prepare_demo_data(plan.corpus_root(args), seed=settings["seed"], bpe_merges=merges, **corpus)


def print_plan(parts: List[plan.Part], only: Sequence[str] = ()) -> None:
    left_out = " (not in this run: --only)" if only else " (opt-in: not in the default run)"
    for part in parts:
        mode = "" if part.default else left_out
        print(f"\n## {part.name}: {part.title}: about {part.estimate_s:.0f} s{mode}")
        for run in part.runs + part.then:
            what = "scoring" if run in part.then else "run"
            skip = f"  [skipped: {run.skip}]" if run.skip else ""
            updates = f", {run.planned_updates} updates planned" if run.planned_updates else ""
            print(f"- {what} {run.label}: about {run.estimate_s:.0f} s{updates}{skip}\n  {shlex.join(run.command)}")
        if part.detail:
            print(bible.describe_plan(part.detail))
    total = plan.default_seconds(parts)
    print(
        f"\nbundle install {plan.BUNDLE_INSTALL_S:.0f} s, data {plan.DATA_S:.0f} s; "
        f"{'the parts of --only' if only else 'default parts'} in all: about "
        f"{total:.0f} s ({total / 60:.1f} min; budget {plan.BUDGET_S / 60:.0f} min)"
    )
    print(f"estimates: {describe_assumptions()}")


def archive_logs(logs: Path, out: Path) -> None:
    with atomic_outputs([out / "logs.tar.gz"]) as (tmp,):
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(logs, arcname="logs")


def summarise(part: plan.Part, results: Dict[str, Dict], logs: Path, data, scale: plan.Scale, out: Path) -> Dict:
    """The record's entries of one part, from its runs' results and logs."""
    from ..training_log import outcome
    from . import report

    if part.name == plan.ALONE:
        return bible.summarise(part, results, logs)
    if part.name == "precision":
        entries: Dict[str, Any] = {"precision": {}}
        for run in part.runs:
            result = results[run.label]
            if run.label == "torchrun":
                text = (logs / run.log).read_text() if "error" not in result else ""
                entries["torchrun"] = {
                    "command": shlex.join(run.command),
                    "outcome": (
                        f"failed: {result['error']}"
                        if "error" in result
                        else "finished; " + report.torchrun_outcome(text)
                    ),
                }
                continue
            precision, scheme = run.label.split()
            summary = (
                dict(result)
                if "error" in result or "skipped" in result
                else {**report.summarise_training((logs / run.log).read_text()), "seconds": result["seconds"]}
            )
            entries["precision"].setdefault(precision, {})[scheme] = summary
        return entries
    if part.name == "claims":
        from ..commands import score_generated

        references = Path(f"{data.raw_prefixes['test']}.tgt").read_text(encoding="utf-8").splitlines()
        claims = {}
        for run in part.runs:
            result = results[run.label]
            entry: Dict[str, Any] = {"planned_updates": run.planned_updates, "seconds": result.get("seconds")}
            if "error" in result:
                entry["error"] = result["error"]
            else:
                found: Dict[str, Any] = outcome(logs / run.log)
                entry.update(
                    fails=found["fails"],
                    final_train_loss=found["final_train_loss"],
                    train_curve=found["train_curve"],
                    updates=found["train_curve"][-1][0] if found["train_curve"] else 0,
                )
                scoring = result.get("then", {"error": "not run"})
                if "error" in scoring:
                    entry["bleu_error"] = scoring["error"]
                else:
                    assert run.save_dir is not None  # a claims training's
                    _, entry["bleu"], entry["bleu_signature"] = score_generated(run.save_dir, references)
            claims[run.label] = entry
        return {"claims": claims, "claims_depths": list(scale.claims_depths)}
    (run,) = part.runs
    result = results[run.label]
    outcomes = {
        "bench": lambda: report.bench_outcome(json.loads((out / "bench" / "bench.json").read_text())),
        "compiled": lambda: _compiled_outcome(out / "compiled" / "compiled.json"),
        "fused-loss": lambda: _fused_loss_outcome(out / "fused-loss" / "fused-loss.json"),
    }
    text = f"failed: {result['error']}" if "error" in result else "finished; " + outcomes[part.name]()
    return {part.name: {"command": shlex.join(run.command), "outcome": text}}


def _compiled_outcome(path: Path) -> str:
    from ..bench.compiled import outcome

    return outcome(json.loads(path.read_text()))


def _fused_loss_outcome(path: Path) -> str:
    from ..bench.fused_loss import outcome

    return outcome(json.loads(path.read_text()))


def command_line(args) -> str:
    """The command as typed: gpu_check.sh consumes --bundle before this module runs, and says which one it used."""
    bundle = os.environ.get("GPU_CHECK_BUNDLE")
    return shlex.join(["bash", "scripts/gpu_check.sh", *(["--bundle", bundle] if bundle else []), *args.argv])


def run(args) -> Dict:
    started = float(os.environ.get("GPU_CHECK_STARTED", time.time()))  # gpu_check.sh: before the bundle install
    if args.calibrate:
        return write_calibration(args)
    estimator = Estimator.load(Path(args.estimates))
    import torch

    gpus = (
        []
        if args.dry_run or args.cpu_tiny
        else [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    )
    if not (args.dry_run or args.cpu_tiny or gpus):
        raise UserError(
            "no CUDA GPU visible (torch.cuda.is_available() is False): run this on a GPU machine, "
            "or add --dry-run to see the plan, or --cpu-tiny to run its code path on the CPU"
        )
    if gpus:  # the node's own host time per operation, measured idle before anything runs (a few seconds)
        print(
            f"[gpu-check] host time per operation on this machine: {estimator.measure_host() * 1e6:.1f} us", flush=True
        )
    parts = plan.build(args, estimator, len(gpus))
    if args.dry_run:
        print_plan(parts, args.only)
        return {}
    out, work = Path(args.out), Path(args.work)
    logs = work / "logs"
    scale = plan.scale_of(args)
    record: Dict[str, Any] = {
        "command": command_line(args),
        "provenance": provenance(),
        "packages": packages(),
        "cpu_tiny": args.cpu_tiny,
        "bundle": os.environ.get("GPU_CHECK_BUNDLE"),
        "gpus": gpus,
        "cuda": torch.version.cuda,
        "assumptions": describe_assumptions(),
        "host_seconds_per_op": {k: v for k, v in estimator.record.items() if k.startswith("host_seconds_per_op")},
        "timings": [
            {
                "part": "bundle install, start, plan",
                "estimate_s": plan.BUNDLE_INSTALL_S,
                "seconds": round(time.time() - started, 1),
            }
        ],
    }
    from .report import report_markdown

    def save():
        write_json(out / "gpu_check.json", record)
        write_text(out / "report.md", report_markdown(record, ROOT))
        if logs.exists():
            archive_logs(logs, out)

    start = time.time()
    if args.only == [plan.ALONE]:  # the Bible part reads its own data: checked here against its manifest
        data, record["bible_data"] = None, bible.verify(Path(args.bible))
    else:
        data = prepare_data(args)
    record["timings"].append({"part": "data", "estimate_s": plan.DATA_S, "seconds": round(time.time() - start, 1)})
    save()
    deadline = started + plan.BUDGET_S
    for name in [p.name for p in parts if p.default]:
        spent = time.time() - started
        part = next(p for p in plan.build(args, estimator, len(gpus), spent=spent) if p.name == name)
        left = deadline - time.time()
        timing = {"part": name, "estimate_s": round(part.estimate_s, 1)}
        if not args.cpu_tiny and left < 0.5 * part.estimate_s:
            record["timings"].append({**timing, "note": f"not run: {max(left, 0):.0f} s of the budget left"})
            save()
            continue
        print(f"[gpu-check] {name}: {len(part.runs)} run(s) at once, about {part.estimate_s:.0f} s", flush=True)
        start = time.time()
        from .execute import run_part

        if name == plan.ALONE:
            bible.clear(part)
        results = run_part(part, logs, None if args.cpu_tiny else max(left, 60.0))
        record["timings"].append({**timing, "seconds": round(time.time() - start, 1)})
        record.update(summarise(part, results, logs, data, scale, out))
        save()
    print(f"[gpu-check] report: {out / 'report.md'}", flush=True)
    return record


def write_calibration(args) -> Dict:
    data = prepare_data(args)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    record = calibrate(plan.workloads(plan.GPU), data.databin, work)
    record["command"] = command_line(args)
    write_json(Path(args.estimates), record)
    print(
        f"[gpu-check] estimate inputs: {args.estimates} (host {record['host_seconds_per_op'] * 1e6:.1f} us per "
        f"operation, fairseq-train start-up {record['startup_s']:.1f} s, import {record['import_s']:.1f} s, load "
        f"average {record['load_average'][0]:.1f})"
    )
    return record


def parse_args(argv: Sequence[str]):
    from fairseq_residual.schemes import SCHEMES as REGISTERED

    parser = argparse.ArgumentParser(prog="scripts/gpu_check.sh", description=plan.__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "results" / "gpu-check"), help="results folder (at most 8 files)")
    parser.add_argument("--work", default=str(ROOT / "work" / "gpu-check"), help="data, checkpoints and logs")
    parser.add_argument("--schemes", default=",".join(plan.SCHEMES), help="comma-separated (default post,pre,residual)")
    parser.add_argument("--precisions", default=",".join(plan.PRECISIONS), help=f"from {list(plan.PRECISIONS)}")
    parser.add_argument("--depths", help="the claims' depths, comma-separated (default 6,12; 1,2 with --cpu-tiny)")
    parser.add_argument("--skip-torchrun", action="store_true", help="leave out the torchrun launch")
    parser.add_argument("--skip-bench", action="store_true", help="leave out the benchmark")
    parser.add_argument(
        "--skip-output-scale",
        action="store_true",
        help="leave out ResiDual with --residual-output-scale 0.5 in the claims (four trainings beside the default's)",
    )
    parser.add_argument(
        "--with",
        dest="with_schemes",
        default="",
        help="add these designs after ResiDual to the claims and the benchmark, comma-separated, from "
        f"{list(plan.OPT_IN)} (opt-in: each takes its time from the claims' trainings; with hc they get about 236 "
        "updates each instead of 428)",
    )
    parser.add_argument("--with-hc", action="store_true", help="the same as --with hc")
    parser.add_argument(
        "--with-compiled",
        action="store_true",
        help="add the training-throughput comparison, eager and --torch-compile (opt-in: ~8 min)",
    )
    parser.add_argument(
        "--with-fused-loss",
        action="store_true",
        help="add the fused loss beside fairseq's criterion: step time and peak memory, IWSLT and WMT E6D6, fp16 and "
        "bf16 (opt-in: ~3 min; with --only fused-loss alone, its record among the files that come back)",
    )
    parser.add_argument(
        "--only",
        help=f"run only these parts, comma-separated, from {list(plan.PART_NAMES)} (e.g. compiled: the opt-in part "
        "alone, with the whole budget)",
    )
    parser.add_argument(
        "--bible",
        metavar="DIR",
        default=str(bible.DEFAULT_PACK),
        help="the part bible's data: the folder of python -m fairseq_residual_tools.gpu_check.bible pack (default "
        "gpu-bible/)",
    )
    parser.add_argument(
        "--bible-groups",
        default=",".join(bible.GROUPS),
        help=f"the part bible's groups, in order of value, comma-separated, from {list(bible.GROUPS)} (those that do "
        "not fit the window are named as not run; a later session runs them with the same budget)",
    )
    parser.add_argument(
        "--bible-precision",
        default=bible.PRECISION,
        choices=["fp32", "amp", "bf16"],
        help=f"the part bible's precision (default {bible.PRECISION}: fp32, the recipe's, fits no group in the window)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print every run with its estimate; run nothing")
    parser.add_argument("--cpu-tiny", action="store_true", help="run every part on the CPU at tiny sizes")
    parser.add_argument("--calibrate", action="store_true", help="measure the estimates' inputs on this machine")
    parser.add_argument("--estimates", default=str(ESTIMATES), help="the estimates' inputs (--calibrate writes it)")
    parser.add_argument("--data-root", help="an embedded corpus already prepared (the demo's prepare_demo_data)")
    # the shell wrapper takes --bundle out before Python starts (it sets up the interpreter's path); listed here so
    # that --help shows every option of the command a user types
    parser.add_argument(
        "--bundle",
        metavar="DIR",
        help="on an offline node without fairseq: install the wheels of `make gpu-bundle` from DIR into a temporary "
        "folder first (pip --no-index --no-deps), check that they import with the node's torch, and run with them",
    )
    args = parser.parse_args(argv)
    if args.bundle is not None:
        parser.error(
            "--bundle is taken by scripts/gpu_check.sh before Python starts: run bash scripts/gpu_check.sh "
            f"--bundle {args.bundle} ..."
        )
    args.argv = list(argv)
    args.schemes = [s for s in args.schemes.split(",") if s]
    args.precisions = [p for p in args.precisions.split(",") if p]
    args.with_schemes = [s for s in args.with_schemes.split(",") if s] + (["hc"] if args.with_hc else [])
    args.with_schemes = list(dict.fromkeys(args.with_schemes))
    if any(s not in plan.OPT_IN for s in args.with_schemes):
        parser.error(f"--with {','.join(args.with_schemes)}: choose from {','.join(plan.OPT_IN)}")
    unknown = [s for s in args.schemes if s not in REGISTERED] + [
        p for p in args.precisions if p not in plan.PRECISIONS
    ]
    if unknown:
        parser.error(
            f"unknown scheme or precision {', '.join(unknown)}: schemes {list(REGISTERED)}, "
            f"precisions {list(plan.PRECISIONS)}"
        )
    if plan.REFERENCE not in args.schemes:
        parser.error(f"--schemes must include {plan.REFERENCE} (the speed ratios are to Pre-LN)")
    args.only = [p for p in (args.only or "").split(",") if p]
    if any(p not in plan.PART_NAMES for p in args.only):
        parser.error(f"--only {','.join(args.only)}: choose parts from {','.join(plan.PART_NAMES)}")
    if plan.ALONE in args.only and len(args.only) > 1:
        parser.error(f"--only {','.join(args.only)}: the part {plan.ALONE} takes the whole window, run it alone")
    args.bible_groups = [g for g in args.bible_groups.split(",") if g]
    if not args.bible_groups or any(g not in bible.GROUPS for g in args.bible_groups):
        parser.error(f"--bible-groups {','.join(args.bible_groups)}: choose from {','.join(bible.GROUPS)}")
    if args.depths:
        try:
            args.depths = tuple(int(d) for d in args.depths.split(","))
        except ValueError:
            parser.error(f"--depths {args.depths}: comma-separated layer counts, e.g. 6,12")
    return args


def main(argv=None) -> int:
    return exit_on_user_error(run, parse_args(sys.argv[1:] if argv is None else argv))
