"""bench/compiled.py: stock Pre-LN, a scheme eager and the scheme compiled stepped in turn in one process, and the
ratios, compile cost and pay-back read from them."""

import json

import pytest
import torch

from fairseq_residual_tools.bench import compiled, isolation
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


def test_the_three_step_in_turn_from_the_same_weights(one_torch_thread, capsys):
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
    # progress as it goes: a run stopped at a time limit shows how far it came
    progress = capsys.readouterr().err
    for name in ("stock", "eager", "compiled"):
        assert f"[bench.compiled] tiny fp32 residual: {name} warmed up, first step" in progress
    assert "[bench.compiled] tiny fp32 residual: 2 timed rounds" in progress


def test_every_row_is_written_as_it_is_measured(tmp_path, monkeypatch):
    """A run stopped after its first scheme (a time limit, a crash) keeps that scheme's row, marked incomplete."""

    def fresh_process(function, threads, **kwargs):
        if kwargs["scheme"] == "hc":
            raise RuntimeError("side_by_side of tiny failed (exit status 124)")
        return measured(0.010, 0.012, 0.008)

    monkeypatch.setattr(isolation, "in_fresh_process", fresh_process)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="exit status 124"):
        compiled.main(["--device", "cpu", "--sizes", "tiny", "--schemes", "residual", "hc", "--out", str(out)])
    record = json.loads((out / "compiled.json").read_text())
    assert record["complete"] is False
    assert [r["scheme"] for r in record["rows"]] == ["residual"]
    assert record["rows"][0]["compiled_over_eager"] == pytest.approx(1.5)
    assert "| tiny | fp32 | residual |" in (out / "compiled.md").read_text()

    compiled.main(["--device", "cpu", "--sizes", "tiny", "--schemes", "residual", "--out", str(out)])
    assert json.loads((out / "compiled.json").read_text())["complete"] is True
