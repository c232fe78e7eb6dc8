"""One process of a training: ``fairseq_cli.hydra_train`` told explicitly which rank of which job it is, as
read from torchrun's or (``--ranks-from slurm``) srun's environment.

fairseq's own rank inference ignores torchrun when fewer than two GPUs are visible, divides by the GPU
count (a ZeroDivisionError on CPU) and, without a launcher, spawns a process per GPU (docs/reproduce.md,
"Why not torchrun fairseq-train"). ``distributed_init_method=env://`` (MASTER_ADDR/PORT, which torchrun and
the srun launch set) skips it and ``distributed_no_spawn`` keeps fairseq from forking. On CPU: gloo and
fairseq's ``legacy_ddp`` (PyTorch's DDP refuses ``device_ids`` for a CPU module)."""

import os
import sys
from collections import namedtuple
from typing import List, Mapping, Optional

import torch

from fairseq_residual_tools import quiet_third_party

#: what a launcher sets, as (rank, world size, local rank) variable names
RANK_VARIABLES = {
    "torchrun": ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    "slurm": ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
}

ProcessRank = namedtuple("ProcessRank", "rank world_size local_rank")


def process_rank(environ: Mapping[str, str], ranks_from: Optional[str]) -> ProcessRank:
    """This process's place in the job; a single process when no launcher started it."""
    if ranks_from is None:
        if "RANK" not in environ or "WORLD_SIZE" not in environ:
            return ProcessRank(0, 1, 0)
        ranks_from = "torchrun"
    names = RANK_VARIABLES[ranks_from]
    missing = [n for n in names if n not in environ]
    if missing:
        raise SystemExit(
            f"error: --ranks-from {ranks_from}: {', '.join(missing)} not set (not started by {ranks_from}?)"
        )
    return ProcessRank(*(int(environ[n]) for n in names))


def distributed_overrides(rank: ProcessRank, cpu: bool, visible_gpus: int = 0) -> List[str]:
    """The hydra overrides that make fairseq one rank of a ``rank.world_size``-process job. The GPU is the local
    rank among the GPUs this process sees (all of the node's, or the one a SLURM GPU binding leaves it)."""
    if rank.world_size == 1:
        # a single process, even on a node with several GPUs (no spawning)
        return ["distributed_training.distributed_world_size=1"]
    device = 0 if cpu else rank.local_rank % max(1, visible_gpus)
    out = [
        f"distributed_training.distributed_world_size={rank.world_size}",
        f"distributed_training.distributed_rank={rank.rank}",
        f"distributed_training.device_id={device}",
        "distributed_training.distributed_init_method=env://",
        "distributed_training.distributed_no_spawn=true",
    ]
    if cpu:
        out += ["distributed_training.distributed_backend=gloo", "distributed_training.ddp_backend=legacy_ddp"]
    return out


def split_argv(argv: List[str]):
    """(``--ranks-from`` value or None, the fairseq-hydra-train arguments)."""
    if argv[:1] == ["--ranks-from"]:
        if len(argv) < 2 or argv[1] not in RANK_VARIABLES:
            raise SystemExit(f"error: --ranks-from takes one of: {', '.join(RANK_VARIABLES)}")
        return argv[1], argv[2:]
    return None, argv


def main(argv=None):
    ranks_from, hydra_args = split_argv(list(sys.argv[1:] if argv is None else argv))
    rank = process_rank(os.environ, ranks_from)
    cpu = "common.cpu=true" in hydra_args or not torch.cuda.is_available()
    overrides = distributed_overrides(rank, cpu, torch.cuda.device_count())

    quiet_third_party()
    from fairseq_cli import hydra_train  # its import configures logging: only in the training process

    sys.argv = ["fairseq-hydra-train", *hydra_args, *overrides]
    hydra_train.cli_main()


if __name__ == "__main__":
    main()
