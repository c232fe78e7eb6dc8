"""``make demo``: Post-LN, Pre-LN and ResiDual on the embedded synthetic corpus, on CPU.

Settings: ``configs/demo.yaml`` (``--set KEY=VALUE`` overrides one). The corpus is prepared
with the real pipeline (Moses tokens, joint BPE, fairseq-preprocess); for every depth setting
and scheme ``fairseq-train`` trains one model, ``fairseq-generate`` translates the test set and
sacrebleu scores the detokenised output. ``results/demo/`` gets the table (BLEU, final
validation loss, the "fails" verdict), sample translations, training curves and a sentence
reading the measured numbers.

The trainings run side by side, ``jobs`` at a time with one torch thread each (one thread
per process beats two oversubscribed ones whenever the cores are shared), the most expensive
first so that the last to finish is a cheap one; each prints a progress line every tenth of
its updates. A finished training leaves ``result.json`` and is reused; an interrupted one
resumes from its ``checkpoint_last.pt`` when the demo runs again.
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict

from ..commands import run_training, score_test_set, train_command
from ..provenance import provenance
from ..training_log import outcome
from .prepare import SRC, TGT, prepare_demo_data
from .progress import TrainingProgress
from .report import depth_label, write_report
from .settings import DEFAULT_CONFIG, data_key, load_settings, run_name

ROOT = Path(__file__).resolve().parents[2]


def train_and_score(scheme: str, depth: Dict, settings: Dict, data, references, runs_dir: Path) -> Dict:
    """Train (unless ``result.json`` says it was), judge, decode and score one model."""
    label = f"{scheme} {depth_label(depth['layers'])}"
    save_dir = runs_dir / run_name(settings, scheme, depth)
    result_file = save_dir / "result.json"
    if result_file.exists():
        print(f"[{label}] reused: finished training in {save_dir}", flush=True)
        return {**json.loads(result_file.read_text()), "reused": True}
    save_dir.mkdir(parents=True, exist_ok=True)
    interval = max(1, depth["max_update"] // settings["log_points"])
    cmd = train_command(data.databin, save_dir, scheme=scheme, seed=settings["seed"], log_interval=interval, **depth)
    progress = TrainingProgress(label, depth["max_update"], every=max(1, depth["max_update"] // 10))
    run_training(cmd, save_dir / "train.out", label, on_line=progress)
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
    tmp = result_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(result_file)  # written whole or not at all: a kill here retrains nothing
    print(f"[{label}] done: test BLEU {result['bleu']:.1f}, {'fails' if result['fails'] else 'trained'}", flush=True)
    return {**result, "reused": False}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="the demo's settings (default: %(default)s)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting of the config, e.g. --set corpus.train=300 (repeatable; VALUE is YAML)",
    )
    p.add_argument("--work", default=str(ROOT / "work" / "demo"), help="data and checkpoints (default: %(default)s)")
    p.add_argument("--out", default=str(ROOT / "results" / "demo"), help="report folder (default: %(default)s)")
    args = p.parse_args(argv)
    settings = load_settings(args.config, args.set)

    from fairseq_residual.schemes import SCHEMES

    unknown = [s for s in settings["schemes"] if s not in SCHEMES]
    if unknown:
        p.error(f"unknown scheme(s) {', '.join(unknown)} in the settings; choose from {', '.join(SCHEMES)}")
    jobs = settings["jobs"] or os.cpu_count() or 1

    started = time.time()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    work = Path(args.work)
    data = prepare_demo_data(work / f"data-{data_key(settings)}", seed=settings["seed"], **settings["corpus"])
    sources, references = (
        Path(f"{data.raw_prefixes['test']}.{lang}").read_text(encoding="utf-8").splitlines() for lang in (SRC, TGT)
    )

    runs = [(scheme, depth) for depth in settings["depths"] for scheme in settings["schemes"]]
    by_cost = sorted(runs, key=lambda run: -run[1]["layers"] * run[1]["max_update"] * run[1]["max_tokens"])
    with ThreadPoolExecutor(max_workers=min(jobs, len(runs))) as pool:
        futures = {
            (scheme, id(depth)): pool.submit(train_and_score, scheme, depth, settings, data, references, work / "runs")
            for scheme, depth in by_cost
        }
        rows = [futures[(scheme, id(depth))].result() for scheme, depth in runs]
    meta = dict(
        command=" ".join(["python -m fairseq_residual_tools.demo.run", *(argv if argv is not None else sys.argv[1:])]),
        settings=settings,
        jobs=jobs,
        reused=sum(r.pop("reused") for r in rows),
        wall_seconds=round(time.time() - started, 1),
        load_average_at_start=load_at_start,
        provenance=provenance(),
    )
    print(write_report(rows, meta, sources, references, args.out))
    print(f"\nwritten to {args.out} in {meta['wall_seconds']:.0f} s", flush=True)


if __name__ == "__main__":
    from ..errors import exit_on_user_error

    sys.exit(exit_on_user_error(main))
