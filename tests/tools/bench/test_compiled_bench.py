"""bench/compiled.py: stock Pre-LN, a scheme eager and the scheme compiled stepped in turn in one process, and the
ratios, compile cost and pay-back read from them."""

import pytest
import torch

from fairseq_residual_tools.bench import compiled
from fairseq_residual_tools.bench.variants import TINY


def measured(stock_s, eager_s, compiled_s, eager_first=0.5, compiled_first=60.5):
    return {
        "stock": {"step_s": stock_s, "first_step_s": 0.4, "peak_mb": 1.0},
        "eager": {"step_s": eager_s, "first_step_s": eager_first, "peak_mb": 1.0},
        "compiled": {"step_s": compiled_s, "first_step_s": compiled_first, "peak_mb": 0.9},
    }


def test_ratios_compile_cost_and_the_updates_that_pay_it_back():
    row = compiled.row_of(TINY, "fp32", "residual", measured(0.010, 0.012, 0.008))
    assert row["tokens_per_step"] == TINY.batch * TINY.tgt_len == 24
    assert row["tokens_per_s"]["compiled"] == pytest.approx(24 / 0.008)
    assert row["eager_over_stock"] == pytest.approx(0.010 / 0.012)
    assert row["compiled_over_stock"] == pytest.approx(1.25)
    assert row["compiled_over_eager"] == pytest.approx(1.5)
    assert row["compile_s"] == pytest.approx(60.0)  # the compiled first step beyond the eager first step
    assert row["break_even_updates"] == pytest.approx(60.0 / 0.004)
    slower = compiled.row_of(TINY, "fp32", "residual", measured(0.010, 0.012, 0.020))
    assert slower["break_even_updates"] is None
    table = compiled.markdown({"rows": [row, slower]})
    assert "| tiny | fp32 | residual | 2400 / 2000 / 3000 | 0.83 | 1.25 | 1.50 | 60 | 15000 updates |" in table
    assert "| never |" in table.splitlines()[-1]


def test_the_three_step_in_turn_from_the_same_weights(one_torch_thread):
    torch._dynamo.reset()
    result = compiled.side_by_side(
        TINY,
        "residual",
        "cpu",
        "fp32",
        "aot_eager",
        None,
        steps=2,
        warmup=1,
        dropout=0.0,
        min_seconds=0,
        warm_cache=True,
    )
    torch._dynamo.reset()
    assert set(result) == {"stock", "eager", "compiled"}
    assert all(r["timed_steps"] == 2 for r in result.values())
    # the compiled model starts from the eager one's weights, on the same batch: the same losses (aot_eager, no dropout)
    assert result["compiled"]["losses"] == result["eager"]["losses"]
    assert result["eager"]["losses"][0] != result["stock"]["losses"][0]  # another model
    assert all(r["peak_mb"] > 0 for r in result.values())
