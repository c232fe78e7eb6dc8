"""``fairseq-residual-bench --hc-memory``: Hyper-Connections' saved-for-backward bytes and persistent state over
Pre-LN at 1, 2 and 4 streams equal their formulas exactly, the step's peak is measured beside them, and the record
says how it was made."""

import dataclasses
import json

import pytest
import torch

from fairseq_residual.schemes import hyper_connections
from fairseq_residual_tools.bench import cli, stream_memory
from fairseq_residual_tools.bench.formulas import Shapes
from fairseq_residual_tools.bench.steps import SyntheticTask
from fairseq_residual_tools.bench.variants import TINY, build_variant

ARGV = ["--hc-memory", "--sizes", "tiny", "--same-process", "--threads", "1"]
#: one sentence and three layers: no strided embedding, another depth
SINGLE = dataclasses.replace(TINY, name="single", layers=3, batch=1, gen_batch=1)


@pytest.fixture(scope="module")
def written(tmp_path_factory, one_torch_thread):
    out = tmp_path_factory.mktemp("hc-memory")
    cli.main([*ARGV, "--out", str(out)])
    return json.loads((out / "hc-memory.json").read_text()), (out / "hc-memory.md").read_text()


def test_hc_saves_and_keeps_exactly_its_formulas_bytes_more_than_pre_ln_at_one_two_and_four_streams(written):
    record, _ = written
    (size,) = record["sizes"]
    assert list(size["memory"]) == ["pre", "hc-n1", "hc-n2", "hc-n4"]
    # TINY: 4 sentences of 7 source and 6 target positions, d = 16, 4 encoder and 6 decoder sub-layers
    saved = {row["n"]: row["measured"]["saved"] for row in size["rows"]}
    assert saved == {
        n: 4
        * (
            4 * (2 * 28 * n * 16 + 28 * 16 + 28 * n * (2 * n + 6))
            + 6 * (2 * 24 * n * 16 + 24 * 16 + 24 * n * (2 * n + 6))
        )
        for n in (1, 2, 4)
    }
    assert {row["n"]: row["measured"]["persistent"] for row in size["rows"]} == {1: 10600, 2: 13160, 4: 19000}
    assert all(row["minus"] == {"saved": 0, "persistent": 0} for row in size["rows"])
    assert all(row["step_peak_rise"] > 0 for row in size["rows"])


def test_the_formulas_hold_on_one_sentence_at_another_depth(one_torch_thread):
    record = stream_memory.run([SINGLE], "pytest", threads=1, fresh_process=False, log=lambda m: None)
    rows = record["sizes"][0]["rows"]
    assert [row["measured"]["saved"] for row in rows] == [21504, 38400, 76800]
    assert all(row["minus"] == {"saved": 0, "persistent": 0} for row in rows)


def test_one_tensor_more_saved_per_sublayer_shows_in_measured_minus_formula(monkeypatch, one_torch_thread):
    real = hyper_connections.HyperConnection.write

    def write_with_a_product(out, streams, coefficients):  # out * ones saves a ones tensor of r x d
        return real(out * torch.ones_like(out), streams, coefficients)

    monkeypatch.setattr(hyper_connections.HyperConnection, "write", staticmethod(write_with_a_product))
    record = stream_memory.run([TINY], "pytest", threads=1, fresh_process=False, log=lambda m: None)
    # one r x d tensor per sub-layer: 4 encoder sub-layers of 28 rows, 6 decoder sub-layers of 24, d = 16
    assert [row["minus"]["saved"] for row in record["sizes"][0]["rows"]] == [4 * 16 * (4 * 28 + 6 * 24)] * 3


def test_a_variant_with_streams_builds_hc_with_that_many():
    task = SyntheticTask(TINY.vocab)
    model = build_variant(stream_memory.memory_variants((2,))[1], TINY, task)
    assert model.encoder.layer_norm.streams == model.decoder.layer_norm.streams == 2


def test_hc_memory_md_holds_the_command_each_stream_count_and_the_growth_in_n(written):
    record, text = written
    assert text == stream_memory.markdown(record)
    assert record["command"].startswith("fairseq-residual-bench --hc-memory --sizes tiny")
    assert record["versions"]["torch"] == torch.__version__ in text
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| hc-")]
    assert [(r[0], r[2], r[4]) for r in rows] == [
        ("hc-n1", "+57,344", "+0"),
        ("hc-n2", "+102,400", "+0"),
        ("hc-n4", "+204,800", "+0"),
    ]
    # a = 4 (4 (2 x 28 x 16 + 6 x 28) + 6 (2 x 24 x 16 + 6 x 24)), b = 4 (4 x 2 x 28 + 6 x 2 x 24),
    # c = 4 (4 x 28 x 16 + 6 x 24 x 16)
    assert "saved(n) − saved(Pre-LN) = 38,912 n + 2,048 n² + 16,384 bytes" in text
    assert stream_memory.saved_formula(Shapes.of(TINY), 4) == 38912 * 4 + 2048 * 16 + 16384


def test_hc_memory_refuses_counts_only_and_schemes(capsys):
    for extra in (["--counts-only"], ["--schemes", "pre"]):
        with pytest.raises(SystemExit):
            cli.parse_args(["--hc-memory", *extra])
        assert "leave out --counts-only and --schemes" in capsys.readouterr().err
