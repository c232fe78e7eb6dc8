"""bfloat16 training of every scheme without a GPU.

fairseq's command line takes ``--bf16`` (and ``--memory-efficient-bf16``, which implies it) to mean a TPU
("use bfloat16; implies --tpu", fairseq/options.py); its Trainer given that configuration stops with
``AttributeError: 'NoneType' object has no attribute 'xla_device'`` where torch_xla is not installed. The plugin
turns ``tpu`` off again before ``fairseq-train`` starts (``fairseq_residual/bf16_without_tpu.py``); fairseq's bf16
path then trains: the model and batches cast to bfloat16, ``FP16Optimizer`` / ``MemoryEfficientFP16Optimizer``
keeping fp32 master weights or not. Every scheme runs through the ``Trainer`` in this process (one configuration
serves them all); ``fairseq-train --cpu --bf16`` itself and a generation from its checkpoint at the end.
"""

import copy
import math
import re

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.trainer import Trainer
from helpers import TINY_MODEL, generate_args, run_cli, train_args

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


@pytest.mark.parametrize("flag", ["--bf16", "--memory-efficient-bf16"])
def test_fairseq_train_bf16_without_a_tpu_trains_in_bfloat16_and_its_checkpoint_translates(
    demo_databin, tmp_path, flag
):
    save = tmp_path / "ckpt"
    proc = run_cli([*train_args(demo_databin.databin, save, 4), flag], cwd=tmp_path)
    log = proc.stdout + proc.stderr
    assert "bfloat16 on cpu: --bf16 without a TPU (torch_xla is not installed)" in log
    losses = [float(x) for x in re.findall(r'"train_loss": "([\d.]+)"', log)]
    assert losses and all(math.isfinite(x) for x in losses)
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 4
    weights = [t for t in state["model"].values() if t.is_floating_point() and t.numel() > 1]
    # saved in float32 as every fairseq checkpoint (utils.move_to_cpu), holding the values of a bfloat16 model
    assert weights and all(t.dtype == torch.float32 for t in weights)
    assert all(torch.equal(t, t.bfloat16().float()) for t in weights)
    assert not all(torch.equal(t, t.half().float()) for t in weights)
    moments = [t for s in state["last_optimizer_state"]["state"].values() for t in s.values() if torch.is_tensor(t)]
    assert moments and all(t.dtype == torch.float32 for t in moments if t.dim())  # Adam's moments stay float32
    # an eager float32 generation reads the bfloat16 checkpoint
    out = run_cli(generate_args(demo_databin.databin, save / "checkpoint_last.pt"), cwd=tmp_path).stdout
    assert len(re.findall(r"^H-\d+\t", out, flags=re.M)) == 40  # the demo's test split
