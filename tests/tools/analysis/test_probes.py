"""The probes measure what the paper's theorems talk about, for every scheme, and the
theory's robust predictions hold at initialisation at depth 48."""

import json
import math
import re

import pytest
import torch
from helpers import ROOT

from fairseq_residual.schemes import SCHEMES
from fairseq_residual_tools.analysis import probes, profiles

DEPTH = 48

# tiny models, fastest on one thread; probes.main sets its --threads (1) too: restored after the module
pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def task_and_batch(demo_databin):
    task = probes.fairseq_task(demo_databin.databin)
    return task, probes.load_batch(task, "valid", sentences=16)


@pytest.fixture(scope="module")
def deep(task_and_batch):
    """Post-LN, Pre-LN and ResiDual, 48 + 48 layers of width 64, seed 1, at initialisation."""
    task, batch = task_and_batch
    return {
        s: probes.probe(probes.build_at_init(task, s, DEPTH, 64, 4, 256, seed=1), batch)
        for s in ("post", "pre", "residual")
    }


def test_post_ln_bottom_decoder_gradient_vanishes_at_depth_48_but_residual_does_not(deep):
    # Theorem 3.1: Post-LN's gradient at block k shrinks like (1/2)^((N-k)/2) below the top,
    # i.e. by about 1e-7 at k = 1, N = 48; ResiDual's dual path bounds it below by about
    # log(N-k)/N ~ 0.08 of the top block's. Measured on this batch for seeds 1-3: Post-LN
    # bottom/top 2e-5 .. 1.2e-4, ResiDual 0.14 .. 0.19, Post-LN bottom / ResiDual bottom
    # 6e-5 .. 7e-4; the thresholds below (1e-2, 0.03, 1e-2) leave 5x to 100x of margin. The encoder's
    # Post-LN gradient does not vanish at initialisation (as Liu et al. 2020 also observe),
    # so the decoder is where the theorem's decay is tested.
    post, residual = deep["post"]["decoder"]["grad_norm"], deep["residual"]["decoder"]["grad_norm"]
    assert post[0] / post[-1] < 1e-2
    assert residual[0] / residual[-1] > 0.03
    assert post[0] < 1e-2 * residual[0]


def test_pre_ln_adjacent_block_inputs_collapse_at_depth_48(deep):
    # Theorem 3.3: Pre-LN's x^ln_{k+1} - x^ln_k shrinks with k; Theorem 3.6: Post-LN's does
    # not depend on k. Measured on this batch at the top pair (k = 47), seeds 1-3: Pre-LN's
    # difference is 0.15 .. 0.26 of Post-LN's in both stacks (threshold 0.5: 2x margin).
    # Within Pre-LN's decoder the top pair differs 0.20 .. 0.25 times as much as the bottom
    # pair (threshold 0.5); Post-LN's top/bottom ratio stays near 1 (0.93 .. 1.13; threshold 0.7).
    for side in profiles.STACKS:
        assert deep["pre"][side]["rel_diff"][-1] < 0.5 * deep["post"][side]["rel_diff"][-1]
        assert deep["pre"][side]["cosine"][-1] > deep["post"][side]["cosine"][-1]
    pre, post = deep["pre"]["decoder"]["rel_diff"], deep["post"]["decoder"]["rel_diff"]
    assert pre[-1] < 0.5 * pre[0]
    assert post[-1] > 0.7 * post[0]


def test_every_registered_scheme_is_probed_with_finite_numbers(task_and_batch):
    task, batch = task_and_batch
    for scheme in SCHEMES:
        result = probes.probe(probes.build_at_init(task, scheme, 3, 16, 2, 32, seed=1), batch)
        for side in profiles.STACKS:
            assert len(result[side]["grad_norm"]) == 3 and len(result[side]["rel_diff"]) == 2, scheme
            values = result[side]["grad_norm"] + result[side]["rel_diff"] + result[side]["cosine"]
            assert all(math.isfinite(v) for v in values), scheme
            assert min(result[side]["grad_norm"]) > 0, scheme
            # adjacent inputs really differ: a probe that read the same tensor twice gives 0
            assert min(result[side]["rel_diff"]) > 1e-3, scheme


def test_block_input_is_what_the_first_sub_layer_receives(task_and_batch):
    """x^ln_k: LN(x^a_k) for Pre-LN (not the raw stream), ResiDual's x^ln input (x^d goes in beside it)."""
    task, batch = task_and_batch
    for scheme in ("pre", "residual"):
        model = probes.build_at_init(task, scheme, 3, 16, 2, 32, seed=1)
        layer = model.encoder.layers[1]
        seen = {}

        def record(m, args, kwargs, seen=seen):
            seen.setdefault("input", args[0].detach())
            seen.setdefault("stream", kwargs.get("stream"))

        handle = layer.register_forward_pre_hook(record, with_kwargs=True)
        captured = [None] * 3
        hooks = probes._capture_sublayer_inputs(model.encoder.layers, captured)
        model(**batch["net_input"])
        for h in hooks + [handle]:
            h.remove()
        layer_input = seen["input"]
        if scheme == "pre":
            expected = layer.self_attn_layer_norm(layer_input)
        else:
            assert layer_input.size(-1) == seen["stream"].size(-1) == 16  # x^ln, and x^d as the layer's stream
            expected = layer_input
        assert torch.allclose(captured[1], expected, atol=1e-6)


def test_fits_recover_the_shape_they_are_given():
    values = [0.8 / k for k in range(1, 21)]
    fit = profiles.fit_shape(values, profiles.DIVERSITY_SHAPES["c/k"])
    assert fit["c"] == pytest.approx(0.8) and fit["rms_log_residual"] < 1e-12
    assert profiles.fits({"rel_diff": values, "grad_norm": [1.0] * 21})["rel_diff_best_shape"] == "c/k"
    decay = profiles.fit_geometric_decay([3.0 * 0.7 ** (10 - k) for k in range(1, 11)])
    assert decay["r"] == pytest.approx(0.7) and decay["c"] == pytest.approx(3.0)


def test_probe_command_writes_json_and_plots(demo_databin, tmp_path):
    summary = probes.main(
        [
            "--data",
            str(demo_databin.databin),
            "--schemes",
            "post",
            "residual",
            "--depths",
            "2",
            "3",
            "--seeds",
            "1",
            "2",
            "--dim",
            "16",
            "--heads",
            "2",
            "--ffn",
            "32",
            "--sentences",
            "8",
            "--out",
            str(tmp_path),
        ]
    )
    written = json.loads((tmp_path / "probes.json").read_text())
    assert len(written["runs"]) == 2 * 2 * 2
    cell = written["summary"]["post"]["3"]["decoder"]
    assert len(cell["grad_norm"]["mean"]) == 3 and cell["grad_norm"]["std"][0] > 0  # two seeds differ
    assert cell["fits"]["rel_diff_best_shape"] in profiles.DIVERSITY_SHAPES
    assert summary["residual"]["2"]["seeds"] == [1, 2]
    for name in ("grad_norm.png", "rel_diff.png", "cosine.png", "versus_depth.png"):
        assert (tmp_path / name).stat().st_size > 10_000
    readme = (tmp_path / "README.md").read_text()
    assert re.search(r"^\| post +\|", readme, re.M) and "scripts/probe.py --data" in readme


def test_replot_redraws_committed_probes_also_in_the_layout_written_before_provenance_records(tmp_path):
    committed = json.loads((ROOT / "results" / "probes" / "probes.json").read_text())
    # the layout of probes.json until 2026-12-03: versions, machine and git at its top level, no "provenance"
    before = {k: v for k, v in committed.items() if k != "provenance"}
    before.update(versions={"torch": "2.13.0+cpu"}, machine="Linux-x, x86_64", git="2822b06", date="2026-11-30")
    (tmp_path / "probes.json").write_text(json.dumps(before))
    probes.main(["--out", str(tmp_path), "--replot"])
    readme = (tmp_path / "README.md").read_text()
    assert "Code: git commit 2822b06." in readme and "Machine: Linux-x, x86_64." in readme
    assert re.search(r"^\| dlcl +\| 2\.74 ± 0\.115 +\|", readme, re.M)  # the committed numbers, redrawn
    assert (tmp_path / "grad_norm.png").stat().st_size > 10_000
