"""CPU-scale language-model study: every residual scheme at two depths on real English text.

    python -m fairseq_residual_tools.analysis.lm_study            # make lm-cpu-results (resumable)

For every scheme (``schemes.SCHEMES`` at run time unless ``--schemes``), depth and seed, ``fairseq-train``
trains a small ``residual_transformer_lm`` on the Python manual's text (``dataprep.pydoc_text``: it ships
with every CPython) and ``fairseq-eval-lm`` gives its test perplexity; "fails" is ``training_log.divergence``,
the rule of every other table. ``results/lm-cpu/`` gets the tables, the exact command and the environment.

Exact reuse: a run's folder is named by the run and a digest of its whole training command (paths aside), of
the data-bin's bytes and of what the model computes (``fingerprint.py``), so a finished run (``result.json``) is
reused only for the very same training; a changed setting, text or scheme code trains anew. An interrupted run
resumes from its ``checkpoint_last.pt`` (fairseq's own restore). A re-run with nothing new trains nothing and says so.
"""

import argparse
import hashlib
import itertools
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from ..commands import lm_train_command, run_training, score_lm_test_set
from ..dataprep import pydoc_text
from ..errors import ConfigError, exit_on_user_error
from ..files import write_json, write_text
from ..markdown import table
from ..provenance import ROOT, describe, describe_git, git_state, provenance
from ..runner import PLUGIN_DIR
from ..training_log import RULE as FAILS_RULE
from ..training_log import outcome
from .fingerprint import model_fingerprint
from .study import SEED_STYLES, failure_list, format_cell, losses_at_section, print_validation, run_in_pool
from .variants import check_variants, variant_flags, variant_name

#: the settings that go into every run's fairseq-train command
TRAINING_SETTINGS = ("dim", "lr", "warmup", "max_tokens", "max_update", "validate_every", "log_interval")


@dataclass(frozen=True)
class LMRun:
    scheme: str
    layers: int
    seed: int

    @property
    def name(self) -> str:
        return f"{variant_name(self.scheme)}-l{self.layers}-seed{self.seed}"


def grid(schemes: Sequence[str], depths: Sequence[int], seeds: Sequence[int]) -> List[LMRun]:
    """Every run, shallow models first (so partial results cover whole columns)."""
    return [LMRun(scheme, layers, seed) for layers, scheme, seed in itertools.product(depths, schemes, seeds)]


def check_schemes(schemes: Sequence[str]) -> None:
    """Every ``--schemes`` item is a registered scheme, or ResiDual with its output options (``variants.py``)."""
    from fairseq_residual.schemes import SCHEMES

    unknown = [s for s in schemes if s.partition(":")[0] not in SCHEMES]
    if unknown:
        raise ConfigError(f"unknown scheme(s) {', '.join(unknown)}: --schemes takes {', '.join(SCHEMES)}")
    check_variants(schemes)


def data_digest(databin: Path) -> str:
    """sha256 over the data-bin's dictionary and binarised splits, in name order."""
    digest = hashlib.sha256()
    for path in sorted(databin.glob("*")):
        if path.suffix in (".txt", ".bin", ".idx"):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def training_command(databin, save_dir, run: LMRun, settings) -> List[str]:
    options = {key: getattr(settings, key) for key in TRAINING_SETTINGS}
    scheme, model_options = variant_flags(run.scheme)
    return lm_train_command(
        databin, save_dir, scheme=scheme, layers=run.layers, seed=run.seed, model_options=model_options, **options
    )


def run_key(run: LMRun, settings, data_sha: str, fingerprint: str) -> str:
    """What makes a run this run: its fairseq-train arguments (the data and save folders and the checkout's path
    aside), the data and what the model computes (``fingerprint.model_fingerprint``)."""
    args = [  # after python -m fairseq_cli.train; the checkout's path aside
        "PLUGIN" if a == str(PLUGIN_DIR) else a for a in training_command("DATA", "SAVE", run, settings)[3:]
    ]
    return hashlib.sha256(json.dumps([args, data_sha, fingerprint]).encode()).hexdigest()[:12]


def run_one(run: LMRun, data: Dict, settings, runs_dir: Path) -> Dict:
    """Train (unless this exact run finished before), judge by the rule, score the test split if it trained."""
    key = run_key(run, settings, data["sha256_bin"], data["fingerprints"][run])
    save_dir = runs_dir / f"{run.name}-{key}"
    result_file = save_dir / "result.json"
    if result_file.exists():
        return dict(json.loads(result_file.read_text()), reused=True)
    save_dir.mkdir(parents=True, exist_ok=True)
    cmd = training_command(data["databin"], save_dir, run, settings)
    git = describe_git(git_state())  # the code the training loads, not the tree when it ends
    run_training(cmd, save_dir / "train.out", run.name, on_line=partial(print_validation, run.name))
    result = dict(asdict(run), name=run.name, train_command=" ".join(map(str, cmd[2:])), git=git)
    result.update(outcome(save_dir / "train.out"))
    result.update(test_loss=None, test_ppl=None, eval_command=None)
    if result["fails"] is None:
        result.update(score_lm_test_set(data["databin"], save_dir, run.name))
    write_json(result_file, result)  # written last: a run killed before this trains or scores again
    return dict(result, reused=False)


def run_all(runs: List[LMRun], data: Dict, settings, runs_dir: Path, started: float) -> List[Dict]:
    """The grid with ``settings.jobs`` concurrent fairseq processes, printing progress; a run that stopped without
    a verdict (not a divergence: a crash, a kill) is left out and named."""
    done = itertools.count(1)

    def one(run):
        result = run_one(run, data, settings, runs_dir)
        how = "done earlier with these settings, reused" if result["reused"] else f"{result['train_seconds']:.0f} s"
        print(
            f"[{next(done)}/{len(runs)}] {run.name}: fails={result['fails']}, test perplexity {result['test_ppl']} "
            f"({how}) | {(time.time() - started) / 60:.1f} min elapsed",
            flush=True,
        )
        return result

    return run_in_pool(runs, one, settings.jobs)


def depth_table(results: List[Dict], key: str, digits: int) -> str:
    """Rows: schemes; columns: depths; cells: mean ± half-range over the seeds that trained, or "fails"."""
    depths = sorted({r["layers"] for r in results})
    rows = []
    for scheme in dict.fromkeys(r["scheme"] for r in results):
        runs = [r for r in results if r["scheme"] == scheme]
        rows.append([scheme, *(format_cell([r for r in runs if r["layers"] == d], key, digits) for d in depths)])
    return table(["scheme"] + [f"{d} layers" for d in depths], rows)


def curve_panels(results: List[Dict], marker, zoom_from: Optional[int] = None) -> Dict[str, List]:
    """One panel per depth, one line per scheme and seed; with ``zoom_from`` a second panel per depth holding the
    points from that update on, so that the late differences are not flattened by the first updates' losses."""
    styles = dict(zip(sorted({r["seed"] for r in results}), itertools.cycle(SEED_STYLES)))

    def lines(runs):
        return [(r, f"{r['scheme']} seed {r['seed']}", dict(linestyle=styles[r["seed"]], marker=marker)) for r in runs]

    panels = {}
    for depth in sorted({r["layers"] for r in results}):
        runs = [r for r in results if r["layers"] == depth]
        panels[f"{depth} layers"] = lines(runs)
        if zoom_from is not None:
            late = [{**r, "valid_curve": [[u, v] for u, v in r["valid_curve"] if u >= zoom_from]} for r in runs]
            panels[f"{depth} layers, from update {zoom_from}"] = lines(late)
    return panels


def plot_curves(results: List[Dict], out: Path, zoom_from: Optional[int] = None) -> None:
    """train_loss.png and valid_loss.png (``curve_panels``; the zoom in valid_loss.png only)."""
    from .plotting import plot_loss_curves

    for curve, quantity, marker in (("train", "training", None), ("valid", "validation", ".")):
        panels = curve_panels(results, marker, zoom_from if curve == "valid" else None)
        suptitle = "CPU-scale LM study (a small CPU run)"
        ylabel = f"{quantity} loss (cross-entropy, base 2)"
        plot_loss_curves(
            panels,
            f"{curve}_curve",
            out / f"{curve}_loss.png",
            suptitle,
            ylabel,
            columns=len(panels),
            sharey=zoom_from is None or curve == "train",
        )


def updates_to_reach(run: Dict, loss: float) -> Optional[int]:
    """The first validation point at or below ``loss`` (its update), None if the run never got there."""
    return next((update for update, value in run["valid_curve"] if value <= loss), None)


def reach_cell(runs: List[Dict], loss: float) -> str:
    """Mean ± half-range of the updates the trained seeds took to reach ``loss``; how many did not, or failed."""
    if not runs:
        return "not run"
    trained = [r for r in runs if not r["fails"]]
    reached = [u for u in (updates_to_reach(r, loss) for r in trained) if u is not None]
    notes = [f"{len(trained) - len(reached)}/{len(runs)} not reached"] if len(reached) < len(trained) else []
    notes += [f"{len(runs) - len(trained)}/{len(runs)} fail"] if len(trained) < len(runs) else []
    if not reached:
        return "; ".join(notes) if trained else f"fails ({len(runs)}/{len(runs)})"
    cell = f"{statistics.mean(reached):.0f}" + (
        f" ± {(max(reached) - min(reached)) / 2:.0f}" if len(reached) > 1 else ""
    )
    return cell + (f" ({'; '.join(notes)})" if notes else "")


def reach_section(results: List[Dict], losses: Optional[Sequence[float]]) -> str:
    if not losses:
        return ""
    depths = sorted({r["layers"] for r in results})
    rows = [
        [
            scheme,
            *(
                reach_cell([r for r in results if (r["scheme"], r["layers"]) == (scheme, d)], x)
                for d in depths
                for x in losses
            ),
        ]
        for scheme in dict.fromkeys(r["scheme"] for r in results)
    ]
    at = table(["scheme"] + [f"{d} layers, loss <= {x:g}" for d in depths for x in losses], rows)
    return f"""## Updates to reach a validation loss (`--reach`; the first validation point at or below it)

{at}

"""


def write_report(results: List[Dict], meta: Dict, out: Path) -> None:
    from fairseq_residual.schemes import SCHEMES

    out.mkdir(parents=True, exist_ok=True)
    plot_curves(results, out, meta["settings"].get("zoom_from"))
    write_json(out / "results.json", {**meta, "runs": [{k: v for k, v in r.items() if k != "reused"} for r in results]})
    summary_file = out / "summary.md"  # the reading, written by a person after the run
    summary = summary_file.read_text().strip() if summary_file.exists() else ""
    s, d = meta["settings"], meta["data"]
    depths = " and ".join(f"{x} layers" for x in s["depths"])
    which = "Every residual scheme" if set(SCHEMES) <= set(s["schemes"]) else "The schemes " + ", ".join(s["schemes"])
    losses_at = losses_at_section(
        results, s.get("loss_at"), ("scheme",), lambda d, u: f"{d} layers @ {u}"
    ) + reach_section(results, s.get("reach"))
    body = f"""# CPU-scale language-model study (a small CPU run, not a paper figure)

{which} trained as a decoder-only language model (`residual_transformer_lm`) for
{s["max_update"]} updates on a shared 2-core CPU: {depths}, width {s["dim"]}, seeds
{", ".join(map(str, s["seeds"]))}. The ResiDual paper has no language-model experiment; these numbers
compare the schemes at a scale far below any paper's (a {d["words"]}-word text, minutes of training) and
say nothing about large language models.

{summary}

## Test perplexity (fairseq-eval-lm, per BPE token; mean ± half-range over seeds)

{depth_table(results, "test_ppl", 1)}

## Final validation loss (cross-entropy, base 2; mean ± half-range over seeds)

{depth_table(results, "final_valid_loss", 3)}

{losses_at}![validation loss against updates](valid_loss.png)

Curves: [train_loss.png](train_loss.png), [valid_loss.png](valid_loss.png).

"fails" is `fairseq_residual_tools.training_log.divergence`, the rule every table here uses
({FAILS_RULE}). A failed run is not scored; a cell averages the seeds that trained and says how many
failed.

{failure_list(results)}

## Setting

- Text: {d["source"]}, Python {d["python"]}, {d["paragraphs"]} paragraphs, {d["words"]} words
  (sha256 {d["sha256"][:16]}…); {d["split"]} ({d["lines"]["train"]} / {d["lines"]["valid"]} /
  {d["lines"]["test"]} lines). Moses tokens, BPE with {d["bpe_merges"]} merges,
  `fairseq-preprocess --only-source` (`fairseq_residual_tools/dataprep/pydoc_text.py`).
- Model: `residual_transformer_lm`, {depths}, width {s["dim"]}, FFN {4 * s["dim"]}, 4 heads,
  dropout 0.1, input and output embeddings shared, fp32. Blocks of 128 tokens across lines
  (`--sample-break-mode none`), in training and in `fairseq-eval-lm`.
- Optimiser: Adam (0.9, 0.98), peak lr {s["lr"]:g}, inverse_sqrt with {s["warmup"]} warmup updates
  from 1e-7, {s["max_update"]} updates of at most {s["max_tokens"]} tokens, cross-entropy.
- {s["jobs"]} runs at a time, one torch thread each. Runs trained at
  {", ".join(sorted({r.get("git") or "not recorded" for r in results}))} (per run in results.json).
  This report: {describe(meta["provenance"])}

Every run's curves, commands and numbers: [results.json](results.json). Regenerate (resumable; a run is
reused only where its training command and data are the same):

    {meta["command"]}
"""
    write_text(out / "README.md", body)


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m fairseq_residual_tools.analysis.lm_study", description=__doc__.splitlines()[0]
    )
    p.add_argument("--work", default=str(ROOT / "work" / "lm-cpu"), help="data and checkpoints")
    p.add_argument("--out", default=str(ROOT / "results" / "lm-cpu"), help="report folder")
    p.add_argument(
        "--schemes",
        nargs="+",
        help="default: every registered scheme; ResiDual with its output options: residual:scale=0.5",
    )
    p.add_argument("--depths", type=int, nargs="+", default=[6, 12])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--jobs", type=int, default=2, help="runs trained at the same time (one thread each)")
    p.add_argument("--dim", type=int, default=64, help="model width (FFN is 4x)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--max-update", type=int, default=150)
    p.add_argument("--validate-every", type=int, default=50)
    p.add_argument("--log-interval", type=int, default=10)
    p.add_argument("--loss-at", type=int, nargs="+", help="also tabulate the validation loss at these updates")
    p.add_argument(
        "--reach", type=float, nargs="+", help="also tabulate the updates each run took to reach these losses"
    )
    p.add_argument(
        "--zoom-from", type=int, help="valid_loss.png gains a panel per depth from this update on, on its own scale"
    )
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--bpe-merges", type=int, default=2000)
    p.add_argument("--paragraphs", type=int, help="the text's first N paragraphs only (default: all)")
    return p.parse_args(argv)


def study(argv: List[str]) -> Optional[List[Dict]]:
    from fairseq_residual.schemes import SCHEMES

    args = parse_args(argv)
    args.schemes = args.schemes or list(SCHEMES)
    check_schemes(args.schemes)
    if min(args.depths) < 1 or not args.seeds:
        raise ConfigError("--depths takes layer counts of at least 1 and --seeds at least one seed")
    started = time.time()
    work, out = Path(args.work), Path(args.out)
    data = pydoc_text.prepare(work / "data", args.bpe_merges, args.paragraphs)
    data["sha256_bin"] = data_digest(Path(data["databin"]))
    runs = grid(args.schemes, args.depths, args.seeds)
    data["fingerprints"] = {r: model_fingerprint(training_command(data["databin"], work, r, args)[3:]) for r in runs}
    print(f"{len(runs)} runs: {', '.join(args.schemes)} x {args.depths} layers x seeds {args.seeds}", flush=True)
    results = run_all(runs, data, args, work / "runs", started)
    if results and all(r["reused"] for r in results) and len(results) == len(runs):
        print("every run was done earlier with these settings and data: nothing to train; report rewritten")
    meta = dict(
        command=" ".join(["python -m fairseq_residual_tools.analysis.lm_study", *argv]),
        settings={k: v for k, v in vars(args).items() if k not in ("work", "out")},
        data={k: v for k, v in data.items() if k not in ("databin", "fingerprints")},
        provenance=provenance(),
        wall_seconds=round(time.time() - started, 1),
    )
    write_report(results, meta, out)
    print(depth_table(results, "test_ppl", 1))
    print(f"written to {out}; every training's curves: tensorboard --logdir {work / 'runs'}")
    return results


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return exit_on_user_error(lambda: study(argv) and None)


if __name__ == "__main__":
    raise SystemExit(main())
