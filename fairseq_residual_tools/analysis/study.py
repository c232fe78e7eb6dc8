"""CPU-scale depth x warmup study: a small analogue of the paper's warmup-ablation table.

For every scheme, depth (E{L}D{L}), warmup setting and seed, ``fairseq-train`` trains a small model on
the embedded synthetic corpus (the demo's data and training command), ``fairseq-generate`` translates
the test set and sacrebleu scores the detokenised output; "fails" is ``training_log.divergence``, the
project's one rule. ``results/cpu-study/`` gets the table in the paper's shape, curves and every number.

"Warmup off" keeps the peak learning rate and the schedule's shape: inverse_sqrt starts *at* the peak
(``--warmup-init-lr`` = peak) instead of rising from 1e-7, stays there for ``--warmup`` updates and
then decays as with warmup (peak * sqrt(warmup / update)).

Resumable: a finished run leaves ``result.json`` in its folder and is skipped; an interrupted one
resumes from its ``checkpoint_last.pt`` (fairseq's own restore).
"""

import argparse
import contextlib
import itertools
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..commands import run_training, score_test_set, train_command
from ..demo.prepare import TGT, prepare_demo_data
from ..errors import ConfigError
from ..files import write_json, write_text
from ..folder_lock import FolderBusy
from ..markdown import table
from ..provenance import ROOT, describe, describe_git, git_state, provenance
from ..runner import RunError
from ..training_log import RULE as FAILS_RULE
from ..training_log import json_record, log_span, outcome
from .variants import check_variants, variant_flags, variant_name

#: the command-line settings that go into every run's fairseq-train command
TRAINING_SETTINGS = ("dim", "lr", "warmup", "max_tokens", "max_update", "validate_every", "log_interval")
SEED_STYLES = ("-", "--", ":", "-.")  # the line style of each seed in the curves
COMMAND_FILE = "train_command.txt"  # in a run's folder from its start: what made it (check_recorded_runs)


@dataclass(frozen=True)
class RunSpec:
    scheme: str
    layers: int  # encoder and decoder layers (E{layers}D{layers})
    warmup: bool
    seed: int

    @property
    def name(self) -> str:
        warmup = "warmup" if self.warmup else "nowarmup"
        return f"{variant_name(self.scheme)}-e{self.layers}d{self.layers}-{warmup}-seed{self.seed}"


def grid(schemes: Sequence[str], depths: Sequence[int], seeds: Sequence[int]) -> List[RunSpec]:
    """Every run of the study, shallow models first (so partial results cover whole cells)."""
    order = itertools.product(depths, (True, False), schemes, seeds)
    return [RunSpec(scheme, layers, warmup, seed) for layers, warmup, scheme, seed in order]


def training_command(databin, save_dir, spec: RunSpec, settings) -> List[str]:
    """fairseq-train for this run; "warmup off" starts inverse_sqrt at the peak lr (module docstring)."""
    options = {key: getattr(settings, key) for key in TRAINING_SETTINGS}
    if not spec.warmup:
        options["warmup_init_lr"] = settings.lr
    scheme, model_options = variant_flags(spec.scheme)
    return train_command(
        databin, save_dir, scheme=scheme, layers=spec.layers, seed=spec.seed, model_options=model_options, **options
    )


def print_validation(name: str, line: str):
    """With ``name`` bound, an ``on_line`` callback printing each validation loss of a training as progress."""
    record = json_record(line)
    if record is not None and "valid_loss" in record:
        update, loss = record.get("valid_num_updates"), record["valid_loss"]
        print(f"    [{name}: fairseq-train] update {update}: valid loss {loss}", flush=True)


def run_one(spec: RunSpec, data, refs, settings, runs_dir: Path) -> Dict:
    """Train (unless ``result.json`` says it was), then judge and score the run. The verdict, curves and
    time are re-read from the log every time, so the table follows the current ``divergence`` rule."""
    save_dir = runs_dir / spec.name
    result_file = save_dir / "result.json"
    if result_file.exists():
        result = json.loads(result_file.read_text())
    else:
        save_dir.mkdir(parents=True, exist_ok=True)
        cmd = training_command(data.databin, save_dir, spec, settings)
        write_text(save_dir / COMMAND_FILE, " ".join(map(str, cmd[2:])))
        git = describe_git(git_state())  # the code the training loads, not the tree when it ends
        run_training(cmd, save_dir / "train.out", spec.name, on_line=partial(print_validation, spec.name))
        result = dict(asdict(spec), name=spec.name, train_command=" ".join(cmd[2:]), git=git)
        result.update(bleu=None, bleu_signature=None, generate_command=None, generate_seconds=0.0)  # until scored
    # train.out records every attempt, also those of a run resumed after an interruption
    result.update(outcome(save_dir / "train.out"))
    if result["fails"] is None and result["bleu"] is None:
        t0 = time.time()
        with contextlib.suppress(RunError):  # not decoded: scored on the next call
            result.update(score_test_set(data.databin, save_dir, refs, spec.name)[1])
        result["generate_seconds"] = round(time.time() - t0, 1)
    write_json(result_file, result)
    return result


def recorded_command(save_dir: Path) -> Optional[str]:
    """The training command a run's folder was made by: its result's, or the one written when it started."""
    if (save_dir / "result.json").exists():
        return json.loads((save_dir / "result.json").read_text())["train_command"]
    started = save_dir / COMMAND_FILE
    return started.read_text() if started.exists() else None


def check_recorded_runs(specs: Sequence[RunSpec], data, settings, runs_dir: Path) -> None:
    """A run's folder is reused or resumed only for the very command it was made by: the first that another one
    made (other settings, the same --work) stops the study before anything trains, in one line."""
    for spec in specs:
        save_dir = runs_dir / spec.name
        recorded = recorded_command(save_dir)
        if recorded is not None and recorded != " ".join(
            map(str, training_command(data.databin, save_dir, spec, settings)[2:])
        ):
            raise ConfigError(
                f"{save_dir} holds run {spec.name} trained with other settings: give this study another --work, "
                "or delete that folder to train it anew"
            )


def format_cell(runs: List[Dict], key: str, digits: int, empty: str = "not run") -> str:
    """``mean ± half-range`` over the seeds that trained (one seed: its value); ``fails`` when every seed failed;
    ``empty`` without a run."""
    if not runs:
        return empty
    ok = [r[key] for r in runs if not r["fails"] and r[key] is not None]
    failed = sum(1 for r in runs if r["fails"])
    if not ok:
        return f"fails ({failed}/{len(runs)})"
    half = (max(ok) - min(ok)) / 2  # with two seeds, half the range is the distance to either seed
    cell = f"{statistics.mean(ok):.{digits}f}" + (f" ± {half:.{digits}f}" if len(ok) > 1 else "")
    return cell + (f" ({failed}/{len(runs)} fail)" if failed else "")


def loss_at(run: Dict, update: int, curve: str = "valid_curve") -> Optional[float]:
    """The run's loss logged at exactly ``update`` (None where its curve has no point there)."""
    return next((loss for u, loss in run[curve] if u == update), None)


def losses_at_table(results: List[Dict], row_keys: Sequence[str], updates: Sequence[int], column) -> str:
    """Validation loss at each of ``updates`` (mean ± half-range over seeds): rows by ``row_keys`` of a run, columns
    depth x update (``column(depth, update)``: the header)."""
    depths = sorted({r["layers"] for r in results})
    rows = []
    # rows in each key's order of first appearance, key by key (the schemes as given, then warmup yes before no)
    order = {k: list(dict.fromkeys(r[k] for r in results)) for k in row_keys}
    keyed = {tuple(r[k] for k in row_keys) for r in results}
    for values in sorted(keyed, key=lambda v: tuple(order[k].index(x) for k, x in zip(row_keys, v))):
        runs = [r for r in results if tuple(r[k] for k in row_keys) == values]
        cells = [_loss_at_cell([r for r in runs if r["layers"] == d], u) for d in depths for u in updates]
        rows.append([*(_label(v) for v in values), *cells])
    return table([*row_keys] + [column(d, u) for d in depths for u in updates], rows)


def _loss_at_cell(runs: List[Dict], update: int) -> str:
    """format_cell of the loss at ``update``, over the runs that logged it or failed; "not logged" where no run
    that trained has a point there (a shorter budget, another validation interval)."""
    points = [dict(r, at=loss_at(r, update)) for r in runs]
    logged = [r for r in points if r["fails"] or r["at"] is not None]
    if runs and not any(not r["fails"] for r in logged) and any(not r["fails"] for r in points):
        return "not logged"
    return format_cell(logged, "at", 3)


def _label(value) -> str:
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


def ablation_table(
    results: List[Dict], key: str, digits: int, first: str = "method", only_run: bool = False, empty: str = "not run"
) -> str:
    """The paper's warmup-ablation layout: rows scheme x warmup (``only_run``: those with a run), one column per
    depth; ``first``: the first column's header; ``empty``: a cell without a run."""
    depths = sorted({r["layers"] for r in results})
    rows = []
    for scheme in dict.fromkeys(r["scheme"] for r in results):
        for warmup in (True, False):
            runs = [r for r in results if (r["scheme"], r["warmup"]) == (scheme, warmup)]
            if runs or not only_run:
                cells = [format_cell([r for r in runs if r["layers"] == d], key, digits, empty) for d in depths]
                rows.append([scheme, "yes" if warmup else "no", *cells])
    return table([first, "warmup"] + [f"E{d}D{d}" for d in depths], rows)


def failure_list(results: List[Dict]) -> str:
    failed = [r for r in results if r["fails"]]
    if not failed:
        return "No run met the divergence rule."
    return "\n".join(f"- `{r['name']}`: {r['fails']}" for r in failed)


def losses_at_section(results: List[Dict], updates: Optional[Sequence[int]], row_keys: Sequence[str], column) -> str:
    """The report's section for ``--loss-at`` (empty without it): losses_at_table under its heading."""
    if not updates:
        return ""
    at = losses_at_table(results, row_keys, updates, column)
    listed = ", ".join(map(str, updates))
    return f"""## Validation loss at updates {listed} (`--loss-at`: points of the same runs; mean ± half-range)

{at}

"""


def write_report(results: List[Dict], meta: Dict, out: Path):
    from .plotting import plot_loss_curves

    out.mkdir(parents=True, exist_ok=True)
    styles = dict(zip(sorted({r["seed"] for r in results}), itertools.cycle(SEED_STYLES)))
    for curve, quantity, marker in (("train", "training", None), ("valid", "validation", ".")):
        panels = {}  # one per (depth, warmup), one line per scheme and seed
        for depth, warmup in itertools.product(sorted({r["layers"] for r in results}), (True, False)):
            panels[f"E{depth}D{depth}, warmup {'yes' if warmup else 'no'}"] = [
                (r, f"{r['scheme']} seed {r['seed']}", dict(linestyle=styles[r["seed"]], marker=marker))
                for r in results
                if (r["layers"], r["warmup"]) == (depth, warmup)
            ]
        suptitle = "CPU-scale study on the synthetic corpus (small-scale analogue)"
        ylabel = f"{quantity} loss (label-smoothed CE, base 2)"
        plot_loss_curves(panels, f"{curve}_curve", out / f"{curve}_loss.png", suptitle, ylabel, columns=2)
    write_json(out / "results.json", {**meta, "runs": results})
    # the reading of the numbers is written by a person, kept in summary.md and inlined here
    summary_file = out / "summary.md"
    summary = summary_file.read_text().strip() if summary_file.exists() else ""
    s = meta["settings"]
    depths = " and ".join(f"E{d}D{d}" for d in s["depths"])
    run_minutes = sum(r["train_seconds"] + r["generate_seconds"] for r in results) / 60
    signature = next((r["bleu_signature"] for r in results if r["bleu_signature"]), "n/a")
    losses_at = losses_at_section(results, s.get("loss_at"), ("scheme", "warmup"), lambda d, u: f"E{d}D{d} @ {u}")
    body = f"""# CPU-scale depth x warmup study (small-scale analogue, not the paper's experiment)

Small models trained for {s["max_update"]} updates on the embedded **synthetic** corpus on a shared
2-core CPU. The study has the shape of the paper's IWSLT warmup ablation ({", ".join(s["schemes"])};
with and without learning-rate warmup; {depths}) but not its scale: width {s["dim"]} instead of 256,
{s["max_update"]} updates instead of training to convergence, {s["train_pairs"]} synthetic sentence
pairs instead of IWSLT-14. Its numbers say nothing about the paper's BLEU scores.

{summary}

## Final validation loss (label-smoothed CE, base 2; mean ± half-range over seeds)

{ablation_table(results, "final_valid_loss", 3)}

{losses_at}## Test BLEU (sacrebleu, detokenised beam-5 output; mean ± half-range over seeds)

{ablation_table(results, "bleu", 2)}

"fails" is `fairseq_residual_tools.training_log.divergence`, the rule the reproduction tables use
({FAILS_RULE}). A failed run is not decoded; a cell averages
the seeds that trained and says how many failed.

{failure_list(results)}

Curves: [train_loss.png](train_loss.png), [valid_loss.png](valid_loss.png). Every run's
numbers, curves and exact fairseq commands: [results.json](results.json).

## Setting

- Models: {depths}, width {s["dim"]}, FFN {4 * s["dim"]}, 4 heads, dropout 0.1, shared
  embeddings, fp32, no gradient clipping (as in the paper's IWSLT setting).
- Optimiser: Adam (0.9, 0.98), peak lr {s["lr"]:g}, inverse_sqrt. Warmup "yes": linear from
  1e-7 over {s["warmup"]} updates; warmup "no": the same scheduler starting at the peak lr
  (constant for {s["warmup"]} updates, then the same decay). {s["max_update"]} updates of at
  most {s["max_tokens"]} tokens; label-smoothed CE 0.1; seeds {", ".join(map(str, s["seeds"]))}.
- Data: the embedded synthetic corpus (seed 1), {s["train_pairs"]} training / {s["valid_pairs"]}
  valid / {s["test_pairs"]} test pairs, Moses tokens, joint BPE ({s["bpe_merges"]} merges).
  BLEU: `fairseq-generate` beam 5, max length 1.2 x source + 10, BPE removed,
  Moses-detokenised, sacrebleu against the raw references ({signature}).
- Machine shared with other jobs (runs under `nice -n 5`, {s.get("jobs", 1)} at a time, one torch
  thread each). The runs were trained at git commit(s)
  {", ".join(sorted({r.get("git") or "not recorded" for r in results}))} (per run in results.json).
  This report: {describe(meta.get("provenance", meta))}
- Time: {meta["study_minutes"]:.0f} min wall from the first run's first logged step to the last
  run's last (training only; decoding adds a little), {run_minutes:.0f} min of training and decoding
  summed over the {len(results)} runs.

Regenerate (resumable; finished runs in `--work` are skipped):

    {meta["command"]}
"""
    write_text(out / "README.md", body)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="fairseq-residual-cpu-study", description=__doc__.splitlines()[0])
    p.add_argument("--work", default=str(ROOT / "work" / "cpu-study"), help="data and checkpoints")
    p.add_argument("--out", default=str(ROOT / "results" / "cpu-study"), help="report folder")
    p.add_argument(
        "--schemes",
        nargs="+",
        default=["post", "pre", "residual"],
        help="schemes, or ResiDual with its output options: residual:scale=0.5 (analysis/variants.py)",
    )
    p.add_argument("--depths", type=int, nargs="+", default=[6, 12])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--jobs", type=int, default=3, help="runs trained at the same time (one thread each)")
    p.add_argument("--dim", type=int, default=64, help="model width (FFN is 4x)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (see README)")
    p.add_argument("--warmup", type=int, default=40, help="warmup updates of the warmup runs")
    p.add_argument("--max-update", type=int, default=150)
    p.add_argument("--validate-every", type=int, default=50)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--loss-at", type=int, nargs="+", help="also tabulate the validation loss at these updates")
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--train-pairs", type=int, default=6000)
    p.add_argument("--valid-pairs", type=int, default=200)
    p.add_argument("--test-pairs", type=int, default=200)
    p.add_argument("--bpe-merges", type=int, default=3000)
    return p.parse_args(argv)


def run_in_pool(items: Sequence, one, jobs: int) -> List[Dict]:
    """``one(item)`` for every item, ``jobs`` at a time. A run that raises RunError (a crash or a kill, not a
    divergence) has no verdict: it is named and left out, to be retried by the next invocation. One whose folder
    another process is training (``FolderBusy``) is left to that process."""

    busy = []

    def guarded(item):
        try:
            return one(item)
        except RunError as err:
            print(f"[error] {err}", flush=True)
        except FolderBusy as err:
            print(f"[busy] {err}", flush=True)
            busy.append(item.name)
        return None

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(guarded, items))
    if busy:
        print(f"{len(busy)} run(s) left to the process training them: {', '.join(busy)}", flush=True)
    missing = [item.name for item, result in zip(items, results) if result is None and item.name not in busy]
    if missing:
        left_out = f"{len(missing)} run(s) stopped without a verdict and are left out (run again to retry)"
        print(f"{left_out}: {', '.join(missing)}", flush=True)
    return [r for r in results if r is not None]


def run_all(specs: List[RunSpec], data, refs, args, started: float) -> List[Dict]:
    """Run the grid with ``args.jobs`` concurrent fairseq processes, printing progress."""
    runs_dir = Path(args.work) / "runs"
    done = itertools.count(1)

    def one(spec):
        skipped = " (done earlier, skipped)" if (runs_dir / spec.name / "result.json").exists() else ""
        if not skipped:
            print(f"[start] {spec.name} | {(time.time() - started) / 60:.1f} min elapsed", flush=True)
        result = run_one(spec, data, refs, args, runs_dir)
        print(
            f"[{next(done)}/{len(specs)}] {spec.name}{skipped}: fails={result['fails']}, "
            f"valid loss {result['final_valid_loss']}, BLEU {result['bleu']}, "
            f"{result['train_seconds']:.0f} s training | {(time.time() - started) / 60:.1f} min elapsed",
            flush=True,
        )
        return result

    results = run_in_pool(specs, one, args.jobs)
    print(f"every run's curves: tensorboard --logdir {runs_dir}", flush=True)
    return results


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    check_variants(args.schemes)
    started = time.time()
    work, out = Path(args.work), Path(args.out)
    data = prepare_demo_data(
        work / "data", train=args.train_pairs, valid=args.valid_pairs, test=args.test_pairs, bpe_merges=args.bpe_merges
    )
    refs = [line.rstrip("\n") for line in open(f"{data.raw_prefixes['test']}.{TGT}", encoding="utf-8")]
    specs = grid(args.schemes, args.depths, args.seeds)
    check_recorded_runs(specs, data, args, work / "runs")
    results = run_all(specs, data, refs, args, started)
    spans = [log_span(work / "runs" / r["name"] / "train.out") for r in results]
    first = min((a for a, _ in spans if a), default=None)
    last = max((b for _, b in spans if b), default=None)
    meta = dict(
        command=" ".join(["nice -n 5 .venv/bin/python scripts/cpu_study.py", *argv]),
        settings={k: v for k, v in vars(args).items() if k not in ("work", "out")},
        provenance=provenance(),
        wall_seconds=round(time.time() - started, 1),
        study_minutes=(last - first).total_seconds() / 60 if first else 0.0,
    )
    write_report(results, meta, out)
    print(ablation_table(results, "bleu", 2))
    return results
