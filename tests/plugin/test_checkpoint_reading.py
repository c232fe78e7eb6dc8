"""Resuming past an unreadable checkpoint_last.pt; one line for a missing or truncated checkpoint."""

import functools
import os
import re
import shutil
from types import SimpleNamespace

import pytest
import torch
from helpers import PLUGIN_DIR, run_cli

from fairseq_residual import checkpoint_reading
from fairseq_residual.checkpoint_reading import resume_path
from fairseq_residual.errors import CheckpointFileError
from fairseq_residual_tools.kill_stress import start_training, train_command, wait_or_kill


def one_error_line(proc):
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    (line,) = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    return line


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def train(argv, log):
    offset = log.stat().st_size if log.exists() else 0
    _, status, text = wait_or_kill(start_training(argv, log), log, offset)
    assert status == 0, text[-3000:]
    return text


@pytest.fixture(scope="module")
def three_updates(demo_databin, tmp_path_factory):
    """A save dir after 3 updates, saved after each (checkpoint_1_{1,2,3}.pt, best, last)."""
    save_dir = tmp_path_factory.mktemp("three-updates")
    train(train_command(demo_databin.databin, save_dir, "small", max_update=3), save_dir.parent / "three.log")
    return save_dir


@pytest.mark.slow
def test_resume_from_a_truncated_checkpoint_last_takes_the_newest_readable_checkpoint(
    demo_databin, three_updates, tmp_path
):
    save_dir = tmp_path / "ckpt"
    shutil.copytree(three_updates, save_dir)
    truncate(save_dir / "checkpoint_last.pt")
    # newest by the recorded update count, not by file time
    os.utime(save_dir / "checkpoint_1_1.pt", (2e9, 2e9))
    text = train(train_command(demo_databin.databin, save_dir, "small", max_update=5), tmp_path / "log")
    (warning,) = [line for line in text.splitlines() if "resuming from" in line]
    assert f"{save_dir}/checkpoint_last.pt is truncated" in warning
    assert re.search(r"resuming from \S+(checkpoint_1_3|checkpoint_best)\.pt \(3 updates\)", warning), warning
    assert re.search(r"Loaded checkpoint \S+(checkpoint_1_3|checkpoint_best)\.pt \(epoch 1 @ 3 updates\)", text)
    assert torch.load(save_dir / "checkpoint_last.pt")["optimizer_history"][-1]["num_updates"] == 5


@pytest.mark.slow
def test_resume_with_no_readable_checkpoint_is_one_line_naming_the_folder(demo_databin, three_updates, tmp_path):
    save_dir = tmp_path / "ckpt"
    shutil.copytree(three_updates, save_dir)
    for path in save_dir.glob("*.pt"):
        truncate(path)
    proc = run_cli(
        ["fairseq_cli.train", *train_command(demo_databin.databin, save_dir, "small", max_update=5)],
        cwd=tmp_path,
        check=False,
    )
    line = one_error_line(proc)
    assert f"cannot resume in {save_dir}: checkpoint_last.pt is truncated" in line
    assert "no other checkpoint there can be read" in line and f"move {save_dir} away" in line


def test_an_unreadable_restore_file_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "mine.pt"
    bad.write_bytes(b"PK\x03\x04 not really a checkpoint")
    with pytest.raises(CheckpointFileError, match=f"cannot resume from {bad}: it is truncated or not a checkpoint"):
        resume_path(str(bad))


@pytest.mark.slow
def test_a_readable_checkpoint_last_is_used_as_it_is(three_updates):
    assert resume_path(str(three_updates / "checkpoint_last.pt")) == str(three_updates / "checkpoint_last.pt")


@pytest.mark.slow
@pytest.mark.parametrize("problem", ["missing", "truncated"])
def test_generate_with_a_bad_path_is_one_line_naming_the_file(demo_databin, three_updates, tmp_path, problem):
    path = tmp_path / "checkpoint_best.pt"
    if problem == "truncated":
        shutil.copy(three_updates / "checkpoint_best.pt", path)
        truncate(path)
    proc = run_cli(
        ["fairseq_cli.generate", str(demo_databin.databin), "--user-dir", PLUGIN_DIR, "--path", str(path), "--cpu"],
        cwd=tmp_path,
        check=False,
    )
    line = one_error_line(proc)
    expected = "does not exist" if problem == "missing" else "is truncated or not a checkpoint"
    assert str(path) in line and expected in line and "--path" in line


@pytest.mark.slow
def test_resuming_a_stock_transformer_checkpoint_names_both_architectures(demo_databin, tmp_path):
    save_dir = tmp_path / "ckpt"
    argv = train_command(demo_databin.databin, save_dir, "small", max_update=1)
    stock = [("transformer" if a == "residual_transformer" else a) for a in argv]
    train(stock, tmp_path / "stock.log")
    argv[argv.index("--max-update") + 1] = "2"
    line = one_error_line(run_cli(["fairseq_cli.train", *argv], cwd=tmp_path, check=False))
    assert f"{save_dir}/checkpoint_last.pt was trained with --arch transformer" in line
    assert "this run uses --arch residual_transformer" in line


def with_option(argv, option, value):
    argv = list(argv)
    argv[argv.index(option) + 1] = str(value)
    return argv


def add_words(databin, extra=16):
    """``databin``'s (joined) dictionary with ``extra`` more words: data prep re-run with other options."""
    for name in ("dict.src.txt", "dict.tgt.txt"):
        with open(databin / name, "a", encoding="utf-8") as f:
            f.writelines(f"newword{i} 1\n" for i in range(extra))
    return databin


@pytest.mark.slow
def test_resuming_with_other_dimensions_names_the_option_and_both_values(demo_databin, three_updates, tmp_path):
    save_dir = tmp_path / "ckpt"
    shutil.copytree(three_updates, save_dir)
    argv = with_option(
        train_command(demo_databin.databin, save_dir, "small", max_update=5), "--encoder-ffn-embed-dim", 96
    )
    line = one_error_line(run_cli(["fairseq_cli.train", *argv], cwd=tmp_path, check=False))
    assert f"{save_dir}/checkpoint_last.pt was trained with --encoder-ffn-embed-dim 128" in line
    assert "this run uses --encoder-ffn-embed-dim 96" in line


@pytest.mark.slow
def test_generating_with_other_dimensions_names_the_option_and_both_values(demo_databin, three_updates, tmp_path):
    path = three_updates / "checkpoint_last.pt"
    overrides = "{'decoder_ffn_embed_dim': 32}"
    proc = run_cli(
        ["fairseq_cli.generate", str(demo_databin.databin), "--user-dir", PLUGIN_DIR, "--path", str(path), "--cpu"]
        + ["--model-overrides", overrides],
        cwd=tmp_path,
        check=False,
    )
    line = one_error_line(proc)
    assert f"{path} was trained with --decoder-ffn-embed-dim 128" in line
    assert "this run uses --decoder-ffn-embed-dim 32" in line


def dictionary_mismatch(databin, checkpoint, command, tmp_path):
    """The error line of fairseq-generate, or of resuming training, with ``checkpoint`` on ``databin``."""
    if command == "generate":
        argv = ["fairseq_cli.generate", str(databin), "--user-dir", PLUGIN_DIR, "--path", str(checkpoint), "--cpu"]
    else:
        argv = ["fairseq_cli.train", *train_command(databin, checkpoint.parent, "small", max_update=5)]
    return one_error_line(run_cli(argv, cwd=tmp_path, check=False))


@pytest.mark.slow
@pytest.mark.parametrize("command", ["generate", "resume"])
def test_a_dictionary_changed_since_training_is_named_with_the_fix_for_the_command(
    demo_databin, three_updates, tmp_path, command
):
    """The checkpoint's own data folder, prepared again with other options."""
    databin = tmp_path / "bin"
    shutil.copytree(demo_databin.databin, databin)
    save_dir = tmp_path / "ckpt"
    shutil.copytree(three_updates, save_dir)
    path = save_dir / "checkpoint_last.pt"
    state = torch.load(path, map_location="cpu", weights_only=False)
    state["cfg"]["task"]["data"] = str(databin)  # as if it had been trained on this copy
    torch.save(state, path)
    line = dictionary_mismatch(add_words(databin), path, command, tmp_path)
    words = len((demo_databin.databin / "dict.src.txt").read_text().splitlines()) + 4  # with the special symbols
    assert line.startswith(
        f"error: the dictionary of {databin} changed since {path} was trained on it: "
        f"{words} words then, {words + 16} words now (data preparation re-run with other options?); "
    )
    if command == "generate":
        assert line.endswith("re-run data preparation with the options the model was trained with")
    else:
        assert line.endswith(
            "re-run data preparation with the options the model was trained with, "
            "or train on the new data in another --save-dir"
        )


@pytest.mark.slow
@pytest.mark.parametrize("command", ["generate", "resume"])
def test_another_corpus_than_the_checkpoint_was_trained_on_is_named_with_the_fix_for_the_command(
    demo_databin, three_updates, tmp_path, command
):
    databin = add_words(shutil.copytree(demo_databin.databin, tmp_path / "other-corpus"))
    save_dir = tmp_path / "ckpt"
    shutil.copytree(three_updates, save_dir)
    path = save_dir / "checkpoint_last.pt"
    line = dictionary_mismatch(databin, path, command, tmp_path)
    words = len((demo_databin.databin / "dict.src.txt").read_text().splitlines()) + 4
    assert line.startswith(
        f"error: {path} was trained on {demo_databin.databin} ({words} words in its dictionary), "
        f"not on {databin} ({words + 16} words); "
    )
    assert "changed" not in line
    if command == "generate":
        assert line.endswith(f"give the data folder it was trained on ({demo_databin.databin})")
    else:
        assert line.endswith(
            f"resume with the data folder it was trained on ({demo_databin.databin}), "
            f"or train on {databin} in another --save-dir"
        )
    assert ("--save-dir" in line) == (command == "resume")


class RunsCode:
    """Pickles as a call of os.system: what a checkpoint that carries code holds."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.slow
def test_generate_with_a_checkpoint_that_carries_code_is_one_line_and_runs_nothing(demo_databin, tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "checkpoint_best.pt"
    torch.save({"model": {}, "extra_state": RunsCode(marker)}, path)
    argv = ["fairseq_cli.generate", str(demo_databin.databin), "--user-dir", PLUGIN_DIR, "--path", str(path), "--cpu"]
    proc = run_cli(argv, cwd=tmp_path, check=False)
    assert proc.stderr.splitlines()[-1] == (
        f"error: {path} is not a plain fairseq checkpoint: it holds the global posix.system, which loading would "
        "run as code (torch's safe loading refused it); only if you trust the file and where it came from, load it "
        "with TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 in the environment"
    )
    assert one_error_line(proc) and not marker.exists()
    # the way the line gives loads it (and runs its code: here a harmless touch; fairseq then finds no model in it)
    run_cli(argv, cwd=tmp_path, check=False, env={"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"})
    assert marker.exists()


#: where the resumed run stops and starts again: epoch 1's last update, epoch 2's first, inside epoch 2
STOPS = (26, 27, 35)


@pytest.mark.slow
def test_resuming_after_the_first_epoch_ends_bit_identical_to_the_uninterrupted_run(demo_databin, tmp_path):
    """--max-tokens 1024: 26 updates per epoch. fairseq alone built the resumed run's batches with other sentences.
    One run stopped at each of STOPS in turn and resumed, against one that never stopped: a resume that changed
    a batch, a weight or an optimizer state at any of them would show in the end."""
    command = functools.partial(train_command, demo_databin.databin, max_tokens=1024, size="small")
    end = STOPS[-1] + 3
    train(command(save_dir=tmp_path / "straight", max_update=end), tmp_path / "straight.log")
    train(command(save_dir=tmp_path / "resumed", max_update=STOPS[0]), tmp_path / "resumed.log")
    for stop, until in zip(STOPS, (*STOPS[1:], end)):
        log = train(command(save_dir=tmp_path / "resumed", max_update=until), tmp_path / "resumed.log")
        assert f"(epoch {1 + stop // 26} @ {stop} updates)" in log  # resumed where the start before stopped
    straight, resumed = (torch.load(tmp_path / d / "checkpoint_last.pt") for d in ("straight", "resumed"))
    assert resumed["optimizer_history"][-1]["num_updates"] == straight["optimizer_history"][-1]["num_updates"] == end
    torch.testing.assert_close(resumed["model"], straight["model"], rtol=0, atol=0)
    torch.testing.assert_close(resumed["last_optimizer_state"], straight["last_optimizer_state"], rtol=0, atol=0)


class ShardedTrainer:
    """What the resume wrapper reads of fairseq's Trainer under FSDP with --use-sharded-state."""

    is_fsdp = True
    cfg = SimpleNamespace(distributed_training=SimpleNamespace(use_sharded_state=True))


def resume_on_two_ranks(rank, init_file, folder):
    """Rank 1's checkpoint_last and its 400-update shard are truncated; rank 0's files are whole."""
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        for name, updates in (("checkpoint_1_200", 200), ("checkpoint_2_400", 400), ("checkpoint_last", 400)):
            path = folder / f"{name}-shard{rank}.pt"
            torch.save(
                {"model": {"w": torch.full((2,), float(rank))}, "optimizer_history": [{"num_updates": updates}]}, path
            )
            if rank == 1 and updates == 400:
                truncate(path)
        last = str(folder / f"checkpoint_last-shard{rank}.pt")
        each_alone = resume_path(last)
        resume = checkpoint_reading._resuming_load_checkpoint(lambda trainer, filename: filename)
        (folder / f"rank{rank}.txt").write_text(
            f"{os.path.basename(each_alone)} {os.path.basename(resume(ShardedTrainer(), last))}"
        )
    finally:
        torch.distributed.destroy_process_group()


def test_under_sharded_state_every_rank_resumes_from_the_newest_checkpoint_all_can_read(tmp_path):
    torch.multiprocessing.spawn(resume_on_two_ranks, args=(tmp_path / "gloo-init", tmp_path), nprocs=2)
    alone0, agreed0 = (tmp_path / "rank0.txt").read_text().split()
    alone1, agreed1 = (tmp_path / "rank1.txt").read_text().split()
    # each rank deciding alone: rank 0 would resume at 400 updates, rank 1 at 200
    assert (alone0, alone1) == ("checkpoint_last-shard0.pt", "checkpoint_1_200-shard1.pt")
    assert (agreed0, agreed1) == ("checkpoint_1_200-shard0.pt", "checkpoint_1_200-shard1.pt")
