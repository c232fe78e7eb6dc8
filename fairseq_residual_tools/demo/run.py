"""``make demo``: Post-LN, Pre-LN and ResiDual on the embedded synthetic corpus, on CPU.

Settings: ``configs/demo.yaml`` (``--set KEY=VALUE`` overrides one). Every scheme is trained at every depth
setting and its test-set translations scored; ``work/demo/report/`` (ignored by git) gets the table, samples, curves
and a reading. ``--update-results`` (``make demo-results``) writes them into the committed ``results/demo/`` and the
table into docs/results.md instead, with the sha256 of the code they were computed with
(``DEMO_CODE``): a test fails when that code has changed since, so it is the last step of any change to it.

The trainings run ``jobs`` at a time with one torch thread each (one thread per process beats two oversubscribed
ones whenever the cores are shared), the most expensive first so that the last to finish is a cheap one. A run's
folder is named by a hash of the settings and the code (``DEMO_CODE``) it depends on: a finished training
(``result.json``) is reused, an interrupted one resumes from its ``checkpoint_last.pt``, a changed setting or a change
to the plugin trains anew.
"""

import argparse
import hashlib
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import reduce
from operator import getitem
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import yaml

from ..commands import run_training, score_test_set, train_command
from ..errors import ConfigError, exit_on_user_error
from ..files import write_json
from ..provenance import code_sha256, provenance
from ..training_log import json_record, outcome
from .prepare import SRC, TGT, prepare_demo_data
from .report import depth_label, publish, write_report

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CONFIG = ROOT / "configs" / "demo.yaml"
RESULTS = ROOT / "results" / "demo"
#: the page showing the committed results' table (the README's table is the Bible study's: evidence, not a check)
PAGES = (ROOT / "docs" / "results.md",)
#: what the committed results are of: the whole plugin (every training and decoding loads all of it: its patches
#: change batching, resuming and logging, so no part can be ruled out by reading), the demo's code and settings
DEMO_CODE = ("fairseq_residual", "fairseq_residual_tools/demo", "configs/demo.yaml")
DEPTH_KEYS = {"layers", "dim", "lr", "warmup", "max_tokens", "max_update", "validate_every"}


def load_settings(path=DEFAULT_CONFIG, overrides: Sequence[str] = ()) -> Dict:
    """The YAML file as a dict, each ``a.b=value`` override applied (value parsed as YAML); a number picks a list
    item: ``depths.1.max_update=200`` is the second depth's budget."""
    settings = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item!r} is not KEY=VALUE; write e.g. --set corpus.train=300")
        *sections, last = [int(part) if part.isdigit() else part for part in key.split(".")]
        try:
            node = reduce(getitem, sections, settings)
            node[last]  # an existing setting (not a new key), in a section (a string or number raises TypeError)
            node[last] = yaml.safe_load(value)
        except (KeyError, IndexError, TypeError):
            raise ConfigError(f"--set {key}: no such setting in {path}; see the file for the keys") from None
    for depth in settings["depths"]:
        # a depth may also set warmup_init_lr (= lr: no warmup, as in the paper's warmup ablation)
        if not DEPTH_KEYS <= set(depth) <= DEPTH_KEYS | {"warmup_init_lr"}:
            raise ConfigError(
                f"{path}: a depth setting has the keys {', '.join(sorted(depth))}; "
                f"it needs {', '.join(sorted(DEPTH_KEYS))} and may set warmup_init_lr"
            )
    return settings


def digest(*parts) -> str:
    """A short stable hash of JSON-serialisable settings."""
    return hashlib.sha1(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:8]


def run_name(settings: Dict, scheme: str, depth: Dict, code: str) -> str:
    """``post-e12d12-<hash>``: the folder of one training, named by everything it depends on, the code
    (``code``: DEMO_CODE's sha256) included, so that a training made by other code is never reused."""
    key = digest(settings["seed"], settings["corpus"], depth, settings["log_points"], scheme, code)
    return f"{scheme}-e{depth['layers']}d{depth['layers']}-{key}"


class TrainingProgress:
    """``on_line`` callback: ``[label] update U/N  loss L  ETA T`` every tenth of the updates, from fairseq-train's
    JSON ``train_inner`` lines. The ETA is this process's rate so far (a resumed training starts counting again)."""

    def __init__(self, label: str, max_update: int):
        self.label, self.max_update, self.every = label, max_update, max(1, max_update // 10)
        self.start: Optional[Tuple[float, int]] = None  # (time, update) of the first logged update
        self.next_print = 0

    def __call__(self, line: str):
        record = json_record(line)
        if record is None or "num_updates" not in record or "loss" not in record:
            return
        update, loss, now = int(record["num_updates"]), float(record["loss"]), time.monotonic()
        self.start = self.start or (now, update)
        if update < self.next_print and update < self.max_update:
            return
        self.next_print = update + self.every
        t0, u0 = self.start
        eta = "?"
        if update > u0:
            minutes, seconds = divmod(round((self.max_update - update) * (now - t0) / (update - u0)), 60)
            eta = f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
        print(f"[{self.label}] update {update}/{self.max_update}  loss {loss:.2f}  ETA {eta}", flush=True)


def train_and_score(scheme: str, depth: Dict, settings: Dict, data, references, runs_dir: Path, code: str) -> Dict:
    """Train (unless ``result.json`` says it was, with this code), judge, decode and score one model."""
    label = f"{scheme} {depth_label(depth['layers'])}"
    save_dir = runs_dir / run_name(settings, scheme, depth, code)
    result_file = save_dir / "result.json"
    if result_file.exists():
        print(f"[{label}] reused: finished training in {save_dir}", flush=True)
        return {**json.loads(result_file.read_text()), "reused": True}
    save_dir.mkdir(parents=True, exist_ok=True)
    interval = max(1, depth["max_update"] // settings["log_points"])
    cmd = train_command(data.databin, save_dir, scheme=scheme, seed=settings["seed"], log_interval=interval, **depth)
    run_training(cmd, save_dir / "train.out", label, on_line=TrainingProgress(label, depth["max_update"]))
    hypotheses, scores = score_test_set(data.databin, save_dir, references, label, "--beam", settings["beam"])
    result = dict(
        scheme=scheme,
        layers=depth["layers"],
        depth=depth,
        **outcome(save_dir / "train.out"),
        samples=hypotheses[: settings["samples"]],
        train_command=" ".join(map(str, cmd[2:])),
        **scores,
    )
    write_json(result_file, result)  # written whole or not at all: a kill here retrains nothing
    print(f"[{label}] done: test BLEU {result['bleu']:.1f}, {'fails' if result['fails'] else 'trained'}", flush=True)
    return {**result, "reused": False}


def main(argv=None):
    p = argparse.ArgumentParser(prog="fairseq-residual-demo", description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="the demo's settings (default: %(default)s)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting of the config, e.g. --set corpus.train=300 (repeatable; VALUE is YAML)",
    )
    p.add_argument("--work", default=str(ROOT / "work" / "demo"), help="data and checkpoints (default: %(default)s)")
    p.add_argument("--out", help="report folder (default: WORK/report)")
    p.add_argument(
        "--update-results",
        action="store_true",
        help=f"write the committed results instead: {RESULTS.relative_to(ROOT)}/ and the table in docs/results.md "
        "(the default settings only)",
    )
    args = p.parse_args(argv)
    if args.update_results:
        if args.set or Path(args.config).resolve() != DEFAULT_CONFIG or args.out:
            raise ConfigError(
                "--update-results writes the committed results of the default settings: leave out "
                "--set, --config and --out"
            )
    args.out = str(RESULTS) if args.update_results else args.out or str(Path(args.work) / "report")
    settings = load_settings(args.config, args.set)

    from fairseq_residual.schemes import SCHEMES

    unknown = [s for s in settings["schemes"] if s not in SCHEMES]
    if unknown:
        p.error(f"unknown scheme(s) {', '.join(unknown)} in the settings; choose from {', '.join(SCHEMES)}")
    jobs = settings["jobs"] or os.cpu_count() or 1

    started = time.time()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    code = code_sha256(DEMO_CODE)  # before training: the code the numbers come from
    work = Path(args.work)
    data = prepare_demo_data(
        work / f"data-{digest(settings['seed'], settings['corpus'])}", seed=settings["seed"], **settings["corpus"]
    )
    sources, references = (
        Path(f"{data.raw_prefixes['test']}.{lang}").read_text(encoding="utf-8").splitlines() for lang in (SRC, TGT)
    )

    runs = [(scheme, depth) for depth in settings["depths"] for scheme in settings["schemes"]]
    by_cost = sorted(runs, key=lambda run: -run[1]["layers"] * run[1]["max_update"] * run[1]["max_tokens"])
    with ThreadPoolExecutor(max_workers=min(jobs, len(runs))) as pool:
        futures = {
            id(run): pool.submit(train_and_score, *run, settings, data, references, work / "runs", code)
            for run in by_cost
        }
        rows = [futures[id(run)].result() for run in runs]
    meta = dict(
        command=" ".join(["python -m fairseq_residual_tools.demo.run", *(argv if argv is not None else sys.argv[1:])]),
        settings=settings,
        jobs=jobs,
        reused=sum(r.pop("reused") for r in rows),
        wall_seconds=round(time.time() - started, 1),
        load_average_at_start=load_at_start,
        provenance=provenance(),
        code=dict(paths=list(DEMO_CODE), sha256=code),
    )
    print(write_report(rows, meta, sources, references, args.out))
    if args.update_results:
        publish({**meta, "rows": rows}, PAGES)
        print(f"\nthe table in {' and '.join(str(p.relative_to(ROOT)) for p in PAGES)} updated", flush=True)
    print(f"\nwritten to {args.out} in {meta['wall_seconds']:.0f} s", flush=True)
    print(f"every training's curves: tensorboard --logdir {work / 'runs'}", flush=True)


if __name__ == "__main__":
    sys.exit(exit_on_user_error(main))
