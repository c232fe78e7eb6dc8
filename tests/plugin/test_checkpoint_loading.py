"""fairseq checkpoints load under torch >= 2.6's safe loader, and nothing else is let through."""

import argparse
import os

import numpy as np
import pytest
import torch

from fairseq_residual.checkpoint_loading import FAIRSEQ_CHECKPOINT_GLOBALS


def globals_needed(path):
    """What the file needs beyond torch's own safe types (the plugin's allowlist set aside)."""
    allowlist = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        return set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    finally:
        torch.serialization.add_safe_globals(allowlist)


@pytest.mark.slow
def test_a_fresh_fairseq_checkpoint_contains_only_allowlisted_globals(demo_databin, tmp_path):
    # a checkpoint with --eval-bleu statistics (numpy arrays) and the legacy args
    from helpers import run_cli, train_args

    args = train_args(demo_databin.databin, tmp_path, max_update=2)
    # one update per epoch, so that end-of-epoch validation (with BLEU) is checkpointed
    args += [
        "--max-tokens",
        "20000",
        "--eval-bleu",
        "--eval-bleu-remove-bpe",
        "--best-checkpoint-metric",
        "bleu",
        "--maximize-best-checkpoint-metric",
    ]
    run_cli(args, cwd=tmp_path)
    found = globals_needed(tmp_path / "checkpoint_last.pt")
    allowed = {f"{g.__module__}.{g.__qualname__}" for g in FAIRSEQ_CHECKPOINT_GLOBALS}
    assert found <= allowed
    state = torch.load(tmp_path / "checkpoint_last.pt")  # default weights_only=True
    assert isinstance(state["extra_state"]["metrics"], dict)


def test_bleu_statistics_in_fairseq_metrics_state_load_with_weights_only(tmp_path):
    # what TranslationTask.reduce_metrics logs with --eval-bleu once hypotheses are non-empty
    from fairseq import checkpoint_utils
    from fairseq.logging import metrics

    with metrics.aggregate("valid") as agg:
        metrics.log_scalar("_bleu_counts", np.array([40, 20, 10, 5]))
        metrics.log_scalar("_bleu_totals", np.array([50, 45, 40, 35]))
    path = tmp_path / "metrics.pt"
    checkpoint_utils.torch_persistent_save({"extra_state": {"metrics": metrics.state_dict()}}, str(path))
    assert "numpy.ndarray" in globals_needed(path)  # the check is not vacuous
    state = torch.load(path)
    assert agg.get_smoothed_value("_bleu_counts").tolist() == [40, 20, 10, 5]
    assert "valid" in state["extra_state"]["metrics"]


def test_namespace_and_numpy_objects_load_with_weights_only(tmp_path):
    path = tmp_path / "legacy.pt"
    torch.save({"args": argparse.Namespace(arch="transformer"), "counts": np.arange(4)}, path)
    state = torch.load(path)
    assert state["args"].arch == "transformer" and state["counts"].tolist() == [0, 1, 2, 3]


class _Payload:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def test_other_classes_are_still_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"x": _Payload()}, path)
    with pytest.raises(Exception, match="weights_only|Unsupported global"):
        torch.load(path)
