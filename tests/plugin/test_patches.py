"""The table of what the plugin changes in fairseq on import (``fairseq_residual.patches``): applied from it,
undone from it (stock fairseq behaviour returns), applied again, and documented row for row in docs/patches.md."""

import argparse
import subprocess
import sys

import numpy as np
import torch
from fairseq.data import data_utils
from helpers import ROOT

from fairseq_residual import patches


def replaced():
    return {(id(owner), name): getattr(owner, name) for p in patches.PATCHES for owner, name in p.targets}


def last_batch_kept():
    """fairseq's batching of 10 one-token examples, 4 per batch in multiples of 4: the 2 left over kept?"""
    batches = data_utils.batch_by_size(np.arange(10), lambda i: 1, max_sentences=4, required_batch_size_multiple=4)
    return sum(len(b) for b in batches) == 10


def test_importing_the_plugin_applies_every_row():
    assert [p.name for p in patches.PATCHES] == [
        "safe-load allowlist",
        "keep the last batch",
        "complete checkpoint files",
        "resume from a readable checkpoint",
        "a finished training stays finished",
        "check the data folder",
        "numpy.compat for numpy 2",
        "--bf16 without a TPU",
        "say that the input is not UTF-8",
        "one-line errors",
    ]
    # in a fresh interpreter: other libraries imported by other tests replace some of the same attributes
    # (torch.distributed's workers install their own sys.excepthook)
    check = (
        "import argparse, torch, fairseq_residual\n"
        "from fairseq_residual import patches\n"
        "values = [getattr(o, n) for p in patches.PATCHES for o, n in p.targets]\n"
        "assert all(getattr(v, 'fairseq_residual', False) or hasattr(v, 'keeps_last_batch') for v in values)\n"
        "assert argparse.Namespace in torch.serialization.get_safe_globals()\n"
        "print(len(values))\n"
    )
    proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) == sum(len(p.targets) for p in patches.PATCHES)
    assert last_batch_kept() and argparse.Namespace in torch.serialization.get_safe_globals()


def test_undo_restores_stock_fairseq_and_apply_patches_it_again():
    applied = replaced()
    try:
        patches.undo_all()
        stock = replaced()
        assert all(stock[key] is not applied[key] for key in applied)
        assert not any(getattr(f, "fairseq_residual", False) for f in stock.values())
        assert not last_batch_kept()  # fairseq's bug (#5036) is back
        assert argparse.Namespace not in torch.serialization.get_safe_globals()
        assert sys.excepthook is stock[(id(sys), "excepthook")]
    finally:
        patches.apply_all()
    again = replaced()
    assert all(getattr(again[key], "fairseq_residual", False) or key[1] == "batch_by_size" for key in again)
    assert last_batch_kept() and argparse.Namespace in torch.serialization.get_safe_globals()
    patches.apply_all()  # idempotent: nothing is wrapped twice
    assert replaced() == again


def test_docs_list_every_patch_with_its_issue():
    doc = (ROOT / "docs" / "patches.md").read_text()
    rows = [line for line in doc.splitlines() if line.startswith("| ")][1:]  # after the header
    assert len(rows) == len(patches.PATCHES)
    for row, patch in zip(rows, patches.PATCHES):
        assert row.startswith(f"| {patch.name} |") and (patch.issue or "none found") in row
        for owner, name in patch.targets:
            assert f"`{owner.__name__.split('.')[-1]}.{name}`" in row, (patch.name, name)


def test_fairseqs_epoch_function_is_patched_once_imported_and_undone_with_the_rest():
    """The plugin does not import fairseq_cli.train (its import configures the root logger): applying the table
    patches it where it is imported, undoing restores fairseq's own."""
    from fairseq_cli import train

    try:
        patches.undo_all()
        stock = train.train
        patches.apply_all()
        assert train.train.__wrapped__ is stock
        patches.undo_all()
        assert train.train is stock
    finally:
        patches.apply_all()
    assert train.train.__wrapped__ is stock


def test_every_fairseq_function_the_plugin_replaced_is_a_row_of_the_table():
    """A replaced function carries the mark ``fairseq_residual``; each one is a target, so ``undo_all`` restores it."""
    targets = {(id(owner), name) for patch in patches.PATCHES for owner, name in patch.targets}
    marked = []
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.split(".")[0] not in ("fairseq", "fairseq_cli"):
            continue
        owners = [module] + [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module_name]
        for owner in owners:
            for name, value in list(vars(owner).items()):
                if getattr(value, "fairseq_residual", False) is True:
                    marked.append((owner, name))
    assert marked, "no replaced function found: the scan is broken"
    missing = sorted(f"{getattr(o, '__name__', o)}.{n}" for o, n in marked if (id(o), n) not in targets)
    assert missing == []
