"""``--bf16`` on a GPU or the CPU: fairseq's own bfloat16 training, without the TPU it implies.

fairseq's command line sets ``--tpu`` whenever ``--bf16`` (or ``--memory-efficient-bf16``) is given
("use bfloat16; implies --tpu", fairseq/options.py), and its Trainer then asks torch_xla for a device:
``AttributeError: 'NoneType' object has no attribute 'xla_device'`` on every machine without one. Where torch_xla
is not installed there is no TPU to mean, so ``distributed_utils.call_main`` (the entry of ``fairseq-train`` and
``fairseq-hydra-train``) turns ``common.tpu`` off again, with one line saying so. What trains is what fairseq's
``--bf16`` has always been: the model and batches in bfloat16, ``FP16Optimizer`` keeping float32 master weights
and Adam's moments (``--memory-efficient-bf16``: no master copy), no loss scaling. With torch_xla installed
nothing changes.
"""

import importlib.util
import logging

import torch
from fairseq.distributed import utils as distributed_utils

logger = logging.getLogger("fairseq_residual.bf16")


def without_tpu(call_main):
    def call_main_on_this_device(cfg, main, **kwargs):
        common = cfg.common
        if common.bf16 and common.tpu and importlib.util.find_spec("torch_xla") is None:
            common.tpu = False
            device = "cpu" if common.cpu or not torch.cuda.is_available() else "cuda"
            logger.info("bfloat16 on %s: --bf16 without a TPU (torch_xla is not installed)", device)
        return call_main(cfg, main, **kwargs)

    call_main_on_this_device.fairseq_residual = True  # type: ignore[attr-defined]  # the mark of what the plugin replaced (patches.PATCHES)
    return call_main_on_this_device


def apply() -> None:
    if not getattr(distributed_utils.call_main, "fairseq_residual", False):
        distributed_utils.call_main = without_tpu(distributed_utils.call_main)
