"""Bad input ends with one clear line naming the problem and the fix, never a traceback."""

import pytest
import torch
from helpers import PLUGIN_DIR, TINY_MODEL, TinyTask, build_model, run_cli, train_args

from fairseq_residual.errors import CheckpointMismatchError, ConfigError
from fairseq_residual.model import SCHEME_KEY


def error_lines(proc):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if "error:" in line]


@pytest.mark.slow
def test_unknown_scheme_is_rejected_by_the_cli(tmp_path):
    proc = run_cli(
        [
            "fairseq_cli.train",
            str(tmp_path),
            "--user-dir",
            PLUGIN_DIR,
            "--arch",
            "residual_transformer",
            "--residual-scheme",
            "bogus",
        ],
        cwd=tmp_path,
        check=False,
    )
    (line,) = error_lines(proc)
    assert "--residual-scheme" in line and "'bogus'" in line and "'residual'" in line


def test_unknown_scheme_in_code_names_the_choices():
    with pytest.raises(ConfigError, match="unknown residual scheme 'bogus'.*post, pre, residual"):
        build_model(scheme="bogus")


@pytest.mark.slow
def test_embed_dim_not_divisible_by_heads(demo_databin, tmp_path):
    args = train_args(demo_databin.databin, tmp_path, max_update=1)
    args += ["--encoder-embed-dim", "30", "--encoder-attention-heads", "4"]
    proc = run_cli(args, cwd=tmp_path, check=False)
    (line,) = error_lines(proc)
    assert line.startswith("error: --encoder-embed-dim 30 is not divisible by --encoder-attention-heads 4")


@pytest.mark.slow
def test_missing_data_folder(tmp_path):
    missing = tmp_path / "data-bin" / "nope"
    proc = run_cli(
        [
            "fairseq_cli.train",
            str(missing),
            "--user-dir",
            PLUGIN_DIR,
            "--arch",
            "residual_transformer",
            *TINY_MODEL,
            "--max-tokens",
            "512",
            "--cpu",
        ],
        cwd=tmp_path,
        check=False,
    )
    (line,) = error_lines(proc)
    assert str(missing) in line and "data-prep" in line


@pytest.mark.slow
def test_resuming_with_another_scheme_is_a_clear_error(demo_databin, tmp_path):
    run_cli(train_args(demo_databin.databin, tmp_path, max_update=1, scheme="residual"), cwd=tmp_path)
    proc = run_cli(train_args(demo_databin.databin, tmp_path, max_update=2, scheme="pre"), cwd=tmp_path, check=False)
    (line,) = error_lines(proc)
    assert "trained with --residual-scheme residual" in line
    assert "uses --residual-scheme pre" in line


def test_loading_a_checkpoint_of_another_scheme_raises():
    task = TinyTask()
    residual_state = build_model(task, scheme="residual").state_dict()
    with pytest.raises(CheckpointMismatchError, match="--residual-scheme residual.*--residual-scheme pre"):
        build_model(task, scheme="pre").load_state_dict(residual_state)


def test_loading_a_checkpoint_of_another_architecture_raises():
    task = TinyTask()
    stock_like = {k: v for k, v in build_model(task, scheme="post").state_dict().items() if k != SCHEME_KEY}
    with pytest.raises(CheckpointMismatchError, match="not written by residual_transformer"):
        build_model(task, scheme="post").load_state_dict(stock_like)


def test_same_scheme_checkpoint_loads_exactly():
    task = TinyTask()
    torch.manual_seed(0)
    a = build_model(task, scheme="residual")
    torch.manual_seed(1)
    b = build_model(task, scheme="residual")
    b.load_state_dict(a.state_dict())
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
