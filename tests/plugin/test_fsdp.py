"""FSDP (``--ddp-backend fully_sharded``, fairscale's FullyShardedDataParallel) around every scheme, on CPU.

fairseq wraps the whole model in FSDP and, with ``--checkpoint-activations`` (or a
``--min-params-to-wrap`` below a layer's size), each layer on its own: FSDP flattens a wrapped
module's parameters into one tensor, keeps this worker's shard of it, gathers it for the module's
forward and backward, and reduces the gradients. All of that is torch.distributed code, which runs
on CPU over gloo. What does not run on CPU with fairscale 0.4.13 (pinned below):

* ``fairseq-train --cpu --ddp-backend fully_sharded`` stops while wrapping the model: with one worker
  fairseq starts no process group, and fairscale asks for one (RuntimeError "torch.distributed is not
  yet initialized but process group is requested");
* with a gloo process group, fairseq gives FSDP no compute device and fairscale's default is CUDA
  (AssertionError "Torch not compiled with CUDA enabled");
* with CPU as the compute device, FSDP orders its work on CUDA streams, which it creates only when
  CUDA is available but uses in every forward and backward (KeyError 'all_gather').

``cpu_streams`` replaces just those stream calls by no-ops (CPU kernels run in program order: there
is nothing to synchronise) and makes CPU the compute device; the rest is fairscale's and fairseq's
code. With it, for every scheme: one worker trains, with the loss and the first update of the
unwrapped model, and the full state dict keeps every name and value (slow: two workers, sharded,
give the unwrapped model's update on the averaged gradient). Not tested here: fairseq's trainer and
checkpoint files under FSDP (fairseq-train stops first, above), CUDA streams, ``--fp16``.
"""

import sys

import pytest
import torch
import torch.distributed as dist
from fairseq.dataclass.configs import DistributedTrainingConfig
from fairseq.distributed import fsdp_enable_wrap, fsdp_wrap
from helpers import (
    TinyTask,
    build_model,
    cpu_stream_patches,
    fairscale_fsdp,
    gloo_world_of_one_in,
    loss_of,
    random_batch,
    run_cli,
    train_args,
)

from fairseq_residual.errors import ConfigError
from fairseq_residual.schemes import SCHEMES
from fairseq_residual.schemes.base import stack_layers

pytest.importorskip("fairscale.nn.data_parallel.fully_sharded_data_parallel")

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: fairseq wraps the model (layers below --min-params-to-wrap stay in it), or each layer too
#: (--checkpoint-activations makes fairseq wrap every layer)
WRAPPINGS = {"model": {}, "each-layer": {"checkpoint_activations": True}}


@pytest.fixture
def cpu_streams(monkeypatch):
    for target, name, value in cpu_stream_patches():
        monkeypatch.setattr(target, name, value)


@pytest.fixture(scope="module")
def gloo_world_of_one(tmp_path_factory):
    with gloo_world_of_one_in(tmp_path_factory.mktemp("gloo")):
        yield


def test_the_process_group_leaves_the_test_process_as_it_found_it(tmp_path):
    hook = sys.excepthook
    with gloo_world_of_one_in(tmp_path):
        assert dist.is_initialized() and sys.excepthook is not hook  # torch's prefixing hook
    assert not dist.is_initialized() and sys.excepthook is hook


def fsdp_config(world_size):
    """What fairseq-train passes to fsdp_enable_wrap for ``--ddp-backend fully_sharded`` in fp32."""
    return DistributedTrainingConfig(
        ddp_backend="fully_sharded", distributed_world_size=world_size, fp16=False, memory_efficient_fp16=False
    )


def build_pair(task, scheme, world_size=1, seed=0, **options):
    """The same model (same seed) unwrapped and wrapped as fairseq_cli/train.py wraps it, both in training mode."""
    torch.manual_seed(seed)
    plain = build_model(task, scheme=scheme, layers=2, dropout=0.1, attention_dropout=0.1, **options).train()
    torch.manual_seed(seed)
    with fsdp_enable_wrap(fsdp_config(world_size)):
        model = build_model(task, scheme=scheme, layers=2, dropout=0.1, attention_dropout=0.1, **options)
        wrapped = fsdp_wrap(model.train())
    return plain, wrapped


def sgd_update(model, batch, lr=0.5):
    """One plain SGD step, so that the parameters after it are those before minus lr times the gradient."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_of(model, batch)
    loss.backward()
    optimizer.step()
    return loss.detach()


def float_state(model):
    return {name: value.clone() for name, value in model.state_dict().items() if value.is_floating_point()}


def assert_same_state(got, expected):
    assert got.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.skipif(torch.cuda.is_available(), reason="pins what fails without CUDA")
@pytest.mark.usefixtures("gloo_world_of_one")
def test_fairscale_fsdp_needs_cuda_streams_that_cpu_streams_stands_in_for(monkeypatch):
    task = TinyTask()
    with pytest.raises(AssertionError, match="Torch not compiled with CUDA enabled"):
        build_pair(task, "residual")  # fairseq gives FSDP no compute_device: fairscale's default is CUDA
    monkeypatch.setattr(fairscale_fsdp(), "_get_default_cuda_device", lambda module: torch.device("cpu"))
    _, wrapped = build_pair(task, "residual")
    with pytest.raises(KeyError, match="all_gather"):
        loss_of(wrapped, random_batch(task))


@pytest.mark.parametrize("wrapping", list(WRAPPINGS))
@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.usefixtures("gloo_world_of_one", "cpu_streams")
def test_one_worker_gives_the_loss_and_the_update_of_the_unwrapped_model(scheme, wrapping):
    task = TinyTask()
    batch = random_batch(task)
    plain, wrapped = build_pair(task, scheme, **WRAPPINGS[wrapping])
    wrappers = [type(layer).__name__ for layer in wrapped.module.encoder.layers]
    assert wrappers.count("FullyShardedDataParallel") == (2 if wrapping == "each-layer" else 0)
    assert [type(layer) for layer in stack_layers(wrapped.module.encoder)] == [SCHEMES[scheme].encoder_layer_cls] * 2
    assert_same_state(float_state(wrapped), float_state(plain))
    expected_loss, got_loss = sgd_update(plain, batch), sgd_update(wrapped, batch)
    torch.testing.assert_close(got_loss, expected_loss, rtol=1e-6, atol=0)
    assert_same_state(float_state(wrapped), float_state(plain))


@pytest.mark.parametrize("wrapping", list(WRAPPINGS))
@pytest.mark.usefixtures("gloo_world_of_one", "cpu_streams")
def test_one_worker_gives_the_loss_and_the_update_of_the_unwrapped_model_with_block_attention_residuals(wrapping):
    # the registry-wide tests build attn-res at its default, Full; here two blocks of one layer each
    task = TinyTask()
    batch = random_batch(task)
    plain, wrapped = build_pair(task, "attn-res", attn_res_blocks=2, **WRAPPINGS[wrapping])
    expected_loss, got_loss = sgd_update(plain, batch), sgd_update(wrapped, batch)
    torch.testing.assert_close(got_loss, expected_loss, rtol=1e-6, atol=0)
    assert_same_state(float_state(wrapped), float_state(plain))


@pytest.mark.parametrize("wrapping", list(WRAPPINGS))
@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.usefixtures("gloo_world_of_one", "cpu_streams")
def test_one_worker_trains_every_parameter_with_adam(scheme, wrapping):
    task = TinyTask()
    batch = random_batch(task)
    plain, wrapped = build_pair(task, scheme, **WRAPPINGS[wrapping])
    loss_of(plain, batch).backward()
    # DLCL's W entries that no layer reads get no gradient in either model
    learned = {name for name, p in plain.named_parameters() if p.grad is not None and p.grad.any()}
    before = float_state(wrapped)
    optimizer = torch.optim.Adam(wrapped.parameters(), lr=1e-3)
    losses = []
    for step in range(3):
        optimizer.zero_grad()
        loss = loss_of(wrapped, batch, seed=step)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    after = float_state(wrapped)
    assert all(torch.isfinite(torch.tensor(losses))), losses
    changed = {name for name in after if not torch.equal(after[name], before[name])}
    assert learned and learned <= changed, sorted(learned - changed)


@pytest.mark.parametrize("wrapping", list(WRAPPINGS))
@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.usefixtures("gloo_world_of_one", "cpu_streams")
def test_the_full_state_dict_keeps_every_name_and_value_through_save_and_load(scheme, wrapping, tmp_path):
    task = TinyTask()
    batch = random_batch(task)
    plain, wrapped = build_pair(task, scheme, **WRAPPINGS[wrapping])
    sgd_update(plain, batch)
    sgd_update(wrapped, batch)  # Admin's omega is profiled in this first training forward
    expected = plain.state_dict()
    torch.save(wrapped.state_dict(), tmp_path / "checkpoint.pt")
    saved = torch.load(tmp_path / "checkpoint.pt")
    assert saved.keys() == expected.keys()  # residual_scheme_tag, Admin's omega0 and admin_profiled included
    for name in expected:
        torch.testing.assert_close(saved[name], expected[name], rtol=1e-5, atol=1e-7, msg=name)
    # into an unwrapped model (the plugin's scheme check runs) and into a freshly wrapped one
    fresh_plain, fresh_wrapped = build_pair(task, scheme, seed=1, **WRAPPINGS[wrapping])
    fresh_plain.load_state_dict(saved)
    fresh_wrapped.load_state_dict(saved)
    for model in (wrapped, fresh_plain, fresh_wrapped):
        model.eval()
    with torch.no_grad():
        outputs = [loss_of(model, batch) for model in (wrapped, fresh_plain, fresh_wrapped)]
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-6, atol=0)
    torch.testing.assert_close(outputs[2], outputs[0], rtol=0, atol=0)


def two_workers(rank, init_file, results):
    """One of two gloo workers: every scheme, wrapped as with --checkpoint-activations (DLCL: the model only),
    one SGD step on this worker's batch; the unwrapped model steps on the gradient averaged over both."""
    for target, name, value in cpu_stream_patches():
        setattr(target, name, value)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    torch.set_num_threads(1)
    task = TinyTask()
    batch = random_batch(task, seed=rank)
    outcome = {}
    for scheme in SCHEMES:
        if scheme == "dlcl":
            with pytest.raises(ConfigError, match="--residual-scheme dlcl cannot be trained with FSDP wrapping each"):
                build_pair(task, scheme, world_size=2, checkpoint_activations=True)
            plain, wrapped = build_pair(task, scheme, world_size=2)
        else:
            plain, wrapped = build_pair(task, scheme, world_size=2, checkpoint_activations=True)
        sharded = [p.numel() for p in wrapped.parameters()]
        got_loss = sgd_update(wrapped, batch)
        optimizer = torch.optim.SGD(plain.parameters(), lr=0.5)
        expected_loss = loss_of(plain, batch)
        expected_loss.backward()
        for p in plain.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad.div_(2)
        optimizer.step()
        state = float_state(wrapped)  # the full state dict on rank 0, empty on rank 1
        outcome[scheme] = dict(
            sharded=sum(sharded),
            total=sum(p.numel() for p in plain.parameters()),
            losses=(float(got_loss), float(expected_loss.detach())),
            got=state,
            expected=float_state(plain),
        )
    torch.save(outcome, results / f"rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_workers_shard_the_parameters_and_give_the_update_of_the_averaged_gradient(tmp_path, monkeypatch):
    # fairscale's switch to the list-based collectives, which gloo has (its *_base ones reject these shapes)
    monkeypatch.setenv("ENABLE_NCCL_BASE_COLLECTIVES", "0")
    torch.multiprocessing.spawn(two_workers, args=(tmp_path / "gloo-init", tmp_path), nprocs=2)
    ranks = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    for scheme in SCHEMES:
        first, second = ranks[0][scheme], ranks[1][scheme]
        assert first["sharded"] < first["total"] and second["sharded"] < second["total"], scheme
        for outcome in (first, second):
            got_loss, expected_loss = outcome["losses"]
            assert got_loss == pytest.approx(expected_loss, rel=1e-6), scheme
        assert second["got"] == {}
        assert_same_state(first["got"], first["expected"])


@pytest.mark.slow
def test_fairseq_train_on_cpu_stops_while_wrapping_the_model(demo_databin, tmp_path):
    """What ``fairseq-train --cpu --ddp-backend fully_sharded`` does with fairscale installed."""
    args = train_args(demo_databin.databin, tmp_path, max_update=2) + ["--ddp-backend", "fully_sharded"]
    proc = run_cli(args, cwd=tmp_path, check=False, fresh=True)  # not a child of the process that ran the gloo workers
    assert proc.returncode != 0
    assert "torch.distributed is not yet initialized but process group is requested" in proc.stderr
    assert "fsdp_wrap" in proc.stderr
