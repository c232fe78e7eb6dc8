"""bfloat16 training of every scheme without a GPU.

fairseq's command line refuses it: ``--bf16`` (and ``--memory-efficient-bf16``, which implies it) also
sets ``--tpu`` ("use bfloat16; implies --tpu", fairseq/options.py), so ``fairseq-train --cpu --bf16``
stops in the Trainer with ``AttributeError: 'NoneType' object has no attribute 'xla_device'``
(torch_xla is not installed). What does work, and is tested here, is the rest of fairseq's bf16 path:
its ``Trainer`` with the same configuration and ``tpu`` off (the model and batches cast to bfloat16,
``FP16Optimizer`` / ``MemoryEfficientFP16Optimizer`` keeping fp32 master weights or not), in this
process, so one configuration serves every scheme.
"""

import copy
import math

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.trainer import Trainer
from helpers import TINY_MODEL

from fairseq_residual.schemes import SCHEMES

UPDATES = 2


def training_config(databin, precision_flag):
    argv = [str(databin), "--arch", "residual_transformer_iwslt_de_en", *TINY_MODEL, "--share-all-embeddings"]
    argv += ["--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0"]
    argv += ["--optimizer", "adam", "--lr", "1e-3", "--criterion", "label_smoothed_cross_entropy"]
    argv += ["--max-tokens", "256", "--cpu", "--seed", "1", precision_flag]
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))


def test_fairseq_cli_takes_bf16_on_cpu_for_a_tpu(demo_databin):
    cfg = training_config(demo_databin.databin, "--bf16")
    assert cfg.common.bf16 and cfg.common.cpu and cfg.common.tpu
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    with pytest.raises(AttributeError, match="xla_device"):
        Trainer(cfg, task, model, task.build_criterion(cfg.criterion))


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--bf16", "--memory-efficient-bf16"])
def test_every_scheme_trains_in_bfloat16_on_cpu(demo_databin, flag, one_torch_thread):
    cfg = training_config(demo_databin.databin, flag)
    cfg.common.tpu = False  # what --bf16 would run if fairseq did not take it to mean a TPU
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    for scheme in SCHEMES:
        scheme_cfg = copy.deepcopy(cfg)
        scheme_cfg.model.residual_scheme = scheme
        torch.manual_seed(1)
        model = task.build_model(scheme_cfg.model)
        criterion = task.build_criterion(scheme_cfg.criterion)
        trainer = Trainer(scheme_cfg, task, model, criterion)
        batches = trainer.get_train_iterator(epoch=1, load_dataset=False).next_epoch_itr(shuffle=False)
        samples = [next(batches) for _ in range(UPDATES)]
        # the first batch's loss (bits per token, as fairseq logs it) with the same weights in float32
        model.float()
        with torch.no_grad():
            loss, sample_size, _ = criterion(model, samples[0])
        fp32_loss = loss.item() / sample_size / math.log(2)
        model.bfloat16()
        before = [p.detach().clone() for p in model.parameters()]
        losses = [trainer.train_step([s])["loss"] for s in samples]
        assert all(p.dtype == torch.bfloat16 for p in model.parameters()), scheme
        assert all(math.isfinite(x) for x in losses), (scheme, losses)
        assert losses[0] == pytest.approx(fp32_loss, rel=0.02), (scheme, losses[0], fp32_loss)
        assert trainer.get_num_updates() == UPDATES
        changed = sum(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
        assert changed > len(before) // 2, (scheme, changed, len(before))
