"""`make demo`: its settings file, its reading of the numbers, a reduced run end to end that leaves the tree as it
found it, and the committed results: of today's code, and the table docs/results.md shows (the README shows the
Bible study's)."""

import json
import subprocess

import pytest
from helpers import ROOT

from fairseq_residual_tools.analysis.bible_report import README_BLOCK as BIBLE_BLOCK
from fairseq_residual_tools.demo import run
from fairseq_residual_tools.demo.report import BLOCK_START, published, published_block, reading
from fairseq_residual_tools.demo.run import DEFAULT_CONFIG, DEMO_CODE, PAGES, RESULTS, load_settings
from fairseq_residual_tools.errors import ConfigError
from fairseq_residual_tools.provenance import code_sha256

REDO = "run `make demo-results` (python -m fairseq_residual_tools.demo.run --update-results) and commit what it writes"

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


def test_a_training_is_found_by_its_settings_and_the_code_that_made_it():
    settings, scheme = load_settings(DEFAULT_CONFIG), "residual"
    depth = settings["depths"][0]
    name = run.run_name(settings, scheme, depth, "code-a")
    assert name.startswith("residual-e3d3-") and name == run.run_name(settings, scheme, depth, "code-a")
    assert run.run_name(settings, scheme, depth, "code-b") != name  # a plugin change: never reused
    assert run.run_name(settings, scheme, {**depth, "lr": 0.001}, "code-a") != name


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


def tree_state():
    """git's status of the checkout, and the bytes of the committed results and the pages showing them."""
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = sorted(p for p in RESULTS.rglob("*") if p.is_file()) + list(PAGES)
    return status.stdout, {str(p): p.read_bytes() for p in files}


@pytest.mark.slow
def test_a_reduced_demo_translates_reports_every_scheme_and_depth_and_reuses_its_trainings(tmp_path, capsys):
    argv = ["--work", str(tmp_path / "work")] + [a for o in TINY for a in ("--set", o)]
    before = tree_state()
    run.main(argv)
    first = capsys.readouterr().out
    assert tree_state() == before  # the report goes to WORK/report, not into the committed results
    report = json.loads((tmp_path / "work" / "report" / "results.json").read_text())
    assert report["code"] == {"paths": list(DEMO_CODE), "sha256": code_sha256(DEMO_CODE)}
    rows = report["rows"]
    assert [(r["scheme"], r["layers"]) for r in rows] == [(s, d) for d in (1, 2) for s in ("post", "pre", "residual")]
    assert max(r["bleu"] for r in rows if r["layers"] == 1) > TINY_BLEU_FLOOR
    for r in rows:
        assert f"| E{r['layers']}D{r['layers']} " in first and r["bleu_signature"].startswith("nrefs:1|case:mixed")
        assert len(r["samples"]) == 5 and r["train_curve"][-1][0] == r["depth"]["max_update"]
    assert "[post E1D1] update 200/200  loss" in first  # progress lines while it trains
    assert first.count("1. source: ") == 1 and "Measured: at E1D1" in first
    assert (tmp_path / "work" / "report" / "curves.png").stat().st_size > 5000

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


def test_the_committed_demo_results_are_of_todays_plugin_demo_and_settings():
    """Fails after any change to fairseq_residual/, the demo's code or configs/demo.yaml until the demo is run again
    with --update-results: the sha256 of those files recorded in results.json must be today's."""
    results = json.loads((RESULTS / "results.json").read_text())
    code = results.get("code", {})
    assert code.get("paths") == list(DEMO_CODE), f"results/demo/results.json names no code sha256: {REDO}"
    assert code.get("sha256") == code_sha256(DEMO_CODE), f"results/demo/ is of other code than today's: {REDO}"
    assert results["settings"] == load_settings(DEFAULT_CONFIG) and "--update-results" in results["command"]


def test_docs_results_shows_the_committed_demo_table_and_the_readme_the_bible_studys():
    results = json.loads((RESULTS / "results.json").read_text())
    header = published_block(results).splitlines()[0]
    for page in PAGES:
        assert published(page) == published_block(results), f"{page.name} shows another table: {REDO}"
        # once, inside the block (an edit once pasted a stale copy into the README's first sentence)
        assert page.read_text().count(header) == 1, f"{page.name} shows the demo's table outside its block"
    readme = (ROOT / "README.md").read_text()  # the headline table is evidence on real text; the demo is a check
    assert BLOCK_START not in readme and BIBLE_BLOCK[0] in readme and "(docs/results.md#the-demo)" in readme


def test_updating_the_committed_results_takes_the_default_settings_only(tmp_path):
    for extra in (["--set", "corpus.train=300"], ["--out", str(tmp_path)], ["--config", str(tmp_path / "x.yaml")]):
        with pytest.raises(ConfigError, match="--update-results writes the committed results of the default"):
            run.main(["--update-results", "--work", str(tmp_path), *extra])
