"""hc and mhc train through ``fairseq-train`` (with ``--hc-streams``), translate through ``fairseq-generate``, resume
to the very weights of an uninterrupted run, train through ``fairseq-hydra-train`` with ``model.hc_streams``, and as
a language model through ``fairseq-train`` and ``fairseq-eval-lm``."""

import re

import pytest
import torch
from fixtures_dataprep import write_monolingual
from helpers import PLUGIN_DIR, ROOT, generate_args, run_cli, train_args

from fairseq_residual_tools.dataprep import monolingual

pytestmark = pytest.mark.slow  # fairseq's CLIs run as processes

UPDATES = 4
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
SCHEMES = ["hc", "mhc"]


def hyper_train_args(databin, save_dir, max_update, scheme):
    return train_args(databin, save_dir, max_update, scheme) + ["--hc-streams", "2"]


@pytest.fixture(scope="module")
def runs(demo_databin, tmp_path_factory):
    databin = demo_databin.databin
    dirs = {scheme: tmp_path_factory.mktemp(f"ckpt-{scheme}") for scheme in SCHEMES}
    logs = {s: run_cli(hyper_train_args(databin, d, UPDATES, s), d, env=ONE_THREAD) for s, d in dirs.items()}
    generated = {
        s: run_cli(generate_args(databin, d / "checkpoint_last.pt"), d, env=ONE_THREAD) for s, d in dirs.items()
    }
    return (
        dirs,
        {s: p.stdout + p.stderr for s, p in logs.items()},
        {s: p.stdout + p.stderr for s, p in generated.items()},
    )


def checkpoint(path):
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_trains_with_fairseq_train_and_checkpoints_the_connections(runs, scheme):
    dirs, logs, _ = runs
    updates = [int(m) for m in re.findall(r'"num_updates": "(\d+)"', logs[scheme])]
    assert max(updates) == UPDATES, logs[scheme][-2000:]
    state = checkpoint(dirs[scheme] / "checkpoint_last.pt")
    assert state["cfg"]["model"]["residual_scheme"] == scheme and state["cfg"]["model"]["hc_streams"] == 2
    name = {"hc": "a_r", "mhc": "b_res"}[scheme]
    for side in ("encoder", "decoder"):
        mix = state["model"][f"{side}.layers.0.hyper_connections.self_attn.{name}"]
        assert mix.shape == (2, 2) and not torch.equal(mix, torch.eye(2))  # trained away from its init


@pytest.mark.parametrize("scheme", SCHEMES)
def test_generates_with_fairseq_generate(runs, scheme):
    _, _, generated = runs
    out = generated[scheme]
    assert re.search(r"Generate test with beam=5: BLEU4 = ([0-9.]+)", out), out[-2000:]
    assert len(re.findall(r"^H-\d+\t", out, flags=re.M)) == 40


def test_a_resumed_hc_run_ends_with_the_weights_of_an_uninterrupted_one(runs, demo_databin, tmp_path):
    dirs, _, _ = runs
    databin = demo_databin.databin
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    resumed.mkdir()
    straight.mkdir()
    (resumed / "checkpoint_last.pt").write_bytes((dirs["hc"] / "checkpoint_last.pt").read_bytes())
    run_cli(hyper_train_args(databin, resumed, UPDATES + 2, "hc"), resumed, env=ONE_THREAD)
    run_cli(hyper_train_args(databin, straight, UPDATES + 2, "hc"), straight, env=ONE_THREAD)
    a, b = checkpoint(resumed / "checkpoint_last.pt"), checkpoint(straight / "checkpoint_last.pt")
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"] == UPDATES + 2
    torch.testing.assert_close(a["model"], b["model"], rtol=0, atol=0)


def test_hydra_train_trains_hc_with_its_stream_count(demo_databin, tmp_path):
    overrides = [f"task.data={demo_databin.databin}", f"common.user_dir={PLUGIN_DIR}"]
    overrides += [f"checkpoint.save_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    overrides += ["optimization.max_update=2", "model.encoder_layers=1", "model.decoder_layers=1"]
    overrides += ["model.residual_scheme=hc", "model.hc_streams=3", "model.hc_static=true", "dataset.num_workers=0"]
    command = ["fairseq_cli.hydra_train", "--config-dir", str(ROOT / "configs"), "--config-name", "small"]
    run_cli(command + overrides, cwd=tmp_path)
    state = checkpoint(tmp_path / "checkpoint_last.pt")
    model = state["cfg"]["model"]
    assert (model["residual_scheme"], model["hc_streams"], model["hc_static"]) == ("hc", 3, True)
    weights = state["model"]
    assert weights["decoder.layers.0.hyper_connections.encoder_attn.a_r"].shape == (3, 3)
    assert not any(k.endswith("w_alpha") for k in weights)  # static: no dynamic part


def test_the_language_model_trains_with_hc_and_fairseq_eval_lm_scores_it(tmp_path):
    raw = write_monolingual(tmp_path / "raw")
    data = tmp_path / "lm"
    argv = ["--train", str(raw["train"]), "--valid", str(raw["valid"]), "--test", str(raw["test"])]
    assert monolingual.main([*argv, "--out", str(data), "--bpe-merges", "120", "--workers", "1", "--quiet"]) == 0
    lm = ["--task", "language_modeling", "--user-dir", PLUGIN_DIR, "--sample-break-mode", "eos"]
    lm += ["--tokens-per-sample", "64", "--max-tokens", "512", "--cpu", "--num-workers", "0"]
    train = ["fairseq_cli.train", str(data / "bin"), *lm, "--arch", "residual_transformer_lm_gpt2_tiny"]
    train += ["--residual-scheme", "hc", "--hc-streams", "2", "--decoder-layers", "2", "--decoder-embed-dim", "32"]
    train += ["--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2", "--optimizer", "adam"]
    train += ["--lr", "3e-3", "--max-update", "4", "--save-dir", str(tmp_path / "ckpt"), "--no-epoch-checkpoints"]
    run_cli(train, cwd=tmp_path, env=ONE_THREAD)
    checkpoint_path = tmp_path / "ckpt" / "checkpoint_last.pt"
    assert checkpoint(checkpoint_path)["cfg"]["model"]["residual_scheme"] == "hc"
    proc = run_cli(["fairseq_cli.eval_lm", str(data / "bin"), "--path", str(checkpoint_path), *lm], cwd=tmp_path)
    loss, perplexity = map(float, re.search(r"Loss \(base 2\): ([\d.]+), Perplexity: ([\d.]+)", proc.stderr).groups())
    assert 0 < loss < 20 and perplexity == pytest.approx(2**loss, rel=1e-3)
