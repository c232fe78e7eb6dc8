"""The fairseq runs of the small CPU trainings (demo and CPU studies): ``fairseq-train`` of a small
``residual_transformer`` on CPU, and its test set decoded with ``fairseq-generate`` and scored with sacrebleu;
``fairseq-train`` of a small ``residual_transformer_lm`` and its test perplexity from ``fairseq-eval-lm``.
"""

import os
import re
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .runner import PLUGIN_DIR, RunError, fairseq_command, run_logged
from .training_log import read_log

#: one torch thread unless OMP_NUM_THREADS says otherwise (on a shared 2-core machine torch's default of a thread
#: per core spin-waits against the other jobs: an E12D12 update measured 13x slower with 2 threads); no warnings
RUN_ENV = {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


def _optimisation(lr: float, warmup: int, warmup_init_lr: float) -> List[object]:
    """Adam and inverse_sqrt: the optimiser options of every small CPU training."""
    return [
        *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", lr),
        *("--lr-scheduler", "inverse_sqrt", "--warmup-updates", warmup, "--warmup-init-lr", warmup_init_lr),
    ]


def _run_control(
    save_dir: Path, *, max_tokens: int, max_update: int, validate_every: int, seed: int, log_interval: int = 50
) -> List[object]:
    """Batch size, length, checkpoints (the last one and the best), CPU, JSON logs to ``save_dir/train.log`` and
    TensorBoard curves to ``save_dir/tensorboard``."""
    return [
        *("--max-tokens", max_tokens, "--max-update", max_update),
        *("--validate-interval-updates", validate_every, "--save-interval-updates", validate_every),
        *("--keep-interval-updates", "1", "--no-epoch-checkpoints", "--seed", seed),
        *("--cpu", "--num-workers", "0", "--log-format", "json", "--log-interval", log_interval),
        *("--save-dir", save_dir, "--log-file", save_dir / "train.log"),
        *("--tensorboard-logdir", save_dir / "tensorboard"),
    ]


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
    model_options: Sequence[object] = (),
) -> List[str]:
    """fairseq-train of an E{layers}D{layers} model of width ``dim`` (FFN 4 x dim, 4 heads), with ``model_options``
    (``--residual-output-scale 0.5``); ``warmup_init_lr`` = ``lr`` keeps inverse_sqrt's schedule but starts at the
    peak (no warmup). It logs JSON records to ``save_dir/train.log`` and curves for TensorBoard to
    ``save_dir/tensorboard``."""
    return fairseq_command(
        "train",
        databin,
        *("--user-dir", PLUGIN_DIR, "--arch", "residual_transformer_iwslt_de_en", "--residual-scheme", scheme),
        *model_options,
        *("--encoder-layers", layers, "--decoder-layers", layers),
        *("--encoder-embed-dim", dim, "--decoder-embed-dim", dim),
        *("--encoder-ffn-embed-dim", 4 * dim, "--decoder-ffn-embed-dim", 4 * dim),
        *("--share-all-embeddings", "--dropout", "0.1"),
        *_optimisation(lr, warmup, warmup_init_lr),
        *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1"),
        *_run_control(
            Path(save_dir),
            max_tokens=max_tokens,
            max_update=max_update,
            validate_every=validate_every,
            seed=seed,
            log_interval=log_interval,
        ),
    )


#: how the LM trainings and their evaluation cut the token stream: blocks of this many tokens, across lines
LM_BLOCKS = ("--sample-break-mode", "none", "--tokens-per-sample", "128")


def lm_train_command(
    databin,
    save_dir,
    *,
    scheme: str,
    layers: int,
    dim: int,
    lr: float,
    warmup: int,
    model_options: Sequence[object] = (),
    **control,
) -> List[str]:
    """fairseq-train of a ``residual_transformer_lm`` of ``layers`` layers, width ``dim`` (FFN 4 x dim, 4 heads),
    input and output embeddings shared, on ``LM_BLOCKS``; plain cross-entropy (base 2 in the logs). ``control``:
    ``max_tokens``, ``max_update``, ``validate_every``, ``seed``, ``log_interval``, and ``model_options``, as for
    ``train_command``."""
    return fairseq_command(
        "train",
        databin,
        *("--task", "language_modeling", *LM_BLOCKS),
        *("--user-dir", PLUGIN_DIR, "--arch", "residual_transformer_lm", "--residual-scheme", scheme),
        *model_options,
        *("--decoder-layers", layers, "--decoder-attention-heads", 4),
        *("--decoder-embed-dim", dim, "--decoder-input-dim", dim, "--decoder-output-dim", dim),
        *("--decoder-ffn-embed-dim", 4 * dim, "--share-decoder-input-output-embed", "--dropout", "0.1"),
        *_optimisation(lr, warmup, 1e-7),
        *("--criterion", "cross_entropy"),
        *_run_control(Path(save_dir), **control),
    )


def eval_lm_command(databin, save_dir: Path, subset: str = "test") -> List[str]:
    """fairseq-eval-lm of ``save_dir``'s last checkpoint on ``subset``, cut as in training (``LM_BLOCKS``)."""
    return fairseq_command(
        "eval_lm",
        databin,
        *("--user-dir", PLUGIN_DIR, "--path", Path(save_dir) / "checkpoint_last.pt", "--gen-subset", subset),
        *LM_BLOCKS,
        *("--max-tokens", "4096", "--cpu", "--num-workers", "0"),
    )


#: fairseq-eval-lm's result line
EVAL_LM_RESULT = re.compile(r"Loss \(base 2\): ([0-9.]+|nan|inf), Perplexity: ([0-9.]+|nan|inf)")


def score_lm_test_set(databin, save_dir: Path, label: str) -> Dict:
    """Evaluate ``save_dir``'s last checkpoint on the test split with fairseq-eval-lm: the result fields
    ``test_loss`` (base 2, per token), ``test_ppl`` and ``eval_command``; failure raises RunError."""
    save_dir = Path(save_dir)
    cmd = eval_lm_command(databin, save_dir)
    out = save_dir / "eval-lm.out"
    if out.exists():
        out.unlink()  # one evaluation's output, not appended attempts
    run_logged(cmd, out, env=RUN_ENV, label=f"{label}: fairseq-eval-lm")
    found = EVAL_LM_RESULT.findall(out.read_text(encoding="utf-8"))
    if not found:
        raise RunError(f"{label}: fairseq-eval-lm", 0, "printed no perplexity", out)
    loss, ppl = found[-1]
    return dict(test_loss=float(loss), test_ppl=float(ppl), eval_command=" ".join(map(str, cmd[2:])))


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
    score and signature against ``references``: the test set's untouched text, one line per sample id (the synthetic
    corpus is not lowercased: scored cased)."""
    from .repro.scoring import detokenize, original_references, parse_generate, reference_sacrebleu

    output = (Path(save_dir) / "generate-test" / "generate-test.txt").read_text(encoding="utf-8")
    gen = parse_generate(output)
    hypotheses = detokenize(gen.hypotheses, "en")
    bleu, signature = reference_sacrebleu(hypotheses, original_references(gen, references), lowercase=False)
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
