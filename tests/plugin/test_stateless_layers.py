"""A forward pass keeps its state in locals and arguments: no module changes during one, and one model
serves several threads at once with exactly the single-thread outputs.

On the layers of 7c223e8 (per-call values stored on the modules) ResiDual raised in about half of the
threaded calls, B2T and DLCL answered wrongly, and the attribute spy below saw ``block_input``,
``_x_dual``, the DLCL history and Admin's profile being assigned in every forward.
"""

import threading

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator
from helpers import TinyTask, baseline_model, build_model, loss_of, random_batch
from torch import nn

from fairseq_residual.schemes import SCHEMES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

THREADS = 4
SHAPES = [(3, 7, 6), (5, 4, 9), (2, 11, 3), (4, 6, 6)]  # (sentences, source length, target length)


def snapshot(model):
    """Every module's attributes: names, buffer values, and the identity or value of everything else
    that is not a parameter (parameters change only through the optimizer)."""
    state = {}
    for name, module in model.named_modules():
        for key, value in vars(module).items():
            if key == "_parameters":
                state[name, key] = tuple(value)
            elif key == "_buffers":
                state.update({(name, "buffer", b): t.clone() for b, t in value.items() if t is not None})
            elif isinstance(value, dict):
                state[name, key] = tuple(value)
            elif isinstance(value, (bool, int, float, str, type(None))):
                state[name, key] = value
            else:
                state[name, key] = id(value)
    return state


def changed(before, after):
    keys = before.keys() | after.keys()
    return sorted(
        str(k)
        for k in keys
        if k not in before
        or k not in after
        or (torch.is_tensor(before[k]) and not torch.equal(before[k], after[k]))
        or (not torch.is_tensor(before[k]) and before[k] != after[k])
    )


@pytest.fixture
def assignments(monkeypatch):
    """(module class, attribute) of every ``module.attr = ...`` while the test runs."""
    seen = []
    original = nn.Module.__setattr__

    def spy(self, name, value):
        seen.append((type(self).__name__, name))
        original(self, name, value)

    monkeypatch.setattr(nn.Module, "__setattr__", spy)
    return seen


def incremental_decode(model, src, src_lengths, prev):
    enc = model.encoder(src, src_lengths=src_lengths)
    state = {}
    return [model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0] for t in range(prev.size(1))]


@pytest.mark.parametrize("mode", ["train", "eval", "incremental"])
@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_no_module_attribute_is_assigned_during_a_forward_pass(scheme, mode, assignments):
    task = TinyTask()
    batch = random_batch(task)
    model = baseline_model(scheme, task, 2, 2, batch=batch)  # Admin: profiled on its first training batch
    model.train(mode == "train")
    before = snapshot(model)
    assignments.clear()
    for seed in range(2):
        if mode == "train":
            loss_of(model, random_batch(task, seed=seed)).backward()
        with torch.no_grad():
            if mode == "eval":
                model(*random_batch(task, seed=seed))
            elif mode == "incremental":
                incremental_decode(model, *random_batch(task, seed=seed))
    assert assignments == []
    assert changed(before, snapshot(model)) == []


def hooks(model):
    return sum(len(m._forward_pre_hooks) + len(m._forward_hooks) + len(m._state_dict_hooks) for m in model.modules())


def test_admin_profiles_omega_once_on_the_first_training_batch_and_leaves_no_hook(assignments):
    task = TinyTask()
    torch.manual_seed(0)
    model = build_model(task, scheme="admin", layers=2).train()
    assert hooks(model) > 0  # waiting for the first training batch
    before = snapshot(model)
    assignments.clear()
    loss_of(model, random_batch(task)).backward()
    # the first training batch sets omega0 and the profiled flags, and the hooks are gone
    profiled = changed(before, snapshot(model))
    assert profiled and all("omega0" in k or "admin_profiled" in k or "hooks" in k for k in profiled), profiled
    assert hooks(model) == 0 and assignments == []
    after_first = snapshot(model)
    loss_of(model, random_batch(task, seed=1)).backward()
    assert changed(after_first, snapshot(model)) == []


def test_a_loaded_profiled_admin_model_never_profiles_again_and_has_no_hook():
    task = TinyTask()
    profiled = baseline_model("admin", task, 2, 2)
    torch.manual_seed(1)
    fresh = build_model(task, scheme="admin", layers=2)
    fresh.load_state_dict(profiled.state_dict())
    assert hooks(fresh) == 0
    fresh.train()
    before = snapshot(fresh)
    loss_of(fresh, random_batch(task)).backward()
    assert changed(before, snapshot(fresh)) == []


def run_threads(work, items):
    """``work(item)`` for every item, spread over THREADS threads started together; exceptions re-raised."""
    results, errors = {}, []
    barrier = threading.Barrier(THREADS)

    def run(chunk):
        barrier.wait()
        for key, item in chunk:
            try:
                results[key] = work(item)
            except Exception as e:  # noqa: BLE001  (collected, then re-raised below with the count)
                errors.append(repr(e))

    chunks = [list(enumerate(items))[i::THREADS] for i in range(THREADS)]
    threads = [threading.Thread(target=run, args=(chunk,)) for chunk in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [], f"{len(errors)} of {len(items)} calls raised: {errors[:3]}"
    return [results[i] for i in range(len(items))]


def shaped_batches(task, rounds):
    return [random_batch(task, *SHAPES[i % len(SHAPES)], seed=i) for i in range(rounds * len(SHAPES))]


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_one_model_shared_by_threads_gives_the_single_thread_outputs(scheme):
    task = TinyTask()
    model = baseline_model(scheme, task, 2, 2)
    batches = shaped_batches(task, rounds=10)

    def forward(batch):
        with torch.no_grad():
            return model(*batch)[0]

    alone = [forward(b) for b in batches]
    together = run_threads(forward, batches)
    assert all(torch.equal(a, b) for a, b in zip(alone, together))


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_one_beam_search_shared_by_threads_gives_the_single_thread_hypotheses(scheme):
    task = TinyTask()
    model = baseline_model(scheme, task, 2, 2)
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=4, max_len_b=10)
    samples = [{"net_input": {"src_tokens": s, "src_lengths": n}} for s, n, _ in shaped_batches(task, rounds=3)]

    def search(sample):
        with torch.no_grad():
            return [[(h["tokens"].tolist(), h["score"].item()) for h in beams] for beams in generator(sample)]

    alone = [search(s) for s in samples]
    assert run_threads(search, samples) == alone
