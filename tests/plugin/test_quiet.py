"""Ordinary commands print nothing on stderr that is not about the user's run, and an error is the last line:
fairseq's CLIs with the plugin, data preparation and the harness (``fairseq_residual/quiet.py``)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PLUGIN_DIR, ROOT, TINY, TINY_MODEL

pytestmark = pytest.mark.slow

#: fragments of the third-party lines measured on stderr before the filters (issues 20 and 25), one per kind
KNOWN_NOISE = [
    "FutureWarning: `torch.cuda.amp.custom_fwd",
    "FutureWarning: `torch.cuda.amp.custom_bwd",
    "FutureWarning: `torch.cuda.amp.autocast",
    "Please install tensorboardX",
    "hydra.experimental.initialize() is no longer experimental",
    "hydra.experimental.compose() is no longer experimental",
    "The version_base parameter is not specified",
    "Usage of deprecated keyword in package header",
    "is validated against ConfigStore schema",
    "The strict flag in the compose API is deprecated",
    "deprecation_warning(",
    "'pin_memory' argument is set as true",
    "Support for mismatched key_padding_mask and attn_mask",
    "DEBUG:hydra",
    "Future Hydra versions will no longer change working directory",
    # fairseq's batch-iterator cache: fairseq-generate, each sentence of fairseq-interactive, each translate()
    "can_reuse_epoch_itr = ",
    "reuse_dataloader = ",
    "rebuild_batches = ",
    "creating new batches for epoch",
    "{'_name': None, 'common':",  # the configuration dump
    "Namespace(no_progress_bar=",  # fairseq-preprocess's argument dump
    "\r",  # progress bars redrawn into a log
]


def run(command, cwd, stdin=None, **env):
    """``command`` with the user's environment (no PYTHONWARNINGS, unlike helpers.run_cli)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "FAIRSEQ_RESIDUAL_VERBOSE")}
    full_env.update(env)
    return subprocess.run(command, cwd=cwd, env=full_env, input=stdin, capture_output=True, text=True)


def noise(stderr: str):
    """The lines of ``stderr`` that hold a known-noise fragment (a ``\\r`` anywhere counts)."""
    return [line for line in stderr.split("\n") if any(fragment in line for fragment in KNOWN_NOISE)]


def fairseq(module, *args):
    return [sys.executable, "-m", f"fairseq_cli.{module}", *args, "--user-dir", PLUGIN_DIR, "--cpu"]


@pytest.fixture(scope="module")
def trained(demo_databin, tmp_path_factory):
    """A 3-update tiny training: its stderr, and the folder with its checkpoint."""
    save = tmp_path_factory.mktemp("quiet-train")
    command = fairseq(
        "train", str(demo_databin.databin), "--arch", "residual_transformer_iwslt_de_en", *TINY_MODEL,
        "--share-all-embeddings", "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "1024",
        "--max-update", "3", "--num-workers", "0", "--save-dir", str(save), "--no-epoch-checkpoints",
    )  # fmt: skip
    proc = run(command, save)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr, save, command


def test_fairseq_train_prints_no_third_party_line(trained):
    stderr, _, _ = trained
    assert noise(stderr) == []
    assert stderr.strip() == ""  # nothing else either: fairseq-train logs to stdout


def test_fairseq_residual_verbose_shows_the_third_party_lines(trained, tmp_path):
    _, _, command = trained
    command = [*command, "--max-update", "1", "--save-dir", str(tmp_path)]
    proc = run(command, tmp_path, FAIRSEQ_RESIDUAL_VERBOSE="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = " ".join(noise(proc.stderr))
    # the first is fairscale's, at fairseq's import: silenced by setup.py's .pth, which the variable turns off too
    fragments = ["torch.cuda.amp.custom_fwd", "hydra.experimental.initialize()", "'pin_memory' argument"]
    for fragment in [*fragments, "torch.cuda.amp.autocast"]:
        assert fragment in shown
    assert "fairseq.tasks.fairseq_task | can_reuse_epoch_itr = " in proc.stdout  # fairseq-train logs to stdout


def test_fairseq_generate_and_interactive_print_only_their_own_log(trained, demo_databin):
    _, save, _ = trained
    checkpoint = ["--path", str(save / "checkpoint_last.pt"), "--beam", "2", "--max-len-b", "5"]
    generate = run(fairseq("generate", str(demo_databin.databin), *checkpoint, "--gen-subset", "valid"), save)
    interactive = run(fairseq("interactive", str(demo_databin.databin), *checkpoint), save, stdin="w1 w2\nw3\n")
    for proc in (generate, interactive):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert noise(proc.stderr) == []
        assert "loading model(s) from" in proc.stderr  # fairseq's own log stays
    assert "H-1\t" in interactive.stdout and "Translated 40 sentences" in generate.stderr


def tiny_hydra_overrides():
    """The CLI tests' tiny model, two updates, no checkpoint: a paper config's run in a few seconds."""
    tiny = [f"model.{k[2:].replace('-', '_')}={v}" for k, v in zip(TINY_MODEL[::2], TINY_MODEL[1::2])]
    return [*tiny, "dataset.max_tokens=1024", "optimization.max_update=2", "checkpoint.no_save=true"]


def test_fairseq_hydra_train_prints_no_third_party_line(demo_databin, tmp_path):
    """The README's command as the console script fairseq-hydra-train (hydra and fairseq print their notes before
    the plugin is loaded: the filters of the .pth file that installing the package puts into site-packages)."""
    command = [
        str(Path(sys.executable).parent / "fairseq-hydra-train"), "--config-dir", str(ROOT / "configs"),
        "--config-name", "iwslt14", "+hardware=cpu", f"task.data={demo_databin.databin}", "task.source_lang=src",
        "task.target_lang=tgt", f"common.user_dir={PLUGIN_DIR}", "model.residual_scheme=pre",
        *tiny_hydra_overrides(), "dataset.disable_validation=true", "dataset.num_workers=0",
    ]  # fmt: skip
    quiet = run(command, tmp_path)
    verbose = run(command, tmp_path, FAIRSEQ_RESIDUAL_VERBOSE="1")
    for proc in (quiet, verbose):
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert '"train_num_updates": "2"' in proc.stdout
    assert noise(quiet.stdout + quiet.stderr) == [] and quiet.stderr == ""
    shown = " ".join(noise(verbose.stdout + verbose.stderr))
    for fragment in ["The version_base parameter", "validated against ConfigStore schema", "DEBUG:hydra"]:
        assert fragment in shown


def test_train_sh_prints_no_third_party_line_on_the_console_or_in_train_log(demo_databin, tmp_path):
    command = [
        "bash", str(ROOT / "scripts/train.sh"), "--cpu", "--cell", "iwslt14/post/e6d6", "--work", str(tmp_path),
        "--data", str(demo_databin.databin), "--", *TINY, "model.encoder_layers=1", "model.decoder_layers=1",
        "optimization.max_update=2",
    ]  # fmt: skip
    proc = run(command, tmp_path)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    log = (tmp_path / "iwslt14/post/e6d6/train.log").read_text()
    assert "done training" in log
    assert noise(proc.stdout + proc.stderr) == [] and noise(log) == []


def test_a_failing_fairseq_command_ends_with_one_error_line(trained, demo_databin):
    _, save, _ = trained
    missing = save / "no_such_checkpoint.pt"
    proc = run(fairseq("generate", str(demo_databin.databin), "--path", str(missing)), save)
    assert proc.returncode == 1
    assert noise(proc.stderr) == []
    last = proc.stderr.strip().split("\n")[-1]
    assert last.startswith("error: ") and str(missing) in last


def test_data_preparation_and_the_harness_print_no_third_party_line(demo_databin, tmp_path):
    raw = demo_databin.raw_prefixes
    prepare = [
        "bash", str(ROOT / "data-prep/prepare-custom.sh"), "--train-prefix", raw["train"],
        "--valid-prefix", raw["valid"], "--src", "src", "--tgt", "tgt", "--bpe-merges", "60",
        "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    steps = {
        "prepare-custom": run(prepare, tmp_path),
        "reproduce --list": run(["bash", str(ROOT / "scripts/reproduce.sh"), "--list"], tmp_path),
        "make_tables": run([sys.executable, str(ROOT / "scripts/make_tables.py"), "--out", "t.md"], tmp_path),
        # the README's USER_DIR one-liner: the plugin imports fairseq after its filters
        "USER_DIR": run(
            [sys.executable, "-c", "import fairseq_residual, os; print(os.path.dirname(fairseq_residual.__file__))"],
            tmp_path,
        ),
    }
    for name, proc in steps.items():
        assert proc.returncode == 0, (name, proc.stderr[-3000:])
        assert proc.stderr == "", name  # not even the lines printed while fairseq is imported
    assert (tmp_path / "out/bin/dict.src.txt").exists() and "iwslt14/residual/e6d6" in steps["reproduce --list"].stdout
    assert steps["USER_DIR"].stdout.strip() == PLUGIN_DIR


def test_a_failing_harness_command_prints_only_its_error_line(tmp_path):
    proc = run(["bash", str(ROOT / "scripts/evaluate.sh"), "--cell", "iwslt14/nonsense/e6d6"], tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.startswith("error: unknown scheme 'nonsense'") and proc.stderr.count("\n") == 1
