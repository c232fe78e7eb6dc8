"""``--torch-compile``: fairseq's Trainer trains the compiled model to eager's losses, checkpoints keep an eager
run's layout, and a compiled run resumes eagerly and the reverse (fairseq_residual/compiled_training.py).

Dropout is 0 throughout: compiled code draws other dropout masks than eager code, and with them the losses would
agree in trend only. ``aot_eager`` is torch.compile's dynamo and autograd stages without inductor's code generation:
its graphs run the same aten operations as eager, so its losses are eager's to the last bit, and it compiles in
seconds, which keeps the command-line tests short. Inductor itself trains one model here: its fused kernels sum in
another order than eager's (LayerNorm, softmax, the loss), about 1e-7 relative per operation in float32, and over
three Adam updates at lr 1e-3 the losses stay within 1e-5 relative (measured: 2e-7), which is the tolerance.
"""

import json
import logging
import re

import pytest
import torch
from fairseq import options, tasks
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.trainer import Trainer
from helpers import TINY_MODEL, run_cli, train_args
from torch._dynamo.utils import counters

from fairseq_residual import compiled_training
from fairseq_residual.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NO_DROPOUT = ["--dropout", "0", "--attention-dropout", "0", "--activation-dropout", "0"]
#: one layer a side: every code path of the forward, at half the compile time of two
ONE_LAYER = ["--encoder-layers", "1", "--decoder-layers", "1"]


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    compiled_training._COMPILED.clear()
    yield
    torch._dynamo.reset()
    compiled_training._COMPILED.clear()


def training_config(databin, *extra):
    argv = [str(databin), "--arch", "residual_transformer_iwslt_de_en", *TINY_MODEL, "--share-all-embeddings"]
    argv += [*NO_DROPOUT, "--optimizer", "adam", "--lr", "1e-3", "--criterion", "label_smoothed_cross_entropy"]
    argv += ["--max-tokens", "256", "--cpu", "--seed", "1", *extra]
    return convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))


def trainer_losses(cfg, updates, same_batch=False):
    """The loss per token (nats) of each of ``updates`` Trainer updates from seed 1, unrounded, and the model."""
    task = tasks.setup_task(cfg.task)
    task.load_dataset("train")
    torch.manual_seed(1)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    losses = []
    train_step = task.train_step

    def recording(sample, *args, **kwargs):
        loss, sample_size, logging_output = train_step(sample, *args, **kwargs)
        losses.append(float(loss.detach()) / sample_size)
        return loss, sample_size, logging_output

    task.train_step = recording
    batches = trainer.get_train_iterator(epoch=1, load_dataset=False).next_epoch_itr(shuffle=False)
    first = next(batches)
    for _ in range(updates):
        trainer.train_step([first if same_batch else next(batches)])
    return losses, model


def test_compiled_trainer_gives_eager_losses_on_fairseqs_varying_batches(demo_databin):
    """ResiDual here (every scheme compiles to eager's loss and gradients: tests/plugin/test_compile.py)."""
    eager, _ = trainer_losses(training_config(demo_databin.databin, *ONE_LAYER), 3)
    cfg = training_config(demo_databin.databin, *ONE_LAYER, "--torch-compile")
    cfg.model.torch_compile_backend = "aot_eager"
    counters.clear()
    compiled, model = trainer_losses(cfg, 3)
    assert counters["stats"]["unique_graphs"] > 0  # it did compile
    assert compiled == eager, (compiled, eager)
    assert not any(name.startswith("_orig_mod") for name in model.state_dict())


def test_inductor_trains_to_eagers_losses_within_float32_reordering(demo_databin):
    """One layer each side and one batch three times: one compile (a new batch shape would compile again)."""
    eager, _ = trainer_losses(training_config(demo_databin.databin, *ONE_LAYER), 3, same_batch=True)
    counters.clear()
    cfg = training_config(demo_databin.databin, *ONE_LAYER, "--torch-compile")
    compiled, _ = trainer_losses(cfg, 3, same_batch=True)
    assert counters["stats"]["unique_graphs"] > 0
    assert compiled == pytest.approx(eager, rel=1e-5), (compiled, eager)
    assert compiled[0] > compiled[-1]  # it trained


def test_validation_and_generation_stay_eager(demo_databin):
    cfg = training_config(demo_databin.databin, "--torch-compile")
    cfg.model.torch_compile_backend = "aot_eager"
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model).eval()
    counters.clear()
    with torch.no_grad():
        model(torch.tensor([[5, 6, 2]]), torch.tensor([3]), torch.tensor([[2, 5, 6]]))
    assert counters["stats"]["unique_graphs"] == 0


def test_the_language_model_compiles_to_eagers_losses(tmp_path):
    from fairseq.models import ARCH_MODEL_REGISTRY
    from helpers import TinyTask

    task = TinyTask()
    losses = {}
    for backend in (None, "aot_eager"):
        parser = options.get_training_parser()
        argv = ["x", "--task", "language_modeling", "--arch", "residual_transformer_lm_gpt2_tiny", "--dropout", "0"]
        argv += ["--attention-dropout", "0", "--tokens-per-sample", "16"]
        argv += ["--torch-compile", "--torch-compile-backend", backend] if backend else []
        args = options.parse_args_and_arch(parser, argv)
        torch.manual_seed(1)
        model = ARCH_MODEL_REGISTRY["residual_transformer_lm"].build_model(args, task).train()
        tokens = torch.randint(4, len(task.target_dictionary), (3, 12), generator=torch.Generator().manual_seed(0))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        counters.clear()
        losses[backend] = []
        for _ in range(3):
            loss = model.get_normalized_probs(model(tokens), log_probs=True).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses[backend].append(float(loss))
        assert (counters["stats"]["unique_graphs"] > 0) == (backend is not None)
    assert losses["aot_eager"] == losses[None]


def test_on_the_cpu_it_declines_in_one_line_from_the_width_inductor_loses_at(demo_databin, caplog):
    width = str(compiled_training.CPU_DECLINE_WIDTH)
    wide = ["--encoder-embed-dim", width, "--decoder-embed-dim", width, "--torch-compile"]
    cfg = training_config(demo_databin.databin, *wide)
    counters.clear()
    compiled_training._DECLINED_SAID.clear()
    with caplog.at_level(logging.INFO, logger="fairseq_residual.compile"):
        compiled, _ = trainer_losses(cfg, 2)
    assert counters["stats"]["unique_graphs"] == 0
    lines = [r.getMessage() for r in caplog.records if r.name == "fairseq_residual.compile"]
    assert len(lines) == 1 and lines[0].startswith("--torch-compile declined: on the CPU inductor's compiled training")
    assert f"this model's width is {width}: training eagerly" in lines[0]
    eager, _ = trainer_losses(training_config(demo_databin.databin, *wide[:-1]), 2)
    assert compiled == eager


def test_without_a_cpp_compiler_the_first_step_names_the_fix(demo_databin, monkeypatch, tmp_path):
    from torch._inductor import config

    monkeypatch.setattr(config.cpp, "cxx", ("no-such-compiler++",))
    # fairseq's Trainer saves crash.pt into --save-dir before it re-raises: a folder of the test's, not ./checkpoints
    cfg = training_config(demo_databin.databin, "--torch-compile", "--save-dir", str(tmp_path))
    with pytest.raises(ConfigError, match=r"--torch-compile on the CPU needs a C\+\+ compiler .*\(apt install g\+\+\)"):
        trainer_losses(cfg, 1)
    assert (tmp_path / "crash.pt").exists()


def json_losses(log):
    """fairseq's JSON progress lines (--log-interval 1): the loss of each update."""
    records = map(json.loads, re.findall(r'^.*?(\{"epoch".*\})$', log, re.M))
    return {int(r["num_updates"]): r["loss"] for r in records if "loss" in r and "num_updates" in r}


@pytest.fixture(scope="module")
def eager_run(demo_databin, tmp_path_factory):
    """Eight eager updates without dropout: the losses every resumed run is compared with."""
    save = tmp_path_factory.mktemp("eager")
    proc = run_cli([*train_args(demo_databin.databin, save, 8), *ONE_LAYER, *NO_DROPOUT], cwd=save)
    return save, json_losses(proc.stdout + proc.stderr)


@pytest.mark.slow
@pytest.mark.parametrize("first, then", [("compiled", "eager"), ("eager", "compiled")])
def test_a_run_resumes_across_compiled_and_eager_with_the_uninterrupted_runs_losses(
    demo_databin, tmp_path, eager_run, first, then
):
    flags = {"compiled": ["--torch-compile", "--torch-compile-backend", "aot_eager"], "eager": []}
    save = tmp_path / "ckpt"
    log = ""
    for updates, mode in ((4, first), (8, then)):
        argv = [*train_args(demo_databin.databin, save, updates), *ONE_LAYER, *NO_DROPOUT, *flags[mode]]
        proc = run_cli(argv, cwd=tmp_path)
        log += proc.stdout + proc.stderr
    eager_save, eager_losses = eager_run
    assert json_losses(log) == eager_losses and len(eager_losses) == 8
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    eager_state = torch.load(eager_save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert list(state["model"]) == list(eager_state["model"])  # the same keys, in the same order
    assert state["cfg"]["model"]["torch_compile"] == (then == "compiled")


def test_hydra_configs_take_the_options_under_model():
    from fairseq_residual.config import to_transformer_config
    from fairseq_residual_tools.repro.launch import dataset_config

    overrides = ("model.torch_compile=true", "model.torch_compile_mode=max-autotune")
    assert compiled_training.options_of(to_transformer_config(dataset_config("iwslt14", overrides).model)) == {
        "torch_compile": True,
        "torch_compile_backend": "inductor",
        "torch_compile_mode": "max-autotune",
    }
    default = compiled_training.options_of(to_transformer_config(dataset_config("iwslt14").model))
    assert not default["torch_compile"]
