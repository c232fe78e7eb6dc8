"""GPU-hour estimates per cell: arithmetic on the config, with every assumption named.

These are estimates, not measurements (no GPU run of a paper cell was made
here). Training compute is the usual 6 x parameters x tokens rule for the
matrix products (forward 2, backward 4 FLOPs per weight and token; attention
scores add under 2% at these sentence lengths and are left out):

* per source token, the encoder layers: 4d^2 (attention) + 2 d f (FFN) weights each;
* per target token, the decoder layers: 8d^2 (self + cross attention) + 2 d f each,
  plus the output projection d x V;
* tokens per update: the batch the launch actually uses (GPUs x max_tokens x
  update_freq; the paper's effective batch unless ``--max-tokens``/``--update-freq``
  choose another); ``max_tokens`` counts padded tokens of the longer side, so this is
  an upper bound for each side;
* updates: ``max_update`` of the config; IWSLT-14 trains until 20 epochs without
  a better validation BLEU, assumed here to end after ``IWSLT_UPDATES``.

Time = FLOPs / an assumed sustained throughput of one A100-class GPU:
``FP32_FLOPS`` for fp32 (IWSLT-14; PyTorch does not use TF32 for matrix products
by default) and ``HALF_FLOPS`` for AMP / fp16, times ``VALIDATION_OVERHEAD``
for validation (BLEU with beam search every epoch on IWSLT-14).
"""

from dataclasses import dataclass

from .cells import Cell

#: assumed vocabulary sizes (joint BPE merges / SentencePiece pieces of data-prep/)
VOCAB = {"iwslt14": 10_000, "wmt14": 40_000, "opus100": 64_000}
IWSLT_UPDATES = 80_000  # about 70 epochs of 160k pairs at 4096 tokens: an assumption
FP32_FLOPS = 6e12  # about 30% of an A100's 19.5 TFLOP/s fp32 peak
HALF_FLOPS = 60e12  # about 20% of an A100's 312 TFLOP/s fp16 tensor-core peak
VALIDATION_OVERHEAD = {"iwslt14": 1.5, "wmt14": 1.1, "opus100": 1.1}


@dataclass(frozen=True)
class Estimate:
    updates: int
    tokens_per_update: int
    flops: float
    gpu_hours: float


def training_flops_per_token_pair(d: int, ffn: int, enc: int, dec: int, vocab: int) -> float:
    encoder = enc * (4 * d * d + 2 * d * ffn)
    decoder = dec * (8 * d * d + 2 * d * ffn) + d * vocab
    return 6.0 * (encoder + decoder)


def reference_tokens(cfg, reference_gpus: int = 1) -> int:
    """The paper's effective batch: the config's max_tokens x update_freq on ``reference_gpus`` GPUs."""
    return reference_gpus * int(cfg.dataset.max_tokens) * int(cfg.optimization.update_freq[0])


def estimate(cell: Cell, cfg, tokens: int) -> Estimate:
    """Estimate for ``cell`` from its composed config (``launch.compose``), at ``tokens`` per update."""
    m = cfg.model
    updates = int(cfg.optimization.max_update) or IWSLT_UPDATES
    per_token = training_flops_per_token_pair(
        int(m.encoder_embed_dim),
        int(m.encoder_ffn_embed_dim),
        cell.encoder_layers,
        cell.decoder_layers,
        VOCAB[cell.dataset],
    )
    flops = per_token * tokens * updates
    half = bool(cfg.common.amp or cfg.common.fp16 or cfg.common.memory_efficient_fp16)
    seconds = flops / (HALF_FLOPS if half else FP32_FLOPS) * VALIDATION_OVERHEAD[cell.dataset]
    return Estimate(updates, tokens, flops, round(seconds / 3600, 1))
