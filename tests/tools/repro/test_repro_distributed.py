"""A real 2-process CPU training (gloo), started the way scripts/train.sh starts it, is ONE job.

Plain ``torchrun ... fairseq-train --cpu`` runs independent trainings: fairseq's
``infer_init_method`` returns before reading torchrun's RANK/WORLD_SIZE when
``distributed_world_size`` is 1, its default without GPUs
(``fairseq_residual_tools/repro/distributed_train.py`` explains the fix). Here the
launcher's own torchrun command runs with ``tests/repro_rank_probe.py`` in place
of the entry point: it records, on every rank, the sentences trained on and the
parameters when fairseq saves.
"""

import os
import re

import pytest
import torch
from helpers import ROOT, TINY, launch_args

from fairseq_residual_tools.repro import launch

pytestmark = pytest.mark.slow  # a real 2-process training


def test_two_cpu_processes_train_as_one_distributed_job(demo_databin, tmp_path, monkeypatch):
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    monkeypatch.setenv("PROBE_DIR", str(probe_dir))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    args = launch_args(
        "iwslt14/residual/e6d6",
        tmp_path / "work",
        data=demo_databin.databin,
        gpus=2,
        cpu=True,
        dry_run=False,
        overrides=[*TINY, "model.encoder_layers=1", "model.decoder_layers=1", "optimization.max_update=3"],
    )
    assert launch.plan_launch(args).launcher == "torchrun"
    assert launch.train(args, entry_module="repro_rank_probe") == 0

    cell_dir = tmp_path / "work" / "iwslt14" / "residual" / "e6d6"
    log = (cell_dir / "train.log").read_text()
    # one job of two processes: both ranks join one process group, and fairseq trains once on 2 devices
    assert "distributed init (rank 0): env://" in log and "distributed init (rank 1): env://" in log
    assert log.count("training on 2 devices") == 1 and "training on 1 devices" not in log

    ranks = [torch.load(probe_dir / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    for r, probe in enumerate(ranks):
        assert probe["initialized"] and probe["world_size"] == 2 and probe["rank"] == r
        assert probe["num_updates"] == 3
    # each rank trained on its own shard of the data ...
    assert ranks[0]["ids"] and ranks[1]["ids"]
    assert not set(ranks[0]["ids"]) & set(ranks[1]["ids"])
    # ... and after the updates both hold the same parameters (gradients were all-reduced)
    assert ranks[0]["params"].keys() == ranks[1]["params"].keys()
    for name, value in ranks[0]["params"].items():
        assert torch.equal(value, ranks[1]["params"][name]), name

    # a single checkpoint, written once, by rank 0, recording the 2-process job
    assert len(re.findall(r"Saved checkpoint .*checkpoint", log)) == 1
    state = torch.load(cell_dir / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["distributed_training"]["distributed_world_size"] == 2
    assert state["optimizer_history"][-1]["num_updates"] == 3
    for name, value in ranks[0]["params"].items():
        assert torch.equal(state["model"][name], value), name
    assert (cell_dir / "train.done").is_file()
