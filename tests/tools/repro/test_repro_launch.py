"""Launch commands: the paper's effective batch on any GPU count, torchrun / srun, ranks, resume."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest
from helpers import SCRIPTS, TINY, launch_args

from fairseq_residual_tools.errors import ConfigError, UserError, exit_on_user_error
from fairseq_residual_tools.repro import cli, distributed_train, launch
from fairseq_residual_tools.repro.cells import DATASETS, parse_cell
from fairseq_residual_tools.repro.distributed_train import ProcessRank, distributed_overrides, process_rank
from fairseq_residual_tools.repro.launch import derive_batch
from fairseq_residual_tools.repro.status import LAUNCH_MARK, RUNNING, TRAINED, training_state


@pytest.mark.parametrize(
    "gpus, ref, expected",
    [
        (1, (4096, 1), (4096, 1)),  # IWSLT-14 on one GPU: the config as published
        (2, (4096, 1), (2048, 1)),  # update_freq is already 1: max_tokens shrinks
        (4, (4096, 1), (1024, 1)),
        (4, (4096, 16), (4096, 4)),  # WMT / OPUS-100: update_freq shrinks
        (16, (4096, 16), (4096, 1)),  # 2 nodes x 8 GPUs
        (32, (4096, 16), (2048, 1)),
    ],
)
def test_update_freq_is_derived_to_keep_the_papers_effective_batch(gpus, ref, expected):
    batch = derive_batch(gpus, *ref)
    assert (batch.max_tokens, batch.update_freq) == expected
    assert batch.tokens == ref[0] * ref[1] == gpus * batch.max_tokens * batch.update_freq
    assert f"= {batch.tokens:,} tokens per update" in batch.describe() and "WARNING" not in batch.describe()


def test_a_batch_that_cannot_be_kept_is_refused_or_flagged():
    with pytest.raises(ConfigError, match="cannot be split evenly over 3 GPUs"):
        derive_batch(3, 4096, 16)
    # IWSLT-14 on 8 GPUs: 4096 divides by 8; the reason is the per-GPU floor
    with pytest.raises(
        ConfigError, match="over 8 GPUs would leave 512 tokens per GPU, below the launcher's floor of 1024"
    ):
        derive_batch(8, 4096, 1)
    assert (derive_batch(8, 4096, 16, max_tokens=2048).update_freq) == 4
    chosen = derive_batch(8, 4096, 16, max_tokens=4096, update_freq=4)
    assert chosen.tokens == 131072 and "WARNING: differs from the paper's effective batch" in chosen.describe()
    # the authors' GPU count is not published: assuming 8 multiplies their batch by 8
    assert derive_batch(8, 4096, 16, ref_gpus=8).update_freq == 16


def test_commands_for_one_gpu_one_node_several_nodes_and_slurm(tmp_path):
    single = launch.plan_launch(launch_args("wmt14/residual/e6d6", tmp_path), environ={})
    assert single.launcher == "single"
    assert single.command[1:3] == ["-m", launch.ENTRY]
    assert "optimization.update_freq=[16]" in single.command and "dataset.max_tokens=4096" in single.command
    assert "distributed_training.distributed_world_size" not in " ".join(single.command)  # set per process

    node = launch.plan_launch(launch_args("wmt14/residual/e6d6", tmp_path, gpus=8), environ={})
    assert node.launcher == "torchrun"
    assert node.command[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nnodes=1", "--nproc-per-node=8"]
    assert "optimization.update_freq=[2]" in node.command

    with pytest.raises(ConfigError, match="--node-rank"):
        launch.plan_launch(launch_args("wmt14/residual/e6d6", tmp_path, gpus=8, nodes=2), environ={})
    multi = launch.plan_launch(
        launch_args("wmt14/residual/e6d6", tmp_path, gpus=8, nodes=2, node_rank=1, master_addr="node0"), environ={}
    )
    assert multi.command[3:7] == ["--nnodes=2", "--node-rank=1", "--master-addr=node0", "--master-port=29500"]
    assert "optimization.update_freq=[1]" in multi.command

    slurm = launch.plan_launch(
        launch_args("wmt14/residual/e18d18", tmp_path, gpus=8, nodes=2, master_addr="gpu-a01"),
        environ={"SLURM_JOB_ID": "42"},
    )
    assert slurm.launcher == "srun" and slurm.env == {"MASTER_ADDR": "gpu-a01", "MASTER_PORT": "29500"}
    assert slurm.command[:4] == ["srun", "--nodes=2", "--ntasks-per-node=8", "--kill-on-bad-exit=1"]
    assert slurm.command[5:9] == ["-m", launch.ENTRY, "--ranks-from", "slurm"]
    assert shlex.split(slurm.shell())[:2] == ["MASTER_ADDR=gpu-a01", "MASTER_PORT=29500"]


def test_each_process_takes_its_rank_from_torchrun_or_srun():
    torchrun = {"RANK": "5", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "MASTER_ADDR": "n0", "MASTER_PORT": "1"}
    assert process_rank(torchrun, None) == ProcessRank(5, 16, 1)
    slurm = {"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1"}
    assert process_rank(slurm, "slurm") == ProcessRank(9, 16, 1)
    assert process_rank({}, None) == ProcessRank(0, 1, 0)
    with pytest.raises(SystemExit, match="SLURM_PROCID"):
        process_rank({}, "slurm")
    assert distributed_train.split_argv(["--ranks-from", "slurm", "a=b"]) == ("slurm", ["a=b"])


def test_fairseq_is_told_the_rank_world_size_and_device_explicitly():
    gpu = distributed_overrides(ProcessRank(5, 16, 1), cpu=False, visible_gpus=8)
    assert "distributed_training.distributed_world_size=16" in gpu
    assert "distributed_training.distributed_rank=5" in gpu and "distributed_training.device_id=1" in gpu
    # env:// makes fairseq skip infer_init_method (which ignores torchrun when its world size is 1)
    assert "distributed_training.distributed_init_method=env://" in gpu
    assert "distributed_training.distributed_no_spawn=true" in gpu
    assert not any("gloo" in o or "legacy_ddp" in o for o in gpu)  # NCCL and PyTorch DDP on GPUs
    # a SLURM GPU binding that leaves each task one GPU: that GPU is device 0
    assert "distributed_training.device_id=0" in distributed_overrides(ProcessRank(5, 16, 5), False, visible_gpus=1)
    cpu = distributed_overrides(ProcessRank(1, 2, 1), cpu=True)
    assert (
        "distributed_training.distributed_backend=gloo" in cpu and "distributed_training.ddp_backend=legacy_ddp" in cpu
    )
    assert "distributed_training.device_id=0" in cpu
    # one process: world size 1, so fairseq does not spawn one process per visible GPU
    assert distributed_overrides(ProcessRank(0, 1, 0), cpu=False) == ["distributed_training.distributed_world_size=1"]


def test_training_resumes_from_the_cells_checkpoint_last_and_skips_finished_cells(tmp_path, capsys):
    args = launch_args("iwslt14/pre/e6d6", tmp_path, gpus=2)
    assert launch.train(args) == 0
    out = capsys.readouterr().out
    assert "training from the start" in out and "effective batch: 2 GPUs x 2048 max tokens x update_freq 1" in out
    cell_dir = tmp_path / "iwslt14" / "pre" / "e6d6"
    assert not cell_dir.exists()  # a dry run writes nothing

    # the dry run names the data folder it lacks and the data-prep command that makes it
    data = tmp_path / "nowhere" / "bin"
    launch.train(launch_args("iwslt14/pre/e6d6", tmp_path, data=data, gpus=2))
    make = f"make it with `bash data-prep/prepare-iwslt14.sh --out {data.parent}`"
    assert f"data folder {data} does not exist yet: {make}" in capsys.readouterr().out

    cell_dir.mkdir(parents=True)
    (cell_dir / "checkpoint_last.pt").write_bytes(b"")
    launch.train(args)
    out = capsys.readouterr().out
    assert f"resuming from {cell_dir / 'checkpoint_last.pt'}" in out
    # fairseq restores from checkpoint.save_dir/checkpoint_last.pt: the cell's folder
    assert f"checkpoint.save_dir={cell_dir}" in out

    (cell_dir / "train.done").write_text("fairseq-hydra-train finished (max_update reached) at 2026-01-01 00:00:00\n")
    args.dry_run = False
    assert launch.train(args) == 0  # nothing is run
    assert capsys.readouterr().out == (
        "iwslt14/pre/e6d6: nothing left to do: fairseq-hydra-train finished (max_update reached) at 2026-01-01 "
        f"00:00:00 (train.done); its checkpoints are in {cell_dir}, scored by scripts/evaluate.sh --cell "
        "iwslt14/pre/e6d6; to train further, remove train.done and raise optimization.max_update or max_epoch "
        "after --\n"
    )
    assert not (cell_dir / "train.log").exists()


@pytest.mark.parametrize("processes, counted", [(None, "1 CPU process"), (2, "2 CPU processes")])
def test_a_cpu_launch_counts_cpu_processes_not_gpus(tmp_path, capsys, processes, counted):
    assert launch.train(launch_args("iwslt14/pre/e6d6", tmp_path, gpus=processes, cpu=True)) == 0
    (batch,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("effective batch")]
    assert batch.startswith(f"effective batch: {counted} x ")
    assert "GPU" not in batch.split("(the paper's config")[0]


def test_the_gpu_hour_estimate_follows_the_batch_actually_used(tmp_path):
    cell = parse_cell("wmt14/residual/e6d6")
    cfg = launch.dataset_config("wmt14")
    paper = launch.plan_launch(launch_args(cell.name, tmp_path, gpus=8), environ={})
    half = launch.plan_launch(launch_args(cell.name, tmp_path, gpus=8, max_tokens=4096, update_freq=1), environ={})
    assert paper.batch["tokens"] == 65536 and half.batch["tokens"] == 32768
    for plan in (paper, half):
        hours = launch.gpu_hours(cell, cfg, plan.batch["tokens"])
        (note,) = [n for n in plan.notes if n.startswith("estimated training")]
        assert note.startswith(f"estimated training: ~{hours} GPU-hours on A100-class GPUs at {plan.batch['tokens']:,}")
    assert launch.gpu_hours(cell, cfg, 32768) < launch.gpu_hours(cell, cfg, 65536)


def one_line_error(argv, capsys):
    assert exit_on_user_error(cli.main, argv) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def test_missing_data_or_another_language_pair_stops_train_sh_with_one_line(tmp_path, demo_databin, capsys):
    missing = tmp_path / "nowhere" / "bin"
    base = ["train", "--cell", "iwslt14/residual/e6d6", "--work", str(tmp_path), "--cpu"]
    line = one_line_error([*base, "--data", str(missing)], capsys)
    assert line == (
        f"error: data folder {missing} does not exist yet: make it with "
        f"`bash data-prep/prepare-iwslt14.sh --out {missing.parent}` (data-prep/README.md)"
    )
    # the demo data-bin is made for src-tgt; the cell's config trains de-en
    line = one_line_error([*base, "--data", str(demo_databin.databin)], capsys)
    assert line.startswith(f"error: data folder {demo_databin.databin} has no dict.de.txt: it is made for src-tgt")
    assert not (tmp_path / "iwslt14").exists()  # nothing was launched


def test_separate_dictionaries_with_shared_embeddings_are_refused_before_launch(tmp_path, demo_databin):
    data = tmp_path / "bin"
    data.mkdir()
    (data / "dict.de.txt").write_text("hallo 3\n")
    (data / "dict.en.txt").write_text("hello 3\n")
    problem = launch.data_problem(DATASETS["iwslt14"], data, launch.dataset_config("iwslt14"))
    assert problem.startswith(f"data folder {data} has separate de and en dictionaries, but the cell shares all")
    assert "--joined-dictionary" in problem


def wait_for(predicate, timeout=240):
    deadline = time.time() + timeout
    while not predicate():
        assert time.time() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_killed_launch_resumes_with_the_same_command(tmp_path, demo_databin):
    """SIGTERM (preemption, scancel) and SIGKILL of the launcher: the same command resumes and finishes."""
    command = ["bash", str(SCRIPTS / "train.sh"), "--cell", "iwslt14/residual/e6d6", "--work", str(tmp_path)]
    command += ["--data", str(demo_databin.databin), "--cpu", "--", *TINY, "model.encoder_layers=1"]
    command += ["model.decoder_layers=1", "optimization.max_epoch=3", "optimization.lr=[0.002]"]
    command += ["lr_scheduler.warmup_updates=8"]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    cell_dir = tmp_path / "iwslt14" / "residual" / "e6d6"

    def saved():
        log = cell_dir / "train.log"
        return log.read_text().count("Saved checkpoint") if log.is_file() else 0

    def launch_until(saves, sig):
        """Start the command; once ``saves`` checkpoints are complete in all (this kill test is not about
        kills inside a save), stop its launcher with ``sig``."""
        proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: saved() >= saves or proc.poll() is not None)
        proc.send_signal(sig)  # bash exec'd the launcher: this is the launcher's pid
        return proc.wait()

    assert launch_until(1, signal.SIGTERM) == 128 + signal.SIGTERM
    state = training_state(cell_dir)
    assert (state.name, state.detail) == (RUNNING, "the last launch was stopped by SIGTERM")
    assert json.loads((cell_dir / "launch.json").read_text())[-1]["signal"] == "SIGTERM"

    assert launch_until(2, signal.SIGKILL) == -signal.SIGKILL
    assert training_state(cell_dir).name == RUNNING  # no record: the launcher died with its training
    # the training died with its launcher (no orphan keeps writing the folder)
    wait_for(lambda: not any(str(cell_dir) in _cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit()), 20)

    out = subprocess.run(command, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert f"resuming from {cell_dir / 'checkpoint_last.pt'}" in out.stdout
    assert "state so far: running or interrupted" in out.stdout
    assert "Loaded checkpoint" in out.stdout and "done training" in out.stdout
    state = training_state(cell_dir)
    assert (state.name, state.detail) == (TRAINED, "max_epoch reached") and (cell_dir / "train.done").is_file()
    assert sorted(p.name for p in cell_dir.glob("checkpoint[0-9]*.pt")) == [f"checkpoint{e}.pt" for e in range(1, 4)]

    # a launcher killed after the training's last save left no train.done: the same command trains nothing more
    (cell_dir / "train.done").unlink()
    checkpoints = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in cell_dir.glob("*.pt")}
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "nothing left to do: --max-epoch 3 reached" in out.stdout and "num_updates=" not in out.stdout
    log = (cell_dir / "train.log").read_text()
    said = [line for line in log[log.rfind("\n" + LAUNCH_MARK) + 1 :].splitlines()[1:] if line.strip()]
    assert len(said) == 2 and said[0].startswith("$ ") and "nothing left to do" in said[1], said  # the command run
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in cell_dir.glob("*.pt")} == checkpoints
    state = training_state(cell_dir)
    assert (state.name, state.detail) == (TRAINED, "max_epoch reached") and (cell_dir / "train.done").is_file()
    out = subprocess.run(command, env=env, capture_output=True, text=True)  # and with train.done: one line
    assert out.returncode == 0 and out.stdout.count("\n") == 1 and "nothing left to do" in out.stdout


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.parametrize("counts", [["--gpus", "0"], ["--gpus", "-1", "--cpu"], ["--nodes", "0"]])
def test_a_gpu_or_node_count_below_one_is_one_line_before_anything_starts(tmp_path, demo_databin, capsys, counts):
    base = ["train", "--cell", "iwslt14/residual/e6d6", "--work", str(tmp_path), "--data", str(demo_databin.databin)]
    line = one_line_error([*base, *counts], capsys)
    option, value = counts[:2]
    assert line.startswith(f"error: {option} {value}: ") and "at least 1" in line
    assert not (tmp_path / "iwslt14").exists()  # nothing was launched, no cell folder marked failed


def test_a_second_launch_of_a_cell_being_trained_refuses_and_a_killed_launch_leaves_no_lock(tmp_path, demo_databin):
    cell_dir = tmp_path / "iwslt14/residual/e6d6"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom fairseq_residual_tools.repro.launch import launch_lock\n"
         f"with launch_lock(__import__('pathlib').Path({str(cell_dir)!r})):\n    print('held', flush=True)\n"
         "    time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        args = launch_args("iwslt14/residual/e6d6", tmp_path, data=demo_databin.databin, cpu=True, dry_run=False)
        args.overrides = [*TINY, "optimization.max_update=1"]
        with pytest.raises(
            UserError, match=rf"^{re.escape(str(cell_dir))} is being trained by launch pid {holder.pid} on "
        ):
            launch.train(args)
        assert not (cell_dir / "train.log").exists()  # refused before anything was written
    finally:
        holder.kill()  # SIGKILL: no cleanup runs in the holder
        holder.wait()
    with launch.launch_lock(cell_dir):  # the kernel released the killed launcher's lock
        assert (cell_dir / "launch.lock").read_text().startswith(f"launch pid {os.getpid()} on ")
