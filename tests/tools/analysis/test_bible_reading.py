"""The Bible study's computed reading: who ends best, whether ResiDual's early gap to Pre-LN closes, what the output
scale does to the end point, who failed; and the comparisons it reads (best against second where no baseline pairs
them)."""

from fairseq_residual_tools.analysis import bible_reading, bible_report


def run(scheme, at_1000, best, bleu, end=6000, fails=None, seed=1, warmup=True, layers=6):
    curve = [[500, at_1000 + 1.0], [1000, at_1000], [end, best]]
    named = f"{scheme}-e{layers}d{layers}-{'warmup' if warmup else 'nowarmup'}-seed{seed}"
    where = dict(scheme=scheme, layers=layers, warmup=warmup, seed=seed, name=named, key="k")
    return dict(where, valid_curve=curve, best_valid_loss=best, end_update=end, bleu=bleu, fails=fails)


def test_residuals_early_gap_closes_narrows_or_stays_by_the_difference_of_the_best_losses():
    pre = run("pre", 6.0, 4.56, 32.45)
    closes = bible_reading.early_gap(run("residual", 6.2, 4.50, 33.0), pre)
    assert closes == "validation loss +0.200 at update 1,000, -0.060 at the best: the early gap closes"
    narrows = bible_reading.early_gap(run("residual", 6.2, 4.60, 32.0), pre)
    assert narrows.endswith("+0.040 at the best: the early gap narrows but does not close")
    stays = bible_reading.early_gap(run("residual", 6.02, 4.60, 32.0), pre)
    assert stays.endswith("+0.020 at update 1,000, +0.040 at the best: the early gap does not narrow")
    ahead = bible_reading.early_gap(run("residual", 5.9, 4.60, 32.0), pre)
    assert ahead.endswith("ResiDual is not behind at update 1,000")


def test_a_bleu_difference_is_told_apart_only_where_holms_p_is_below_005():
    told = dict(delta=0.81, p=0.004, p_holm=0.04)
    assert bible_reading.bleu_difference(told) == "sacreBLEU +0.81 (Holm p = 0.040: told apart)"
    noise = dict(delta=-0.3, p=0.01, p_holm=0.2)
    assert bible_reading.bleu_difference(noise) == "sacreBLEU -0.30 (Holm p = 0.200: within the test set's noise)"
    assert bible_reading.bleu_difference(dict(delta=0.0, p=None)) == "the same sacreBLEU"
    assert bible_reading.bleu_difference(None) == "BLEU not compared"


def test_residual_is_tested_against_both_of_the_papers_baselines_post_ln_and_pre_ln(tmp_path):
    references = ["the lord is my shepherd ; i shall not want .", "in the beginning was the word .", "jesus wept ."]
    runs = [run("post", 6.0, 4.4, 100.0), run("pre", 6.0, 4.6, 100.0), run("residual", 6.0, 4.5, 100.0)]
    (tmp_path / bible_report.REFERENCES).write_text("\n".join(references) + "\n")
    (tmp_path / bible_report.CHAPTERS).write_text("Psalms 23\nJohn 1\nJohn 11\n")
    for r in runs:
        bible_report.hypotheses_file(tmp_path, r).write_text("\n".join(references) + "\n")
    rows, _ = bible_report.comparisons(runs, tmp_path)
    assert [(c["scheme"], c["against"]) for c in rows] == [("post", "pre"), ("residual", "pre"), ("residual", "post")]


def test_a_cells_reading_ranks_its_runs_and_answers_the_issues_questions():
    runs = [
        run("post", 6.1, 4.60, 31.0, fails="a training loss above 2x the best before it"),
        run("pre", 6.0, 4.56, 32.45),
        run("residual", 6.2, 4.50, 33.0, end=6500),
        run("residual:scale=0.5", 6.0, 4.52, 32.9, end=5750),
        run("siamese", 5.9, 4.49, 32.7, end=7000),
        run("attn-res", 5.8, 4.70, None, fails="NaN/inf loss"),
    ]
    cell = dict(layers=6, warmup=True, seed=1)
    compared = [
        dict(cell, scheme="residual", against="pre", delta=0.5, p=0.03, p_holm=0.03),
        dict(cell, scheme="residual:scale=0.5", against="residual", delta=-0.1, p=0.6, p_holm=0.6),
        dict(cell, scheme="siamese", against="residual", delta=-0.3, p=0.2, p_holm=0.2),
    ]
    text = bible_reading.reading(runs, compared)
    assert text.startswith(
        "**E6D6 with warmup, seed 1** (6 finished): BLEU, best first: ResiDual 33.00, ResiDual with output scale 0.5 "
        "32.90, SiameseNorm 32.70, Pre-LN 32.45. Failed by the rule: Post-LN (a training loss above 2x the best "
        "before it); Attention Residuals (NaN/inf loss)."
    )
    # the designs after ResiDual against it, as its option is; one that failed is not compared
    assert (
        "SiameseNorm against ResiDual: best validation loss -0.010, ended at update 7,000 against 6,500; "
        "sacreBLEU -0.30 (Holm p = 0.200: within the test set's noise)." in text
    )
    assert "Attention Residuals against ResiDual" not in text
    # best and second were tested the other way round (the output scale against its baseline): the sign turns
    assert "ResiDual against ResiDual with output scale 0.5: sacreBLEU +0.10 (Holm p = 0.600" in text
    assert (
        "ResiDual against Pre-LN: validation loss +0.200 at update 1,000, -0.060 at the best: the early gap closes;"
        in (text)
    )
    assert "sacreBLEU +0.50 (Holm p = 0.030: told apart)." in text
    assert (
        "Output scale 0.5 against ResiDual: best validation loss +0.020, ended at update 5,750 against 6,500; "
        "sacreBLEU -0.10 (Holm p = 0.600: within the test set's noise)." in text
    )
    assert bible_reading.reading([], []) == "No run has finished yet."


def test_each_cell_is_read_apart_in_the_order_its_runs_finished():
    runs = [run("pre", 6.0, 4.56, 32.45, seed=2), run("pre", 6.0, 4.58, 32.1), run("post", 6.1, 4.5, 33.2, seed=2)]
    cells = bible_reading.reading(runs, []).split("\n\n")
    assert [c.split("**")[1] for c in cells][:2] == ["E6D6 with warmup, seed 2", "E6D6 with warmup, seed 1"]
    assert cells[2].startswith("**Over seeds, E6D6 with warmup** (seeds 1 and 2)")  # then the cells over seeds
    assert "Post-LN 33.20, Pre-LN 32.45" in cells[0] and "BLEU not compared" not in cells[0]  # no test: no line
    assert cells[1].endswith("BLEU, best first: Pre-LN 32.10.")


def test_the_best_run_of_a_cell_is_tested_against_its_second_where_no_baseline_pairs_them(tmp_path):
    references = ["the lord is my shepherd ; i shall not want .", "in the beginning was the word .", "jesus wept ."]
    said = {
        "deepnet": references,
        "residual": ["the lord is my shepherd ; i shall not want .", "in the beginning was a word .", "jesus wept"],
        "pre": ["the lord is a shepherd .", "in the start was the word .", "jesus cried ."],
    }
    runs = [run("deepnet", 6.0, 4.4, 100.0), run("pre", 6.0, 4.6, 20.0), run("residual", 6.0, 4.5, 60.0)]
    (tmp_path / bible_report.REFERENCES).write_text("\n".join(references) + "\n")
    (tmp_path / bible_report.CHAPTERS).write_text("".join(f"Psalms {i}\n" for i in range(len(references))))
    for r in runs:
        bible_report.hypotheses_file(tmp_path, r).write_text("\n".join(said[r["scheme"]]) + "\n")
    rows, signature = bible_report.comparisons(runs, tmp_path)
    # Pre-LN is every run's baseline; DeepNet (best) against ResiDual (second) is added: no baseline pairs them
    assert [(c["scheme"], c["against"]) for c in rows] == [
        ("deepnet", "pre"),
        ("residual", "pre"),
        ("deepnet", "residual"),
    ]
    assert rows[2]["against_sacrebleu"] == rows[1]["sacrebleu"] and rows[2]["delta"] > 0
    assert signature.startswith(
        "two-sided paired bootstrap of the BLEU difference, 10,000 resamples of the test set's 3 chapters"
    )


def test_runs_that_end_at_different_updates_are_also_compared_where_the_first_of_them_ended():
    pre = run("pre", 6.0, 4.56, 32.45)  # ended at 6,000 by the rule
    post = run("post", 6.4, 4.45, 33.0, end=7000)
    post["valid_curve"][2:2] = [[5500, 4.60], [6000, 4.52], [6500, 4.48]]
    residual = run("residual", 6.2, 4.49, 32.9, end=7250)
    residual["valid_curve"][2:2] = [[6000, 4.59], [6250, 4.55]]  # its best by 6,000 is 4.59, logged at 6,000
    line = bible_reading.at_equal_updates([post, residual, pre])
    assert line == (
        "At update 6,000, where Pre-LN ended, the best validation loss so far, lowest first: Post-LN 4.520, "
        "Pre-LN 4.560, ResiDual 4.590"
    )
    text = bible_reading.reading([pre, post, residual], [])
    assert line + "." in text
    assert bible_reading.at_equal_updates([pre, run("post", 6.4, 4.45, 33.0)]) is None  # same end: nothing to add


def test_each_run_without_warmup_is_tested_against_its_scheme_with_warmup_of_the_same_depth_and_seed(tmp_path):
    references = ["the lord is my shepherd ; i shall not want .", "in the beginning was the word .", "jesus wept ."]
    worse = ["the lord is a shepherd .", "in the start was the word .", "jesus cried ."]
    runs = [
        run("pre", 6.0, 4.56, 100.0),
        run("residual", 6.2, 4.50, 100.0),
        run("post", 9.0, 8.9, None, fails="a plateau", warmup=False),  # failed: not decoded, not tested
        run("pre", 6.5, 4.70, 20.0, warmup=False),
        run("residual", 6.1, 4.52, 100.0, warmup=False),
        run("pre", 6.0, 4.56, 100.0, seed=2, warmup=False),  # no run with warmup at seed 2 yet: nothing to test
    ]
    (tmp_path / bible_report.REFERENCES).write_text("\n".join(references) + "\n")
    (tmp_path / bible_report.CHAPTERS).write_text("".join(f"Psalms {i}\n" for i in range(len(references))))
    for r in runs:
        if not r["fails"]:
            said = worse if r["bleu"] < 50 else references
            bible_report.hypotheses_file(tmp_path, r).write_text("\n".join(said) + "\n")
    rows, _ = bible_report.comparisons(runs, tmp_path)
    ablation = [(c["scheme"], c["against"], c["seed"]) for c in rows if c["against_warmup"] != c["warmup"]]
    assert ablation == [("pre", "pre", 1), ("residual", "residual", 1)]
    pre = next(c for c in rows if (c["scheme"], c["against"], c["warmup"]) == ("pre", "pre", False))
    assert pre["against_sacrebleu"] == 100.0 and pre["delta"] < -50
    table = bible_report.significance_table(rows, "sig")
    cells = [[cell.strip() for cell in line.split("|")[1:6]] for line in table.splitlines()]
    assert ["E6D6", "no", "1", "pre", "pre with warmup"] in cells


def test_the_warmup_reading_says_who_fails_without_warmup_and_what_the_others_lose():
    runs = [
        run("post", 6.5, 4.45, 33.79, end=8500),
        run("pre", 6.0, 4.56, 32.45),
        run("residual", 6.2, 4.48, 33.49, end=8750),
        run("hc", 6.0, 4.52, None, fails="NaN/inf loss"),
        run("post", 9.0, 8.9, None, fails="a plateau", warmup=False),
        run("pre", 6.5, 4.70, 30.0, end=7000, warmup=False),
        run("residual", 6.1, 4.47, 33.2, end=8250, warmup=False),
        run("hc", 6.0, 4.52, 32.0, warmup=False),
    ]
    cold = dict(layers=6, warmup=False, seed=1, against_warmup=True)
    compared = [
        dict(cold, scheme="pre", against="pre", delta=-2.2, p=0.001, p_holm=0.001),
        dict(cold, scheme="residual", against="residual", delta=-0.2, p=0.3, p_holm=0.3),
    ]
    text = bible_reading.reading(runs, compared)
    paragraph = text.split("\n\n")[-1]
    assert paragraph == (
        "**Without warmup against with it, E6D6, seed 1**: Post-LN fails without warmup (a plateau), not with it "
        "(BLEU 33.79); Pre-LN BLEU 32.45 with warmup, 30.00 without, best validation loss 4.560 and 4.700, ended "
        "at update 6,000 and 7,000: sacreBLEU -2.20 (Holm p = 0.001: told apart); ResiDual BLEU 33.49 with warmup, "
        "33.20 without, best validation loss 4.480 and 4.470, ended at update 8,750 and 8,250: sacreBLEU -0.20 "
        "(Holm p = 0.300: within the test set's noise); HC fails with warmup (NaN/inf loss), not without it "
        "(BLEU 32.00)."
    )
    # the cell without warmup is read as any other; the ablation's rows are not its best-against-second test
    assert (
        "**E6D6 without warmup, seed 1** (4 finished): BLEU, best first: ResiDual 33.20, HC 32.00, Pre-LN 30.00" in text
    )
    both = [
        run("post", 9.0, 8.9, None, fails="a plateau"),
        run("post", 9.0, 8.8, None, fails="NaN/inf loss", warmup=False),
    ]
    assert bible_reading.reading(both, []).endswith(
        "**Without warmup against with it, E6D6, seed 1**: Post-LN fails with warmup (a plateau) and without it "
        "(NaN/inf loss)."
    )
    assert "Without warmup" not in bible_reading.reading(runs[:4], [])


def test_over_seeds_the_reading_gives_each_schemes_spread_whether_the_order_holds_and_residual_against_pre_ln():
    runs = [
        run("post", 6.5, 4.45, 33.79),
        run("pre", 6.0, 4.56, 32.45),
        run("residual", 6.2, 4.48, 33.49),
        run("post", 6.5, 4.50, 33.01, seed=2),
        run("pre", 6.0, 4.55, 32.81, seed=2),
        run("residual", 6.2, 4.47, 33.61, seed=2),
        run("hc", 6.0, 4.52, 32.30),  # one seed so far
        run("pre", 6.5, 4.70, 30.0, warmup=False),  # without warmup: one seed, no paragraph of its own
    ]
    cell = dict(layers=6, warmup=True, against="pre", against_warmup=True, scheme="residual")
    compared = [
        dict(cell, seed=1, delta=1.11, p=0.001, p_holm=0.001),
        dict(cell, seed=2, delta=0.6, p=0.07, p_holm=0.07),
    ]
    paragraphs = bible_reading.reading(runs, compared).split("\n\n")
    over = [p for p in paragraphs if p.startswith("**Over seeds")]
    assert over == [
        "**Over seeds, E6D6 with warmup** (seeds 1 and 2): BLEU, mean ± half-range: Post-LN 33.40 ± 0.39 (2 seeds), "
        "Pre-LN 32.63 ± 0.18 (2 seeds), ResiDual 33.55 ± 0.06 (2 seeds), HC 32.30 (1 seed). The order by BLEU differs "
        "between seeds: seed 1: Post-LN, ResiDual, Pre-LN; seed 2: ResiDual, Post-LN, Pre-LN. ResiDual against "
        "Pre-LN: at seed 1 sacreBLEU +1.11 (Holm p = 0.001: told apart), at seed 2 sacreBLEU +0.60 (Holm p = 0.070: "
        "within the test set's noise): not told apart from Pre-LN at every seed."
    ]
    compared[1] = dict(compared[1], p_holm=0.01)  # told apart at both seeds, the same way
    both = [p for p in bible_reading.reading(runs, compared).split("\n\n") if p.startswith("**Over seeds")][0]
    assert both.endswith("(Holm p = 0.010: told apart): above Pre-LN at every seed.")
    runs[3]["bleu"] = 33.9  # Post-LN ahead at seed 2 too
    same = [p for p in bible_reading.reading(runs, []).split("\n\n") if p.startswith("**Over seeds")][0]
    assert "The order by BLEU is the same at every seed: Post-LN, ResiDual, Pre-LN." in same
    assert "ResiDual against Pre-LN" not in same  # not tested: nothing said
    runs[3].update(bleu=None, fails="a plateau")
    failed = [p for p in bible_reading.reading(runs, []).split("\n\n") if p.startswith("**Over seeds")][0]
    assert "Post-LN 33.79 (1/2 fail), Pre-LN" in failed and "the same at every seed: ResiDual, Pre-LN." in failed


def test_each_deeper_run_is_tested_against_its_scheme_at_the_depth_below_and_the_reading_says_who_fails_only_there(
    tmp_path,
):
    references = ["the lord is my shepherd ; i shall not want .", "in the beginning was the word .", "jesus wept ."]
    worse = ["the lord is a shepherd .", "in the start was the word .", "jesus cried ."]
    runs = [
        run("post", 6.5, 4.45, 33.79, end=8500),
        run("pre", 6.0, 4.56, 20.0),
        run("residual", 6.2, 4.48, 100.0, end=8750),
        run("post", 9.0, 8.9, None, fails="no progress", layers=12),  # fails only at depth: not decoded, not tested
        run("pre", 6.1, 4.50, 100.0, end=7000, layers=12),
        run("residual", 6.3, 4.47, 100.0, end=9000, layers=12),
        run("hc", 6.0, 4.40, 100.0, layers=12),  # no hc at E6D6 yet: nothing to test it against
    ]
    (tmp_path / bible_report.REFERENCES).write_text("\n".join(references) + "\n")
    (tmp_path / bible_report.CHAPTERS).write_text("".join(f"Psalms {i}\n" for i in range(len(references))))
    for r in runs:
        if not r["fails"]:
            bible_report.hypotheses_file(tmp_path, r).write_text(
                "\n".join(worse if r["bleu"] < 50 else references) + "\n"
            )
    rows, _ = bible_report.comparisons(runs, tmp_path)
    deeper = [(c["scheme"], c["layers"], c["against_layers"]) for c in rows if "against_layers" in c]
    assert deeper == [("pre", 12, 6), ("residual", 12, 6)]
    pre = next(c for c in rows if c.get("against_layers") and c["scheme"] == "pre")
    assert (pre["against"], pre["against_warmup"], pre["sacrebleu"]) == ("pre", True, 100.0)
    assert pre["against_sacrebleu"] < 50 and pre["delta"] > 50  # against Pre-LN's worse translations at E6D6
    table = bible_report.significance_table(rows, "s")
    cells = [[cell.strip() for cell in line.split("|")[1:6]] for line in table.splitlines()]
    assert ["E12D12", "yes", "1", "pre", "pre at E6D6"] in cells

    *_, paragraph, order = bible_reading.reading(runs, rows).split("\n\n")
    assert order.startswith("**The order at E6D6 against E12D12, with warmup, seed 1** (by BLEU, best first; failed")
    assert paragraph.startswith(
        "**E12D12 against E6D6, with warmup, seed 1**: Post-LN fails at E12D12 (no progress), not at E6D6 "
        "(BLEU 33.79); Pre-LN BLEU 20.00 at E6D6, 100.00 at E12D12, best validation loss 4.560 and 4.500, ended "
        f"at update 6,000 and 7,000: sacreBLEU +{pre['delta']:.2f} (Holm p < 0.001: told apart); ResiDual"
    )
    assert paragraph.endswith(
        "; ResiDual BLEU 100.00 at E6D6, 100.00 at E12D12, best validation loss 4.480 and 4.470, ended at update "
        "8,750 and 9,000: the same sacreBLEU."
    )
    assert "HC" not in paragraph
    assert "against E6D6" not in bible_reading.reading(runs[:3], [])  # one depth: no such paragraph


def test_the_summarys_figures_are_written_from_the_records_and_a_figure_of_no_run_stops_the_report(tmp_path):
    import json

    import pytest

    from fairseq_residual_tools.errors import ConfigError

    pre, residual = run("pre", 6.0, 4.56, 32.45), run("residual", 6.2, 4.477, 33.49)
    pre["sacrebleu"], residual["sacrebleu"] = 30.97, 32.12
    compared = [dict(layers=6, warmup=True, seed=1, scheme="residual", against="pre", against_warmup=True)]
    compared[0].update(delta=1.14, p=0.0004, p_holm=0.0068)
    (tmp_path / "extended").mkdir()
    extension = {"name": "pre-e6d6-warmup-seed1-to-8750", "bleu": 33.13, "sacrebleu": 31.58}
    extension["compared"] = [{"name": "residual-e6d6-warmup-seed1", "delta": 0.53, "p": 0.17}]
    (tmp_path / "extended" / "x.json").write_text(json.dumps(extension))
    text = (
        "ResiDual {{sacrebleu residual-e6d6-warmup-seed1}} (best {{best residual-e6d6-warmup-seed1}}): "
        "{{residual-e6d6-warmup-seed1 vs pre-e6d6-warmup-seed1}}; the other way "
        "{{pre-e6d6-warmup-seed1 vs residual-e6d6-warmup-seed1}}; trained as long "
        "{{residual-e6d6-warmup-seed1 vs pre-e6d6-warmup-seed1-to-8750}}, {{bleu pre-e6d6-warmup-seed1-to-8750}}."
    )
    assert bible_report.render_figures(text, [pre, residual], compared, tmp_path) == (
        "ResiDual 32.12 (best 4.477): sacreBLEU +1.14, Holm p = 0.007; the other way sacreBLEU -1.14, Holm p = "
        "0.007; trained as long sacreBLEU +0.53, Holm p = 0.170, 33.13."  # one comparison on that page: p itself
    )
    with pytest.raises(ConfigError, match="not a comparison"):
        bible_report.render_figures(
            "{{pre-e6d6-warmup-seed1 vs post-e6d6-warmup-seed1}}", [pre, residual], compared, tmp_path
        )
    with pytest.raises(ConfigError, match="not a scored run"):
        bible_report.render_figures("{{sacrebleu hc-e6d6-warmup-seed1}}", [pre, residual], compared, tmp_path)


def test_a_comparison_made_at_two_seeds_shows_its_spread_and_whether_both_tell_the_two_apart():
    cell = dict(layers=6, warmup=True, against="pre", against_warmup=True, scheme="residual")
    rows = [
        dict(cell, seed=1, delta=1.14, p=0.0004, p_holm=0.007),
        dict(cell, seed=2, delta=1.16, p=0.004, p_holm=0.062),
        dict(cell, scheme="hc", seed=1, delta=-0.08, p=0.8, p_holm=1.0),
    ]
    assert bible_report.every_seed_column(rows) == [("+1.15 ± 0.01", "no"), ("+1.15 ± 0.01", "no"), ("-", "one seed")]
    rows[1]["p_holm"] = 0.01
    assert bible_report.every_seed_column(rows)[0] == ("+1.15 ± 0.01", "above")
