"""Test helper run by torchrun in place of ``fairseq_residual_tools.repro.distributed_train``.

It records, on every rank, what a distributed job must agree on, then runs the
real entry point unchanged:

* the ids of the sentences this rank trained on (``Trainer.train_step``);
* when fairseq saves a checkpoint (called on every rank, written by rank 0
  only): the model's parameters and torch.distributed's rank and world size.

Everything goes to ``$PROBE_DIR/rank<R>.pt``.
"""

import os

import torch
from fairseq import checkpoint_utils, trainer

from fairseq_residual_tools.repro import distributed_train

seen_ids = []
_train_step = trainer.Trainer.train_step
_save_checkpoint = checkpoint_utils.save_checkpoint


def train_step(self, samples, *args, **kwargs):
    for sample in samples:
        if sample and "id" in sample:
            seen_ids.extend(sample["id"].tolist())
    return _train_step(self, samples, *args, **kwargs)


def save_checkpoint(cfg, trainer_, epoch_itr, val_loss):
    result = _save_checkpoint(cfg, trainer_, epoch_itr, val_loss)
    dist = torch.distributed
    rank = dist.get_rank() if dist.is_initialized() else 0
    torch.save(
        {
            "initialized": dist.is_initialized(),
            "world_size": dist.get_world_size() if dist.is_initialized() else 1,
            "rank": rank,
            "num_updates": trainer_.get_num_updates(),
            "params": {k: v.detach().clone() for k, v in trainer_.get_model().state_dict().items()},
            "ids": list(seen_ids),
        },
        os.path.join(os.environ["PROBE_DIR"], f"rank{rank}.pt"),
    )
    return result


trainer.Trainer.train_step = train_step
checkpoint_utils.save_checkpoint = save_checkpoint

if __name__ == "__main__":
    distributed_train.main()
