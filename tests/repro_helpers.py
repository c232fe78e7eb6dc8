"""Shared by the tests of the reproduction harness (tests/test_repro_*.py)."""

import argparse

from conftest import ROOT

#: hydra overrides that shrink a paper cell to a few CPU seconds on the demo data-bin
#: (the tables mark such runs: they are not the paper's setting)
TINY = [
    "task.source_lang=src",
    "task.target_lang=tgt",
    "model.encoder_embed_dim=32",
    "model.decoder_embed_dim=32",
    "model.encoder_ffn_embed_dim=64",
    "model.decoder_ffn_embed_dim=64",
    "model.encoder_attention_heads=2",
    "model.decoder_attention_heads=2",
    "task.eval_bleu=false",
    "checkpoint.best_checkpoint_metric=loss",
    "checkpoint.maximize_best_checkpoint_metric=false",
    "common.log_interval=1",
    "dataset.num_workers=0",
]

SCRIPTS = ROOT / "scripts"


def launch_args(cell, work, data=None, **kwargs):
    """The namespace ``scripts/train.sh`` builds, for calling the launcher in-process."""
    values = dict(
        cell=cell,
        data=str(data) if data else None,
        work=str(work),
        results=str(work / "results"),
        gpus=1,
        nodes=1,
        launcher="auto",
        node_rank=None,
        master_addr=None,
        master_port=29500,
        cpu=False,
        max_tokens=None,
        update_freq=None,
        reference_gpus=None,
        dry_run=True,
        overrides=[],
    )
    values.update(kwargs)
    return argparse.Namespace(**values)
