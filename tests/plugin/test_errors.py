"""Bad input ends with one clear line naming the problem and the fix, never a traceback."""

import functools
import os
import re
import signal
import subprocess
import sys

import fairseq
import pytest
import torch
from helpers import PLUGIN_DIR, ROOT, TINY_MODEL, TinyTask, build_model, run_cli, train_args

from fairseq_residual.error_reporting import one_line_message
from fairseq_residual.errors import CheckpointMismatchError, ConfigError
from fairseq_residual.model import SCHEME_KEY
from fairseq_residual.schemes import SCHEMES, UnknownSchemeError, get_scheme


def error_lines(proc):
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return [line for line in proc.stderr.splitlines() if "error:" in line]


def unknown_scheme_line(name="residul") -> str:
    """The one line for an unknown scheme: it names every registered scheme, in SCHEMES' order."""
    with pytest.raises(UnknownSchemeError) as refused:
        get_scheme(name)
    line = f"error: {refused.value}"
    assert line == (
        f"error: unknown residual scheme {name!r}; choose one of: {', '.join(SCHEMES)} "
        "(--residual-scheme / model.residual_scheme)"
    )
    return line


@pytest.mark.slow
def test_unknown_scheme_is_one_line_naming_the_choices(tmp_path):
    """argparse printed the usage of every fairseq option (177 lines) before its own error line."""
    argv = ["fairseq_cli.train", str(tmp_path), "--user-dir", PLUGIN_DIR, "--arch", "residual_transformer"]
    proc = run_cli([*argv, "--residual-scheme", "residul"], cwd=tmp_path, check=False)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == unknown_scheme_line() + "\n"


@pytest.mark.slow
def test_unknown_scheme_under_fairseq_hydra_train_is_the_same_one_line(demo_databin, tmp_path):
    """omegaconf refused it in a 90-line traceback."""
    overrides = [f"task.data={demo_databin.databin}", f"common.user_dir={PLUGIN_DIR}", "model.residual_scheme=residul"]
    config = ["--config-dir", str(ROOT / "configs"), "--config-name", "small"]
    proc = run_cli(["fairseq_cli.hydra_train", *config, *overrides], cwd=tmp_path, check=False, fresh=True)
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1] == unknown_scheme_line()
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]


def test_errors_md_quotes_the_unknown_scheme_line_as_the_code_says_it():
    """The page's sample is the line the code prints today: a scheme added to SCHEMES must be added there too."""
    rows = [row for row in (ROOT / "docs" / "errors.md").read_text().splitlines() if "--residual-scheme residul" in row]
    assert len(rows) == 1
    quoted = re.findall(r"`(error: unknown residual scheme [^`]*)`", rows[0])
    assert quoted == [unknown_scheme_line()], f"docs/errors.md should quote: {unknown_scheme_line()}"


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


@pytest.mark.parametrize("scale", ["nan", "inf", "-inf"])
def test_a_dual_stream_scale_that_is_not_a_positive_finite_number_is_rejected(scale):
    with pytest.raises(ConfigError, match=f"--dual-stream-scale must be a positive finite number, got {scale}"):
        build_model(dual_stream_scale=float(scale))


def test_share_all_embeddings_without_a_joined_dictionary_names_the_preprocess_option():
    task = TinyTask()
    task.target_dictionary = TinyTask(vocab_size=41).target_dictionary
    with pytest.raises(ConfigError, match="--share-all-embeddings needs one dictionary.*--joined-dictionary"):
        build_model(task)


def test_the_architecture_mismatch_error_names_the_model_side():
    task = TinyTask()
    stock_like = {k: v for k, v in build_model(task, scheme="pre").state_dict().items() if k != SCHEME_KEY}
    with pytest.raises(CheckpointMismatchError, match="but this model is residual_transformer --residual-scheme pre"):
        build_model(task, scheme="pre").load_state_dict(stock_like)


@pytest.mark.slow
def test_a_file_not_found_in_the_users_own_code_keeps_its_traceback(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(f"import fairseq_residual\nopen({str(tmp_path / 'missing.txt')!r})\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and "FileNotFoundError" in proc.stderr and "missing.txt" in proc.stderr
    assert "error:" not in proc.stderr


def test_the_users_own_exception_is_not_replaced_by_a_plugin_error_it_wraps():
    try:
        try:
            build_model(scheme="bogus")
        except ConfigError:
            raise KeyError("the user's own exception")  # noqa: B904  (a user's handler, as users write them)
    except KeyError as e:
        assert one_line_message(e) is None


def test_a_plugin_error_that_fairseq_wrapped_is_one_line():
    fairseq_file = os.path.join(os.path.dirname(fairseq.__file__), "trainer.py")
    try:
        try:
            build_model(scheme="bogus")
        except ConfigError:
            exec(compile("raise Exception('Cannot load model parameters')", fairseq_file, "exec"))
    except Exception as e:
        assert one_line_message(e).startswith("unknown residual scheme 'bogus'")


@pytest.mark.slow
def test_fairseq_train_without_a_batch_size_is_one_line_naming_both_options(demo_databin, tmp_path):
    argv = train_args(demo_databin.databin, tmp_path / "ckpt", max_update=1)
    at = argv.index("--max-tokens")
    proc = run_cli([*argv[:at], *argv[at + 2 :]], cwd=tmp_path, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: no batch size: give --max-tokens N (tokens per batch, e.g. 4096) or --batch-size N")


@pytest.mark.slow
def test_ctrl_c_during_training_is_one_line_saying_where_it_stopped_and_how_to_resume(demo_databin, tmp_path):
    save_dir = tmp_path / "ckpt"
    argv = [sys.executable, "-m", *train_args(demo_databin.databin, save_dir, max_update=10_000)]
    env = {k: v for k, v in os.environ.items() if k != "FAIRSEQ_RESIDUAL_TRACEBACK"}
    # Ctrl-C's SIGINT as a terminal delivers it: a test run started in the background (`make test &`) inherits
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler (the training ran on for 18 min)
    terminal = functools.partial(signal.signal, signal.SIGINT, signal.SIG_DFL)
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, preexec_fn=terminal, **pipes)
    try:
        for line in proc.stdout:  # saves every 4 updates: interrupt after the second save
            if "Saved checkpoint" in line and "@ 8 updates" in line:
                break
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGINT and "Traceback" not in stderr, stderr[-3000:]
    (line,) = [line for line in stderr.splitlines() if "KeyboardInterrupt" in line or line.startswith("stopped")]
    saved = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    saved_updates = saved["optimizer_history"][-1]["num_updates"]
    match = re.fullmatch(r"stopped by Ctrl-C at update (\d+) \(epoch (\d+)\); (.*) holds update (\d+): (.*)", line)
    assert match, line
    assert int(match.group(1)) >= saved_updates >= 8 and int(match.group(4)) == saved_updates
    assert match.group(3) == f"{save_dir}/checkpoint_last.pt"
    assert match.group(5) == "the same command resumes from there"
