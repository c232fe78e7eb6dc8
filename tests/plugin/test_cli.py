"""End to end through fairseq's real command-line tools, with the plugin as --user-dir.

One small data-bin (the embedded corpus through the real pipeline) and one
trained checkpoint are shared by all tests of this module.
"""

import re

import pytest
import torch
from helpers import PLUGIN_DIR, ROOT, run_cli, train_args

pytestmark = pytest.mark.slow  # every test runs fairseq's CLIs


@pytest.fixture(scope="module")
def trained(demo_databin, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("ckpt")
    proc = run_cli(train_args(demo_databin.databin, save_dir, max_update=8), cwd=save_dir)
    return save_dir, proc.stdout + proc.stderr


def test_train_logs_updates_and_writes_checkpoints(trained):
    save_dir, log = trained
    assert "ResidualTransformerModel" in log
    updates = [int(m) for m in re.findall(r'"num_updates": "(\d+)"', log)]
    assert max(updates) == 8
    assert (save_dir / "checkpoint_last.pt").is_file() and (save_dir / "checkpoint_best.pt").is_file()
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)  # plugin allowlist active
    assert state["cfg"]["model"]["residual_scheme"] == "residual"
    assert state["optimizer_history"][-1]["num_updates"] == 8


def test_generate_loads_checkpoint_and_reports_bleu(demo_databin, trained):
    save_dir, _ = trained
    proc = run_cli(
        [
            "fairseq_cli.generate",
            str(demo_databin.databin),
            "--user-dir",
            PLUGIN_DIR,
            "--path",
            str(save_dir / "checkpoint_best.pt"),
            "--beam",
            "5",
            "--remove-bpe",
            "--max-tokens",
            "2000",
            "--cpu",
        ],
        cwd=save_dir,
    )
    out = proc.stdout + proc.stderr
    match = re.search(r"Generate test with beam=5: BLEU4 = ([0-9.]+)", out)
    assert match, out[-2000:]
    assert 0.0 <= float(match.group(1)) <= 100.0
    # every test sentence is translated (fairseq would drop a final batch that is
    # not a multiple of 8; the plugin keeps it: 40 test pairs)
    assert len(re.findall(r"^H-\d+\t", proc.stdout, flags=re.M)) == 40


def test_interactive_translates_stdin(demo_databin, trained):
    save_dir, _ = trained
    import subprocess
    import sys

    src = (demo_databin.root / "bpe" / "test.src").read_text().splitlines()[:3]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fairseq_cli.interactive",
            str(demo_databin.databin),
            "--user-dir",
            PLUGIN_DIR,
            "--path",
            str(save_dir / "checkpoint_best.pt"),
            "--beam",
            "3",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--cpu",
        ],
        input="\n".join(src) + "\n",
        capture_output=True,
        text=True,
        cwd=save_dir,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(re.findall(r"^H-\d+\t", proc.stdout, flags=re.M)) == 3


def test_training_resumes_from_checkpoint_last_at_the_saved_update(demo_databin, trained, tmp_path):
    save_dir, _ = trained
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    (resumed / "checkpoint_last.pt").write_bytes((save_dir / "checkpoint_last.pt").read_bytes())
    proc = run_cli(train_args(demo_databin.databin, resumed, max_update=11), cwd=resumed)
    log = proc.stdout + proc.stderr
    assert re.search(r"Loaded checkpoint .*checkpoint_last\.pt \(epoch \d+ @ 8 updates\)", log), log[-3000:]
    updates = [int(m) for m in re.findall(r'"num_updates": "(\d+)"', log)]
    assert min(updates) == 9 and max(updates) == 11


def test_training_an_interval_at_a_time_ends_bit_for_bit_where_an_unbroken_run_does(demo_databin, trained, tmp_path):
    """The Bible study trains one validation interval per fairseq-train call, each resuming from checkpoint_last:
    it must train the run one unbroken call would (fairseq seeds each update from --seed and the update count and
    resumes the epoch's batches where they stopped), dropout and all."""
    save_dir, _ = trained
    for max_update in (4, 8):
        run_cli(train_args(demo_databin.databin, tmp_path, max_update=max_update), cwd=tmp_path)
    unbroken = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)["model"]
    resumed = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)["model"]
    assert unbroken.keys() == resumed.keys() and all(torch.equal(unbroken[k], resumed[k]) for k in unbroken)


def test_hydra_train_with_the_small_yaml(demo_databin, tmp_path):
    run_cli(
        [
            "fairseq_cli.hydra_train",
            "--config-dir",
            str(ROOT / "configs"),
            "--config-name",
            "small",
            f"task.data={demo_databin.databin}",
            f"common.user_dir={PLUGIN_DIR}",
            f"checkpoint.save_dir={tmp_path}",
            "optimization.max_update=3",
            "model.encoder_layers=1",
            "model.decoder_layers=1",
            "model.residual_scheme=pre",
            f"hydra.run.dir={tmp_path / 'hydra'}",
        ],
        cwd=tmp_path,
    )
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    model_cfg = state["cfg"]["model"]
    assert model_cfg["_name"] == "residual_transformer"
    assert model_cfg["residual_scheme"] == "pre" and model_cfg["encoder_layers"] == 1
    assert model_cfg["encoder_embed_dim"] == 64  # from configs/small.yaml
    assert state["optimizer_history"][-1]["num_updates"] == 3
    assert "encoder.layer_norm.weight" in state["model"]  # Pre-LN's final LayerNorm


def without_times_and(text, folder):
    """Log lines with their timestamps, durations and speeds dropped and ``folder`` named FOLDER."""
    text = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| ", "", text.replace(str(folder), "FOLDER"), flags=re.M)
    text = re.sub(r'"(\w*(?:wps|ups|wall|gb_free))": "[^"]*"', r'"\1": _', text)
    text = re.sub(r"[\d.]+ seconds", "_ seconds", text)
    return re.sub(r"in [\d.]+s \([\d.]+ sentences/s, [\d.]+ tokens/s\)", "in _", text)


@pytest.mark.parametrize("program", ["train", "generate"])
def test_a_forked_run_prints_and_writes_what_a_fresh_process_does(demo_databin, trained, tmp_path, program):
    """run_cli forks this process by default (tests/helpers.py): the same output lines, streams and files."""
    outputs = {}
    for fresh in (True, False):
        folder = tmp_path / f"fresh-{fresh}"
        folder.mkdir()
        if program == "train":
            argv = train_args(demo_databin.databin, folder, max_update=2)
        else:
            argv = ["fairseq_cli.generate", str(demo_databin.databin), "--user-dir", PLUGIN_DIR, "--path"]
            argv += [str(trained[0] / "checkpoint_last.pt"), "--beam", "2", "--max-len-b", "5", "--cpu"]
        proc = run_cli(argv, cwd=folder, fresh=fresh)
        outputs[fresh] = [without_times_and(text, folder) for text in (proc.stdout, proc.stderr)]
        if program == "train":
            state = torch.load(folder / "checkpoint_last.pt", weights_only=True)["model"]
            outputs[fresh].append({name: tensor.tolist() for name, tensor in state.items()})
    assert outputs[True][0].count("\n") > 5  # the log is on the stream fairseq puts it on, in both
    assert outputs[False] == outputs[True]
