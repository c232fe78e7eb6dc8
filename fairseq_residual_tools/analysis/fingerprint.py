"""What a model computes, in one short string: the studies' stand-in for "the code that made this run".

A study's run is reused only when it is the same run, and the code is part of that. Hashing the plugin's files
would retrain every finished run (hours each) after any change, a new scheme beside it included; the fingerprint
instead runs the freshly initialised model of the run's own ``fairseq-train`` arguments once, on a fixed batch, and
keeps its mean log-probability, gradient norm and parameter sum to ``DIGITS`` significant digits. It changes when
the code changes what the model computes or how it starts, and not when code elsewhere changes. The model runs in
float64: float32 sums differ between CPUs (a run committed on one machine would otherwise be retrained on another
once in a while, where a last digit rounds the other way); float64's differences lie ten digits below ``DIGITS``.
"""

import logging
from typing import Sequence

DIGITS = 6


def model_fingerprint(train_args: Sequence[str]) -> str:
    """The fingerprint of the model ``fairseq-train train_args`` would build (a translation model or a language
    model), seeded with its ``--seed``."""
    import torch
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models import FairseqEncoderDecoderModel

    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), list(train_args)))
    # quiet the task's dictionary lines, and only here: a training forked later logs through the same loggers
    fairseq_logger = logging.getLogger("fairseq")
    level = fairseq_logger.level
    fairseq_logger.setLevel(logging.WARNING)
    try:
        task = tasks.setup_task(cfg.task)
    finally:
        fairseq_logger.setLevel(level)
    torch.manual_seed(cfg.common.seed)
    model = task.build_model(cfg.model).double().eval()
    batch = torch.Generator().manual_seed(0)
    vocab = len(task.source_dictionary)
    source = torch.randint(4, vocab, (2, 9), generator=batch)
    previous = torch.randint(4, vocab, (2, 7), generator=batch)
    if isinstance(model, FairseqEncoderDecoderModel):
        logits = model(source, torch.tensor([9, 9]), previous)[0]
    else:
        logits = model(source)[0]
    log_prob = torch.log_softmax(logits, dim=-1).mean()
    log_prob.backward()
    params = [p for p in model.parameters() if p.requires_grad]
    grad_norm = torch.sqrt(sum((p.grad**2).sum() for p in params if p.grad is not None))
    param_sum = sum(p.detach().abs().sum() for p in params)
    return " ".join(f"{v.detach().item():.{DIGITS}g}" for v in (log_prob, grad_norm, param_sum))
