"""attn-res trains through ``fairseq-train`` (Full, and Block with ``--attn-res-blocks``), translates through
``fairseq-generate``, resumes to the very weights of an uninterrupted run, trains through ``fairseq-hydra-train`` with
``model.attn_res_blocks``, and as a language model through ``fairseq-train`` and ``fairseq-eval-lm``; a block count
that does not divide the depth stops fairseq-train with one line."""

import re

import pytest
import torch
from fixtures_dataprep import write_monolingual
from helpers import PLUGIN_DIR, ROOT, generate_args, run_cli, train_args

from fairseq_residual_tools.dataprep import monolingual

pytestmark = pytest.mark.slow  # fairseq's CLIs run as processes

UPDATES = 4
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: run name -> --attn-res-blocks (train_args' models have two encoder and two decoder layers)
BLOCKS = {"full": 0, "blocks2": 2}


def attn_res_train_args(databin, save_dir, max_update, blocks):
    return train_args(databin, save_dir, max_update, "attn-res") + ["--attn-res-blocks", str(blocks)]


@pytest.fixture(scope="module")
def runs(demo_databin, tmp_path_factory):
    databin = demo_databin.databin
    dirs = {run: tmp_path_factory.mktemp(f"ckpt-attn-res-{run}") for run in BLOCKS}
    logs = {r: run_cli(attn_res_train_args(databin, d, UPDATES, BLOCKS[r]), d, env=ONE_THREAD) for r, d in dirs.items()}
    generated = {
        r: run_cli(generate_args(databin, d / "checkpoint_last.pt"), d, env=ONE_THREAD) for r, d in dirs.items()
    }
    return (
        dirs,
        {r: p.stdout + p.stderr for r, p in logs.items()},
        {r: p.stdout + p.stderr for r, p in generated.items()},
    )


def checkpoint(path):
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("run", list(BLOCKS))
def test_trains_with_fairseq_train_and_checkpoints_the_pseudo_queries(runs, run):
    dirs, logs, _ = runs
    updates = [int(m) for m in re.findall(r'"num_updates": "(\d+)"', logs[run])]
    assert max(updates) == UPDATES, logs[run][-2000:]
    state = checkpoint(dirs[run] / "checkpoint_last.pt")
    model = state["cfg"]["model"]
    assert model["residual_scheme"] == "attn-res" and model["attn_res_blocks"] == BLOCKS[run]
    for side in ("encoder", "decoder"):
        query = state["model"][f"{side}.layers.1.depth_attention.ffn.query"]
        assert query.shape == (32,) and query.abs().max() > 0  # trained away from its init, 0
    assert state["model"]["decoder.layer_norm.depth_attention.key_gain"].shape == (32,)


@pytest.mark.parametrize("run", list(BLOCKS))
def test_generates_with_fairseq_generate(runs, run):
    _, _, generated = runs
    out = generated[run]
    assert re.search(r"Generate test with beam=5: BLEU4 = ([0-9.]+)", out), out[-2000:]
    assert len(re.findall(r"^H-\d+\t", out, flags=re.M)) == 40


def test_a_resumed_block_run_ends_with_the_weights_of_an_uninterrupted_one(runs, demo_databin, tmp_path):
    dirs, _, _ = runs
    databin = demo_databin.databin
    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    resumed.mkdir()
    straight.mkdir()
    (resumed / "checkpoint_last.pt").write_bytes((dirs["blocks2"] / "checkpoint_last.pt").read_bytes())
    run_cli(attn_res_train_args(databin, resumed, UPDATES + 2, 2), resumed, env=ONE_THREAD)
    run_cli(attn_res_train_args(databin, straight, UPDATES + 2, 2), straight, env=ONE_THREAD)
    a, b = checkpoint(resumed / "checkpoint_last.pt"), checkpoint(straight / "checkpoint_last.pt")
    assert a["optimizer_history"][-1]["num_updates"] == b["optimizer_history"][-1]["num_updates"] == UPDATES + 2
    torch.testing.assert_close(a["model"], b["model"], rtol=0, atol=0)


def test_hydra_train_trains_attn_res_with_its_block_count(demo_databin, tmp_path):
    overrides = [f"task.data={demo_databin.databin}", f"common.user_dir={PLUGIN_DIR}"]
    overrides += [f"checkpoint.save_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    overrides += ["optimization.max_update=2", "model.encoder_layers=2", "model.decoder_layers=1"]
    overrides += ["model.residual_scheme=attn-res", "model.attn_res_blocks=1", "dataset.num_workers=0"]
    command = ["fairseq_cli.hydra_train", "--config-dir", str(ROOT / "configs"), "--config-name", "small"]
    run_cli(command + overrides, cwd=tmp_path)
    state = checkpoint(tmp_path / "checkpoint_last.pt")
    model = state["cfg"]["model"]
    assert (model["residual_scheme"], model["attn_res_blocks"]) == ("attn-res", 1)
    assert "decoder.layers.0.depth_attention.encoder_attn.query" in state["model"]


def test_a_block_count_that_does_not_divide_the_depth_stops_fairseq_train_with_one_line(demo_databin, tmp_path):
    proc = run_cli(attn_res_train_args(demo_databin.databin, tmp_path, 1, 3), cwd=tmp_path, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert line == (
        "error: --attn-res-blocks 3 does not divide --decoder-layers 2 into equal blocks: choose one of 1, 2, "
        "or 0 for Full Attention Residuals"
    )


def test_the_language_model_trains_in_blocks_and_fairseq_eval_lm_scores_it(tmp_path):
    raw = write_monolingual(tmp_path / "raw")
    data = tmp_path / "lm"
    argv = ["--train", str(raw["train"]), "--valid", str(raw["valid"]), "--test", str(raw["test"])]
    assert monolingual.main([*argv, "--out", str(data), "--bpe-merges", "120", "--workers", "1", "--quiet"]) == 0
    lm = ["--task", "language_modeling", "--user-dir", PLUGIN_DIR, "--sample-break-mode", "eos"]
    lm += ["--tokens-per-sample", "64", "--max-tokens", "512", "--cpu", "--num-workers", "0"]
    train = ["fairseq_cli.train", str(data / "bin"), *lm, "--arch", "residual_transformer_lm_gpt2_tiny"]
    train += ["--residual-scheme", "attn-res", "--attn-res-blocks", "2", "--decoder-layers", "4"]
    train += ["--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64", "--decoder-attention-heads", "2"]
    train += ["--optimizer", "adam", "--lr", "3e-3", "--max-update", "4", "--save-dir", str(tmp_path / "ckpt")]
    run_cli(train + ["--no-epoch-checkpoints"], cwd=tmp_path, env=ONE_THREAD)
    checkpoint_path = tmp_path / "ckpt" / "checkpoint_last.pt"
    model = checkpoint(checkpoint_path)["cfg"]["model"]
    assert (model["residual_scheme"], model["attn_res_blocks"]) == ("attn-res", 2)
    proc = run_cli(["fairseq_cli.eval_lm", str(data / "bin"), "--path", str(checkpoint_path), *lm], cwd=tmp_path)
    loss, perplexity = map(float, re.search(r"Loss \(base 2\): ([\d.]+), Perplexity: ([\d.]+)", proc.stderr).groups())
    assert 0 < loss < 20 and perplexity == pytest.approx(2**loss, rel=1e-3)
