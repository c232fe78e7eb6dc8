"""GPU-hour estimates per cell: arithmetic on the config, with every assumption named (docs/reproduce.md).

Estimates, not measurements. Training compute is 6 x weights x tokens (forward 2, backward 4 FLOPs per
weight and token; attention scores add under 2% at these lengths and are left out), with per source
token 4d^2 + 2 d f weights in each encoder layer, per target token 8d^2 + 2 d f in each decoder layer
plus the output projection d x V. Tokens per update are the launch's batch (an upper bound: max_tokens
counts padding); updates are the config's ``max_update`` (``IWSLT_UPDATES`` for IWSLT-14, which stops
early). Time = FLOPs / the assumed sustained throughput of one A100-class GPU (``FP32_FLOPS`` for fp32,
``HALF_FLOPS`` with AMP / fp16), times ``VALIDATION_OVERHEAD``.
"""

from .cells import Cell

#: assumed vocabulary sizes (joint BPE merges / SentencePiece pieces of data-prep/)
VOCAB = {"iwslt14": 10_000, "wmt14": 40_000, "opus100": 64_000}
IWSLT_UPDATES = 80_000  # about 70 epochs of 160k pairs at 4096 tokens: an assumption
FP32_FLOPS = 6e12  # about 30% of an A100's 19.5 TFLOP/s fp32 peak
HALF_FLOPS = 60e12  # about 20% of an A100's 312 TFLOP/s fp16 tensor-core peak
VALIDATION_OVERHEAD = {"iwslt14": 1.5, "wmt14": 1.1, "opus100": 1.1}


def gpu_hours(cell: Cell, cfg, tokens: int) -> float:
    """GPU-hours of ``cell`` from its composed config (``launch.compose``), at ``tokens`` per update."""
    d, ffn, vocab = int(cfg.model.encoder_embed_dim), int(cfg.model.encoder_ffn_embed_dim), VOCAB[cell.dataset]
    encoder = cell.encoder_layers * (4 * d * d + 2 * d * ffn)
    decoder = cell.decoder_layers * (8 * d * d + 2 * d * ffn) + d * vocab
    updates = int(cfg.optimization.max_update) or IWSLT_UPDATES
    flops = 6.0 * (encoder + decoder) * tokens * updates
    half = bool(cfg.common.amp or cfg.common.fp16 or cfg.common.memory_efficient_fp16)
    seconds = flops / (HALF_FLOPS if half else FP32_FLOPS) * VALIDATION_OVERHEAD[cell.dataset]
    return round(seconds / 3600, 1)
