"""`make demo`: its settings file, its reading of the numbers, and a reduced run end to end."""

import json

import pytest

from fairseq_residual_tools.demo import run
from fairseq_residual_tools.demo.report import reading
from fairseq_residual_tools.demo.run import DEFAULT_CONFIG, load_settings
from fairseq_residual_tools.errors import ConfigError

# A reduced demo: a small lexicon (each word seen often), an E1D1 model that learns it in
# 200 updates, and an E2D2 setting of a few updates; every scheme. Measured: see TINY_BLEU_FLOOR.
TINY = [
    "corpus.train=1000",
    "corpus.valid=40",
    "corpus.test=40",
    "corpus.nouns=12",
    "corpus.adjectives=4",
    "corpus.verbs=6",
    "corpus.adverbs=2",
    "corpus.bpe_merges=150",
    "depths=[{layers: 1, dim: 32, lr: 0.005, warmup: 30, max_tokens: 1024, max_update: 200, validate_every: 100},"
    " {layers: 2, dim: 16, lr: 0.002, warmup: 5, max_tokens: 1024, max_update: 10, validate_every: 10}]",
]
#: measured when this test was written: E1D1 test BLEU 11.6 (Post-LN), 8.0 (Pre-LN), 7.0 (ResiDual);
#: an untrained model scores below 1 (the E2D2 runs of 10 updates: 0.0-0.1)
TINY_BLEU_FLOOR = 5.0


def test_the_config_file_is_the_demos_settings_and_set_overrides_one_value():
    settings = load_settings(DEFAULT_CONFIG)
    assert settings["schemes"] == ["post", "pre", "residual"]
    assert min(d["layers"] for d in settings["depths"]) < 12 <= max(d["layers"] for d in settings["depths"])
    changed = load_settings(DEFAULT_CONFIG, ["corpus.train=300", "schemes=[pre]", "depths.1.max_update=7"])
    assert changed["corpus"]["train"] == 300 and changed["schemes"] == ["pre"]
    assert changed["depths"][1]["max_update"] == 7 and changed["depths"][0] == settings["depths"][0]
    assert changed["corpus"]["test"] == settings["corpus"]["test"]


@pytest.mark.parametrize("override", ["corpus.trian=3", "corpus", "nothing.train=3", "depths.5.lr=1", "seed.x=1"])
def test_a_wrong_override_names_the_problem(override):
    with pytest.raises(ConfigError, match="--set"):
        load_settings(DEFAULT_CONFIG, [override])


def row(scheme, layers, bleu, fails=None):
    return dict(scheme=scheme, layers=layers, bleu=bleu, fails=fails)


def test_the_reading_states_which_scheme_failed_at_which_depth():
    rows = [
        row("post", 3, 31.0),
        row("residual", 3, 35.5),
        row("post", 12, 0.2, "stuck on a plateau"),
        row("residual", 12, 20.0),
    ]
    assert reading(rows) == (
        "Measured: at E3D3 every scheme trained (test BLEU Post-LN 31.0 and ResiDual 35.5); "
        "at E12D12 Post-LN failed by the rule while ResiDual trained (test BLEU ResiDual 20.0)."
    )


def test_the_reading_says_so_when_the_deep_setting_does_not_show_the_papers_point():
    rows = [row("post", 12, 10.0), row("residual", 12, 12.0)]
    assert reading(rows).endswith("so this run does not show Post-LN failing where ResiDual trains.")


@pytest.mark.slow
def test_a_reduced_demo_translates_reports_every_scheme_and_depth_and_reuses_its_trainings(tmp_path, capsys):
    argv = ["--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")] + [a for o in TINY for a in ("--set", o)]
    run.main(argv)
    first = capsys.readouterr().out
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    rows = report["rows"]
    assert [(r["scheme"], r["layers"]) for r in rows] == [(s, d) for d in (1, 2) for s in ("post", "pre", "residual")]
    assert max(r["bleu"] for r in rows if r["layers"] == 1) > TINY_BLEU_FLOOR
    for r in rows:
        assert f"| E{r['layers']}D{r['layers']} " in first and r["bleu_signature"].startswith("nrefs:1|case:mixed")
        assert len(r["samples"]) == 5 and r["train_curve"][-1][0] == r["depth"]["max_update"]
    assert "[post E1D1] update 200/200  loss" in first  # progress lines while it trains
    assert first.count("1. source: ") == 1 and "Measured: at E1D1" in first
    assert (tmp_path / "out" / "curves.png").stat().st_size > 5000

    run.main(argv)  # a second run reuses every training and prints the same table
    second = capsys.readouterr().out
    assert second.count("reused: finished training") == 6 and "] update " not in second
    assert (
        second[second.index("| depth") :].split("\nwritten to")[0]
        == first[first.index("| depth") :].split("\nwritten to")[0]
    )


def test_a_setting_without_warmup_is_named_so():
    depth = dict(layers=12, lr=0.002, warmup_init_lr=0.002)
    rows = [dict(row("post", 12, 0.1, "stuck on a plateau"), depth=depth), dict(row("residual", 12, 9.0), depth=depth)]
    assert reading(rows).startswith("Measured: at E12D12 without warmup Post-LN failed by the rule while ResiDual")


def test_the_reading_says_so_when_every_scheme_fails_at_a_depth():
    rows = [row("post", 12, 0.0, "stuck on a plateau"), row("residual", 12, 0.1, "no progress")]
    assert reading(rows) == (
        "Measured: at E12D12 every scheme failed by the rule, so this run does not show Post-LN failing where "
        "ResiDual trains."
    )
