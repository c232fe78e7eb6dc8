"""Every baseline trains through ``fairseq-train`` and translates through ``fairseq-generate``.

One shared set of runs for the module: the five trainings run side by side, then the five
generations and Admin's resumed training (each process single-threaded, so that they share
the machine's cores instead of fighting over them).
"""

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from helpers import BASELINES, generate_args, run_cli, train_args

pytestmark = pytest.mark.slow  # every test runs fairseq's CLIs

UPDATES = 4
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
PROFILED = "Admin: profiled omega"


def in_parallel(jobs):
    """{name: (args, cwd)} -> {name: 'stdout + stderr'}, all run at once."""
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {name: pool.submit(run_cli, args, cwd, env=ONE_THREAD) for name, (args, cwd) in jobs.items()}
        return {name: f.result().stdout + f.result().stderr for name, f in futures.items()}


@pytest.fixture(scope="module")
def runs(demo_databin, tmp_path_factory):
    databin = demo_databin.databin
    dirs = {scheme: tmp_path_factory.mktemp(f"ckpt-{scheme}") for scheme in BASELINES}
    train_logs = in_parallel({s: (train_args(databin, d, max_update=UPDATES, scheme=s), d) for s, d in dirs.items()})
    # Admin resumed from its checkpoint, in a copy of its save dir
    resumed = tmp_path_factory.mktemp("ckpt-admin-resumed")
    (resumed / "checkpoint_last.pt").write_bytes((dirs["admin"] / "checkpoint_last.pt").read_bytes())
    later = {s: (generate_args(databin, d / "checkpoint_last.pt"), d) for s, d in dirs.items()}
    later["admin-resumed"] = (train_args(databin, resumed, max_update=UPDATES + 1, scheme="admin"), resumed)
    later_logs = in_parallel(later)
    return dirs, train_logs, later_logs, resumed


def checkpoint(path):
    return torch.load(path, weights_only=True)  # the plugin's allowlist is active


@pytest.mark.parametrize("scheme", BASELINES)
def test_baseline_trains_with_fairseq_train(runs, scheme):
    dirs, train_logs, _, _ = runs
    log = train_logs[scheme]
    updates = [int(m) for m in re.findall(r'"num_updates": "(\d+)"', log)]
    assert max(updates) == UPDATES, log[-2000:]
    losses = [float(m) for m in re.findall(r'train_inner \| \{.*?"loss": "([0-9.]+)"', log)]
    assert len(losses) == UPDATES and all(0 < loss < 100 for loss in losses), log[-2000:]
    state = checkpoint(dirs[scheme] / "checkpoint_last.pt")
    assert state["cfg"]["model"]["residual_scheme"] == scheme
    assert state["optimizer_history"][-1]["num_updates"] == UPDATES


@pytest.mark.parametrize("scheme", BASELINES)
def test_baseline_generates_with_fairseq_generate(runs, scheme):
    _, _, later_logs, _ = runs
    out = later_logs[scheme]
    match = re.search(r"Generate test with beam=5: BLEU4 = ([0-9.]+)", out)
    assert match, out[-2000:]
    assert len(re.findall(r"^H-\d+\t", out, flags=re.M)) == 40  # every test sentence


def admin_omega0(state):
    return {k: v for k, v in state["model"].items() if k.endswith("_omega0")}


def test_admin_profiles_on_the_first_training_batch_and_checkpoints_omega(runs):
    dirs, train_logs, _, _ = runs
    assert train_logs["admin"].count(PROFILED) == 2  # encoder and decoder, once each
    state = checkpoint(dirs["admin"] / "checkpoint_last.pt")
    assert int(state["model"]["encoder.admin_profiled"]) == 1
    assert int(state["model"]["decoder.admin_profiled"]) == 1
    omega0 = admin_omega0(state)
    assert len(omega0) == 2 * 2 + 3 * 2  # 2 encoder and 2 decoder layers of the tiny model
    assert omega0["encoder.layers.0.self_attn_omega0"].item() == 1.0
    assert all(
        v.item() > 1.0
        for k, v in omega0.items()
        if k != "encoder.layers.0.self_attn_omega0" and k != "decoder.layers.0.self_attn_omega0"
    )
    assert any(k.endswith("_omega_delta") for k in state["model"])


def test_admin_does_not_profile_again_when_training_resumes(runs):
    dirs, _, later_logs, resumed = runs
    log = later_logs["admin-resumed"]
    assert re.search(rf"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ {UPDATES} updates\)", log), log[-2000:]
    assert PROFILED not in log
    before = admin_omega0(checkpoint(dirs["admin"] / "checkpoint_last.pt"))
    after = admin_omega0(checkpoint(resumed / "checkpoint_last.pt"))
    assert all(torch.equal(before[k], after[k]) for k in before)
