"""bench.fused_loss: the stock and the fused criterion stepping side by side on one model's copies."""

import pytest

from fairseq_residual_tools.bench.fused_loss import counted, markdown, outcome, parse_args, row_of, side_by_side
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


def test_the_record_says_which_kernel_ran_and_its_one_line_outcome_spans_the_rows():
    measured = side_by_side(TINY, "pre", "fp32", 1, 1, None, 0.0, False, 0, device="cpu", kernel="auto")
    assert measured["fused"]["kernel"] == "torch"  # auto on the CPU: always the torch path
    rows = [row_of(TINY, "fp32", "pre", measured, 0), row_of(TINY, "fp32", "pre", measured, 0)]
    rows[1] = dict(rows[1], speed_ratio=1.5, peak_saved_mb=9.0)
    line = outcome({"rows": rows})
    assert line.startswith(f"fused x stock {min(rows[0]['speed_ratio'], 1.5):.2f} to ") and "over 2 row(s)" in line
    assert "kernel torch" in line and outcome({"rows": []}) == "no row measured"
    first = markdown({"rows": rows, "threads": 1}).splitlines()[0]
    assert first == "On the CPU, 1 thread(s); the fused criterion's kernel: torch."


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--precisions", "fp16"], "--precisions fp16: on a GPU only (--device cuda)"),
        (["--device", "cuda"], "--device cuda: torch sees no CUDA device here"),
    ],
)
def test_a_gpu_only_request_on_the_cpu_is_refused_in_one_line(argv, message, capsys, tmp_path):
    import torch

    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has a GPU: nothing to refuse")
    with pytest.raises(SystemExit) as exit_info:
        parse_args([*argv, "--out", str(tmp_path)])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
