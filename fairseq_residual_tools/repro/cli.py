"""Command lines of scripts/train.sh, evaluate.sh, reproduce.sh and make_tables.py.

python -m fairseq_residual_tools.repro train     --cell C [--gpus G] [--nodes N] [--dry-run] [-- OVERRIDES]
python -m fairseq_residual_tools.repro evaluate  --cell C [--dry-run] [--allow-unfinished]
python -m fairseq_residual_tools.repro reproduce --table T [--dry-run] [--list]
python -m fairseq_residual_tools.repro tables
"""

import argparse
import logging
import shlex
from pathlib import Path

import torch

from ..errors import UserError
from .cells import NOT_IMPLEMENTED, paper_cells, parse_cell
from .evaluate import evaluate
from .launch import dataset_config, gpu_hours, train
from .status import FAILS, TRAINED, training_state
from .tables import DEFAULT_OUT, DEFAULT_RESULTS, DEFAULT_WORK, MEASURED, make_tables, measured, result_path


def build_parser():
    # the options several subcommands share, as parent parsers
    cell = argparse.ArgumentParser(add_help=False)
    cell.add_argument("--cell", required=True, help="e.g. iwslt14/residual/e6d6 (list: reproduce --list)")
    paths = argparse.ArgumentParser(add_help=False)
    paths.add_argument("--data", help="data-bin folder (default: the one data-prep/ writes for the cell's dataset)")
    paths.add_argument("--work", default=str(DEFAULT_WORK), help="checkpoint root: WORK/<cell> (default checkpoints/)")
    paths.add_argument("--results", default=str(DEFAULT_RESULTS), help="per-cell JSON root (default results/cells/)")
    launch = argparse.ArgumentParser(add_help=False)
    launch.add_argument("--gpus", type=int, help="GPUs (--cpu: processes) per node (default: all visible; --cpu: 1)")
    launch.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    launch.add_argument(
        "--launcher",
        default="auto",
        choices=["auto", "single", "torchrun", "srun"],
        help="auto: srun for several nodes inside SLURM, torchrun for several processes, else one process",
    )
    launch.add_argument("--node-rank", type=int, help="torchrun over several nodes without SLURM: this node's rank")
    launch.add_argument("--master-addr", help="torchrun over several nodes: node 0's host (srun: the first node's)")
    launch.add_argument("--master-port", type=int, default=29500, help="rendezvous port (default 29500)")
    launch.add_argument("--cpu", action="store_true", help="train on CPU processes (gloo), for tests and tiny runs")
    launch.add_argument(
        "--max-tokens", type=int, help="tokens per GPU and step (default: as many as keep the paper's batch)"
    )
    launch.add_argument("--update-freq", type=int, help="with --max-tokens: another effective batch than the paper's")
    launch.add_argument("--reference-gpus", type=int, help="GPUs assumed behind the authors' batch (default 1)")
    launch.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    average = argparse.ArgumentParser(add_help=False)
    average.add_argument("--average", type=int, help="checkpoints to average (default: the table's, 5; WMT 10)")

    parser = argparse.ArgumentParser(prog="python -m fairseq_residual_tools.repro", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser(
        "train",
        prog="fairseq-residual-train",
        parents=[cell, paths, launch],
        help="train one cell (resumes from checkpoint_last.pt)",
    )
    p.add_argument("overrides", nargs="*", help="after --: extra hydra overrides (the tables mark such runs)")
    p.set_defaults(run=cmd_train)

    p = sub.add_parser(
        "evaluate",
        prog="fairseq-residual-evaluate",
        parents=[cell, paths, average],
        help="average, decode and score a trained cell",
    )
    p.add_argument("--cpu", action="store_true", help="decode on CPU")
    p.add_argument("--dry-run", action="store_true", help="say what would be averaged, decoded and written")
    p.add_argument(
        "--allow-unfinished",
        action="store_true",
        help="score an unfinished training: the result records it, the tables mark its score",
    )
    p.set_defaults(run=cmd_evaluate)

    p = sub.add_parser(
        "reproduce",
        prog="fairseq-residual-reproduce",
        parents=[paths, launch, average],
        help="train and evaluate every cell of a table, in order, then make the tables",
    )
    p.add_argument("--table", default="all", help="iwslt14, wmt14, opus100, warmup or all")
    p.add_argument("--list", action="store_true", help="list the table's cells with their status and estimates")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the tables written at the end (default results/tables.md)")
    p.add_argument("overrides", nargs="*", help="after --: extra hydra overrides for every cell")
    p.set_defaults(run=cmd_reproduce)

    p = sub.add_parser("tables", prog="fairseq-residual-tables", help="write results/tables.md")
    p.add_argument(
        "--results", default=str(DEFAULT_RESULTS), help="per-cell JSON of evaluated cells (default results/cells/)"
    )
    p.add_argument(
        "--work",
        default=str(DEFAULT_WORK),
        help="checkpoint root, for the logs of cells not evaluated (default checkpoints/)",
    )
    p.add_argument("--out", default=str(DEFAULT_OUT), help="the Markdown tables to write (default results/tables.md)")
    p.set_defaults(run=cmd_tables)
    return parser


def _default_gpus(args):
    if args.gpus is not None and args.gpus < 1:
        per_node = (
            "CPU processes per node with --cpu" if args.cpu else "GPUs per node; leave --gpus out for all visible"
        )
        raise UserError(f"--gpus {args.gpus}: give at least 1 ({per_node})")
    if args.nodes < 1:
        raise UserError(f"--nodes {args.nodes}: give at least 1")
    if args.gpus is None:
        args.gpus = 1 if args.cpu else max(1, torch.cuda.device_count())
    if not args.cpu and not args.dry_run and not torch.cuda.is_available():
        raise UserError("no GPU visible: train on GPUs, pass --cpu for a (slow) CPU run, or --dry-run")


def cmd_train(args) -> int:
    parse_cell(args.cell)  # a wrong name is reported before anything else
    _default_gpus(args)
    return train(args)


def cmd_evaluate(args) -> int:
    evaluate(args)
    return 0


def cmd_reproduce(args) -> int:
    """Every cell of the table in order; finished trainings and evaluations are skipped."""
    cells = paper_cells(args.table)
    if args.list:
        print(f"{'cell':34} {'status':24} estimated GPU-hours (A100-class, docs/reproduce.md)")
        for cell in cells:
            result = measured(cell, args.results, args.work)
            # the state's name in docs/reproduce.md; † as in the tables: not the paper's setting
            status = result.status
            if result.status == MEASURED:
                status = (
                    "evaluated" + (" †" if result.deviations else "") + ("" if result.papers_data else ", other data")
                )
            hours = ""
            if cell.implemented:
                cfg = dataset_config(cell.dataset)
                # at the paper's effective batch: the config's max_tokens x update_freq on --reference-gpus GPUs
                tokens = (args.reference_gpus or 1) * cfg.dataset.max_tokens * cfg.optimization.update_freq[0]
                hours = f"~{gpu_hours(cell, cfg, tokens)}"
            print(f"{cell.name:34} {status:24} {hours}")
        return 0
    _default_gpus(args)
    failed = []
    for cell in cells:
        print(f"== cell {cell.name}")
        if not cell.implemented:
            print(f"skipped: {NOT_IMPLEMENTED} ({cell.scheme})")
            continue
        if result_path(args.results, cell).is_file():
            # evaluated, or recorded as "fails": nothing left to do for this cell
            print(f"already evaluated: {result_path(args.results, cell)}")
            continue
        cell_args = argparse.Namespace(**{**vars(args), "cell": cell.name, "allow_unfinished": False})
        rc = train(cell_args)
        if args.dry_run:
            evaluate_line = ["bash", "scripts/evaluate.sh", "--cell", cell.name]
            print("then: " + shlex.join([*evaluate_line, "--work", args.work, "--results", args.results]))
            continue
        state = training_state(Path(args.work).resolve() / cell.name)
        if state.name not in (TRAINED, FAILS):
            failed.append(f"{cell.name} ({state.describe()}, exit {rc})")
            continue
        try:
            evaluate(cell_args)  # a diverged training is recorded as "fails"
        except UserError as e:
            print(f"error: {e}")
            failed.append(cell.name)
    if not args.dry_run:
        cmd_tables(args)
    if failed:
        print(f"not finished (see their train.log): {', '.join(failed)}")
        return 1
    return 0


def cmd_tables(args) -> int:
    make_tables(args.results, args.work, args.out)
    print(f"wrote {args.out}")
    return 0


def main(argv=None) -> int:
    # fairseq's text_to_speech task sets the root logger to DEBUG when fairseq is imported
    logging.getLogger().setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    return args.run(args)
