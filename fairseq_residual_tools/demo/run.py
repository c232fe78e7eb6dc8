"""``make demo``: Post-LN vs Pre-LN vs ResiDual on the embedded synthetic corpus, on CPU.

Prepares the corpus with the real pipeline (Moses tokens, joint BPE,
fairseq-preprocess), trains one small model per scheme with ``fairseq-train``,
translates the test set with ``fairseq-generate`` (beam 5), scores detokenised
output with sacrebleu and writes ``results/demo/`` (a markdown table with the
command and versions, JSON, and a PNG of validation-loss curves).

The schemes train side by side, ``--jobs`` at a time (default: one per CPU core, one
intra-op thread each); every process's progress lines carry its scheme's name.

Every step is resumable: finished data stages are skipped and a model whose
``checkpoint_last.pt`` already reached ``--max-update`` is not trained again.
"""

import argparse
import os
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fairseq_residual.schemes import SCHEMES

from .prepare import TGT, prepare_demo_data
from .report import collect_versions, plot_valid_loss, read_valid_losses, write_report

DEFAULT_SCHEMES = "post,pre,residual"
ROOT = Path(__file__).resolve().parents[2]


def train_command(databin, save_dir, scheme, args):
    return [
        sys.executable,
        "-m",
        "fairseq_cli.train",
        str(databin),
        "--user-dir",
        str(ROOT / "fairseq_residual"),
        "--arch",
        "residual_transformer_iwslt_de_en",
        "--residual-scheme",
        scheme,
        "--encoder-layers",
        str(args.layers),
        "--decoder-layers",
        str(args.layers),
        "--encoder-embed-dim",
        str(args.dim),
        "--decoder-embed-dim",
        str(args.dim),
        "--encoder-ffn-embed-dim",
        str(4 * args.dim),
        "--decoder-ffn-embed-dim",
        str(4 * args.dim),
        "--share-all-embeddings",
        "--dropout",
        "0.1",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9, 0.98)",
        "--lr",
        str(args.lr),
        "--lr-scheduler",
        "inverse_sqrt",
        "--warmup-updates",
        str(args.warmup),
        "--warmup-init-lr",
        "1e-07",
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--max-tokens",
        str(args.max_tokens),
        "--max-update",
        str(args.max_update),
        "--validate-interval-updates",
        str(args.validate_every),
        "--save-interval-updates",
        str(args.validate_every),
        "--keep-interval-updates",
        "1",
        "--no-epoch-checkpoints",
        "--seed",
        str(args.seed),
        "--cpu",
        "--num-workers",
        "0",
        "--log-format",
        "json",
        "--log-interval",
        "50",
        "--save-dir",
        str(save_dir),
        "--log-file",
        str(save_dir / "train.log"),
    ]


def generate_command(databin, save_dir):
    return [
        sys.executable,
        "-m",
        "fairseq_cli.generate",
        str(databin),
        "--user-dir",
        str(ROOT / "fairseq_residual"),
        "--path",
        str(save_dir / "checkpoint_last.pt"),
        "--gen-subset",
        "test",
        "--beam",
        "5",
        "--remove-bpe",
        "--max-tokens",
        "4000",
        "--cpu",
        "--results-path",
        str(save_dir / "generate-test"),
    ]


def run_logged(cmd, label):
    """Run a CLI, showing one progress line per logged update / validation.

    The demo's models are small: one intra-op thread per process is about as fast
    as two on an idle machine, and avoids the many-fold slowdown of oversubscribed
    OpenMP threads when the cores are shared (set OMP_NUM_THREADS to override).
    """
    print(f"[{label}] $ {' '.join(cmd[2:])}", flush=True)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    tail = []
    for line in proc.stdout:
        tail = (tail + [line])[-40:]
        if '"num_updates"' in line or '"valid_loss"' in line:
            print(f"[{label}] {line.split('|')[-1].strip()[:150]}", flush=True)
    if proc.wait() != 0:
        sys.stderr.write("".join(tail))
        raise SystemExit(f"error: {label} failed (exit {proc.returncode}); see output above")


def timed(job, record):
    """Run ``job``; return the wall time summed over every run recorded in ``record``
    (a resumed or already finished training adds only its own, short, run)."""
    t0 = time.time()
    job()
    total = time.time() - t0 + (float(record.read_text()) if record.exists() else 0.0)
    record.write_text(f"{total:.1f}\n")
    return total


def hypotheses(results_dir):
    """Detokenised hypotheses of fairseq-generate, in test-set order."""
    from sacremoses import MosesDetokenizer

    detok = MosesDetokenizer(lang="en")
    hyps = {}
    for line in open(Path(results_dir) / "generate-test.txt", encoding="utf-8"):
        if line.startswith("H-"):
            idx, _, text = line.rstrip("\n").split("\t")
            hyps[int(idx[2:])] = detok.detokenize(text.split())
    return [hyps[i] for i in range(len(hyps))]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default=str(ROOT / "work" / "demo"), help="data and checkpoints")
    p.add_argument("--out", default=str(ROOT / "results" / "demo"), help="report folder")
    p.add_argument("--layers", type=int, default=6, help="encoder and decoder layers")
    p.add_argument("--dim", type=int, default=64, help="model width (FFN is 4x)")
    p.add_argument("--max-update", type=int, default=600)
    p.add_argument("--validate-every", type=int, default=100)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--max-tokens", type=int, default=2048)
    p.add_argument("--train-pairs", type=int, default=6000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="schemes trained at the same time, each with one thread (default: the number of CPU cores)",
    )
    p.add_argument(
        "--schemes",
        default=DEFAULT_SCHEMES,
        help=f"comma-separated residual schemes to compare (any of: {', '.join(SCHEMES)})",
    )
    args = p.parse_args(argv)
    schemes = args.schemes.split(",")
    unknown = [s for s in schemes if s not in SCHEMES]
    if unknown:
        p.error(f"unknown scheme(s) {', '.join(unknown)}; choose from {', '.join(SCHEMES)}")
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")

    started = time.time()
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    work, out = Path(args.work), Path(args.out)
    data = prepare_demo_data(work / "data", seed=args.seed, train=args.train_pairs)
    refs = [line.rstrip("\n") for line in open(f"{data.raw_prefixes['test']}.{TGT}", encoding="utf-8")]

    from sacrebleu.metrics import BLEU

    def train_and_score(scheme):
        save_dir = work / "checkpoints" / scheme
        save_dir.mkdir(parents=True, exist_ok=True)
        cmd = train_command(data.databin, save_dir, scheme, args)
        train_s = timed(lambda: run_logged(cmd, f"train {scheme}"), save_dir / "train_seconds.txt")
        run_logged(generate_command(data.databin, save_dir), f"generate {scheme}")
        bleu_metric = BLEU()  # one per thread
        bleu = bleu_metric.corpus_score(hypotheses(save_dir / "generate-test"), [refs])
        losses = read_valid_losses(save_dir / "train.log")
        return dict(
            scheme=scheme,
            bleu=round(bleu.score, 2),
            bleu_signature=str(bleu_metric.get_signature()),
            final_valid_loss=losses[-1][1] if losses else None,
            valid_losses=losses,
            train_seconds=round(train_s, 1),
            train_command=" ".join(cmd[2:]),
        )

    # map() returns the rows in scheme order and re-raises the first failure
    with ThreadPoolExecutor(max_workers=min(args.jobs, len(schemes))) as pool:
        rows = list(pool.map(train_and_score, schemes))
    out.mkdir(parents=True, exist_ok=True)
    plot_valid_loss(rows, out / "valid_loss.png")
    meta = dict(
        command=" ".join(["python -m fairseq_residual_tools.demo.run", *(argv or sys.argv[1:])]).strip(),
        settings=vars(args),
        versions=collect_versions(),
        machine=f"{platform.platform()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        wall_seconds=round(time.time() - started, 1),
        load_average_at_start=load_at_start,
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    )
    table = write_report(rows, meta, out)
    print(table)


if __name__ == "__main__":
    from ..errors import exit_on_user_error

    sys.exit(exit_on_user_error(main))
