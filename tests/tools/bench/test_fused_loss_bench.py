"""bench.fused_loss: the stock and the fused criterion stepping side by side on one model's copies."""

import pytest

from fairseq_residual_tools.bench.fused_loss import counted, markdown, row_of, side_by_side
from fairseq_residual_tools.bench.variants import CPU_STUDY, SIZES, TINY

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_both_criteria_step_the_same_model_to_the_same_losses_and_each_gets_its_memory():
    measured = side_by_side(TINY, "residual", "fp32", 2, 1, None, 0.0, True, 0)
    stock, fused = measured["stock"], measured["fused"]
    assert stock["timed_steps"] == fused["timed_steps"] == 2
    assert fused["losses"] == pytest.approx(stock["losses"], rel=1e-5)  # the same weights, batches and dropout masks
    assert stock["losses"][0] != stock["losses"][-1]  # Adam stepped
    assert stock["peak_mb"] > 0 and fused["peak_mb"] > 0
    assert len(stock["kernels"]) == len(fused["kernels"]) == 12 and stock["kernels"][0]["ms_per_step"] > 0
    row = row_of(TINY, "fp32", "residual", measured, 0)
    assert row["speed_ratio"] == stock["step_s"] / fused["step_s"]
    assert "| tiny | fp32 | residual |" in markdown({"rows": [row]})


def test_the_logits_the_fused_criterion_does_not_write_are_counted_from_the_shapes():
    study = counted(CPU_STUDY, "fp32", 0)
    assert (study["tokens"], study["vocab"], study["chunk_rows"]) == (4096, 7840, 64)
    assert study["log_probs_mb"] == study["logits_mb"] == 4096 * 7840 * 4 / 2**20  # 122.5 MiB
    assert study["chunk_logits_mb"] == 64 * 7840 * 4 / 2**20
    wmt = counted(SIZES["wmt-e6d6"], "bf16", 0)
    assert wmt["chunk_rows"] == 256 and wmt["logits_mb"] == wmt["log_probs_mb"] / 2  # bfloat16 logits
