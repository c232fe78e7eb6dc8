"""The fairseq runs of the small CPU trainings (demo and CPU study): ``fairseq-train`` of a small
``residual_transformer`` on CPU, and its test set decoded with ``fairseq-generate`` and scored with sacrebleu.
"""

import os
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .runner import PLUGIN_DIR, RunError, fairseq_command, run_logged
from .training_log import read_log

#: one torch thread unless OMP_NUM_THREADS says otherwise (on a shared 2-core machine torch's default of a thread
#: per core spin-waits against the other jobs: an E12D12 update measured 13x slower with 2 threads); no warnings
RUN_ENV = {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def train_command(
    databin,
    save_dir,
    *,
    scheme: str,
    layers: int,
    dim: int,
    lr: float,
    warmup: int,
    max_tokens: int,
    max_update: int,
    validate_every: int,
    seed: int,
    log_interval: int = 50,
    warmup_init_lr: float = 1e-7,
) -> List[str]:
    """fairseq-train of an E{layers}D{layers} model of width ``dim`` (FFN 4 x dim, 4 heads); ``warmup_init_lr`` =
    ``lr`` keeps inverse_sqrt's schedule but starts at the peak (no warmup). It logs JSON records to
    ``save_dir/train.log`` and curves for TensorBoard to ``save_dir/tensorboard``."""
    save_dir = Path(save_dir)
    return fairseq_command(
        "train",
        databin,
        *("--user-dir", PLUGIN_DIR, "--arch", "residual_transformer_iwslt_de_en", "--residual-scheme", scheme),
        *("--encoder-layers", layers, "--decoder-layers", layers),
        *("--encoder-embed-dim", dim, "--decoder-embed-dim", dim),
        *("--encoder-ffn-embed-dim", 4 * dim, "--decoder-ffn-embed-dim", 4 * dim),
        *("--share-all-embeddings", "--dropout", "0.1"),
        *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", lr),
        *("--lr-scheduler", "inverse_sqrt", "--warmup-updates", warmup, "--warmup-init-lr", warmup_init_lr),
        *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
        *("--max-tokens", max_tokens, "--max-update", max_update),
        *("--validate-interval-updates", validate_every, "--save-interval-updates", validate_every),
        *("--keep-interval-updates", "1", "--no-epoch-checkpoints", "--seed", seed),
        *("--cpu", "--num-workers", "0", "--log-format", "json", "--log-interval", log_interval),
        *(
            "--save-dir",
            save_dir,
            "--log-file",
            save_dir / "train.log",
            "--tensorboard-logdir",
            save_dir / "tensorboard",
        ),
    )


def run_training(cmd: Sequence[str], out_file: Path, label: str, on_line: Optional[Callable[[str], None]] = None):
    """Run a ``train_command`` with one torch thread, output in ``out_file``. A NaN stop is a training outcome
    ("fails", read from the log); any other failure (e.g. a broken import) is no verdict: raised, retried next time."""
    try:
        run_logged(cmd, out_file, env=RUN_ENV, label=f"{label}: fairseq-train", on_line=on_line)
    except RunError:
        if not read_log(out_file).nan_error:
            raise


def generate_command(databin, save_dir: Path, *extra, cpu: bool = True) -> List[str]:
    """fairseq-generate of the test set with ``save_dir``'s last checkpoint, beam 5 (``extra``: more options), its
    output in ``save_dir/generate-test``."""
    save_dir = Path(save_dir)
    return fairseq_command(
        "generate",
        databin,
        *("--user-dir", PLUGIN_DIR, "--path", save_dir / "checkpoint_last.pt", "--gen-subset", "test"),
        *("--beam", "5", "--remove-bpe", "--max-tokens", "4000", *(["--cpu"] if cpu else [])),
        *("--results-path", save_dir / "generate-test"),
        *extra,
        # the paper's validation decoding limit (max length 1.2 x source + 10); it also keeps a
        # diverged model from spending minutes on 200-token outputs
        *("--max-len-a", "1.2", "--max-len-b", "10"),
    )


def score_generated(save_dir: Path, references: List[str]) -> Tuple[List[str], float, str]:
    """The Moses-detokenised hypotheses of a ``generate_command``'s output, in test-set order, and their sacrebleu
    score and signature against ``references``."""
    from .repro.scoring import detokenize, parse_generate, sacrebleu_score  # fairseq: loaded only to score

    output = (Path(save_dir) / "generate-test" / "generate-test.txt").read_text(encoding="utf-8")
    hypotheses = detokenize(parse_generate(output).hypotheses, "en")
    bleu, signature = sacrebleu_score(hypotheses, references)
    return hypotheses, bleu, signature


def score_test_set(databin, save_dir: Path, references: List[str], label: str, *extra) -> Tuple[List[str], Dict]:
    """Decode the test set on the CPU with ``save_dir``'s last checkpoint (``extra``: more options) and score it with
    sacrebleu: the hypotheses and the result fields ``bleu``, ``bleu_signature``, ``generate_command``; failure
    raises RunError."""
    save_dir = Path(save_dir)
    cmd = generate_command(databin, save_dir, *extra)
    run_logged(cmd, save_dir / "generate.out", env=RUN_ENV, label=f"{label}: fairseq-generate")
    hypotheses, bleu, signature = score_generated(save_dir, references)
    return hypotheses, dict(bleu=bleu, bleu_signature=signature, generate_command=" ".join(map(str, cmd[2:])))
