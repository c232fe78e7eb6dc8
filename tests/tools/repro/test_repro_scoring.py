"""Checkpoint averaging and BLEU as each of the paper's tables scores it."""

import pytest
import torch

from fairseq_residual_tools.errors import DataError
from fairseq_residual_tools.files import write_json
from fairseq_residual_tools.repro import cli, scoring
from fairseq_residual_tools.repro.cells import DATASETS
from fairseq_residual_tools.repro.data_record import UntouchedText
from fairseq_residual_tools.repro.evaluate import (
    averaging_deviation,
    averaging_gap,
    last_checkpoints,
    scoring_description,
    what_ran,
)

GENERATE_OUTPUT = """S-1\tdas ist gut
T-1\tthat is good
H-1\t-0.21\tthat is good
D-1\t-0.21\tThat is good
P-1\t-0.1 -0.2 -0.3 -0.2
S-0\tein well@@ -known fact
T-0\ta well-known fact
H-0\t-0.35\ta well-made fact
Generate test with beam=5: BLEU4 = 42.11, 80.0/50.0/33.3/0.0 (BP=1.000, ratio=1.000, syslen=7, reflen=7)
"""


def test_generate_output_is_read_in_test_set_order():
    gen = scoring.parse_generate(GENERATE_OUTPUT)
    assert gen.hypotheses == ["a well-made fact", "that is good"]
    assert gen.references == ["a well-known fact", "that is good"]
    assert gen.fairseq_bleu == 42.11 and gen.fairseq_bleu_line.startswith("BLEU4 = 42.11, 80.0/")


def test_compound_splitting_is_fairseqs_perl_rule():
    assert scoring.compound_split("a well-known e-mail") == "a well ##AT##-##AT## known e ##AT##-##AT## mail"
    # Moses' aggressive hyphen splitting (-a) leaves "@-@" tokens; the rule applies to them too
    assert scoring.compound_split("well @-@ known") == "well @ ##AT##-##AT## @ known"
    assert scoring.compound_split("a - b") == "a - b"


def test_tokenized_bleu_matches_fairseq_score():
    assert scoring.tokenized_bleu(["the cat sat on the mat"], ["the cat sat on the mat"])[0] == 100.0
    bleu, detail = scoring.tokenized_bleu(["the cat sat on a mat"], ["the cat sat on the mat"])
    assert bleu == 53.73 and detail.startswith("BLEU4 = 53.73, 83.3/60.0/50.0/33.3")


def untouched(lines, lowercase=False, line_of_sample=None, name="test", official=None):
    return UntouchedText(
        "test", name, list(lines), line_of_sample, lowercase, f"/data/test-text/{name}", "0" * 64, official
    )


def test_wmt_headline_is_sacrebleu_against_the_official_references_averaged_and_compound_split_bleu_is_second():
    exact = scoring.Generation(["das ist ein Test ."], ["das ist ein Test ."], ids=[0])
    compound = scoring.Generation(
        ["ein gut @-@ gemachter Plan für heute ."], ["ein gut @-@ bekannter Plan für heute ."], ids=[0]
    )
    official = {
        "newstest2010": untouched(["Das ist ein „Test“."], name="newstest2010", official="-t wmt10 -l en-de"),
        "newstest2011": untouched(["Ein gut-bekannter Plan für heute."], name="newstest2011"),
    }
    scores = scoring.score_wmt({"newstest2010": exact, "newstest2011": compound}, official, "de")
    per_set = scores["test_sets"]
    # sacreBLEU of the detokenised hypothesis against the SGML text: its quotes are not the T- line's
    assert (
        per_set["newstest2010"]["sacrebleu"]
        == scoring.reference_sacrebleu(["das ist ein Test."], ["Das ist ein „Test“."], False, "de")[0]
    )
    assert per_set["newstest2010"]["sacrebleu"] < 100.0 and per_set["newstest2010"]["bleu"] == 100.0
    assert per_set["newstest2010"]["references"] == "-t wmt10 -l en-de"
    assert (
        per_set["newstest2011"]["sacrebleu"]
        == scoring.reference_sacrebleu(
            ["ein gut-gemachter Plan für heute."], ["Ein gut-bekannter Plan für heute."], False, "de"
        )[0]
    )
    assert scores["sacrebleu"] == round(
        (per_set["newstest2010"]["sacrebleu"] + per_set["newstest2011"]["sacrebleu"]) / 2, 2
    )
    split = per_set["newstest2011"]["bleu"]
    assert (
        split
        == scoring.tokenized_bleu(
            ["ein gut @ ##AT##-##AT## @ gemachter Plan für heute ."],
            ["ein gut @ ##AT##-##AT## @ bekannter Plan für heute ."],
        )[0]
    )
    assert scores["bleu"] == round((100.0 + split) / 2, 2)
    assert scores["averaged_over"] == ["newstest2010", "newstest2011"]
    assert scores["sacrebleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")


def test_opus100_averages_english_to_x_x_to_english_and_all():
    sig = "nrefs:1|tok:13a"
    scores = scoring.score_opus({"en-de": (20.0, sig), "en-fr": (30.0, sig), "de-en": (40.0, sig)})
    assert (scores["EX"], scores["XE"], scores["ALL"]) == (25.0, 40.0, 30.0)
    assert scoring.sacrebleu_tokenizer("zh") == "zh" and scoring.sacrebleu_tokenizer("de") == "13a"


def fake_checkpoint(path, value, dtype=torch.float32):
    torch.save(
        {
            "model": {"w": torch.full((2, 2), value, dtype=dtype), "steps": torch.tensor([int(value)])},
            "cfg": {"task": {"data": "x"}},
            "last_optimizer_state": {"big": torch.zeros(8)},
        },
        path,
    )


def test_evaluate_averages_the_last_n_checkpoints_of_the_cells_kind(tmp_path):
    """Which checkpoints; the averaging itself: tests/tools/test_average_checkpoints.py."""
    for epoch in (2, 9, 10, 11):
        fake_checkpoint(tmp_path / f"checkpoint{epoch}.pt", float(epoch), dtype=torch.float16)
    fake_checkpoint(tmp_path / "checkpoint_3_4000.pt", 1.0)
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 99.0)
    picked = last_checkpoints(tmp_path, 3, "epoch")
    assert [p.name for p in picked] == ["checkpoint9.pt", "checkpoint10.pt", "checkpoint11.pt"]  # by number
    assert [p.name for p in last_checkpoints(tmp_path, 5, "update")] == ["checkpoint_3_4000.pt"]

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no checkpoint"):
        last_checkpoints(empty, 5, "epoch")


def with_updates(path, updates):
    state = torch.load(path, weights_only=True)
    state["optimizer_history"] = [{"num_updates": updates}]
    torch.save(state, path)


def test_a_checkpoint_last_newer_than_every_epoch_checkpoint_ends_the_window(tmp_path):
    """Training stopped at max_update in the middle of an epoch: only checkpoint_last.pt holds its last updates."""
    for epoch, updates in ((1, 26), (2, 52), (3, 78)):
        fake_checkpoint(tmp_path / f"checkpoint{epoch}.pt", float(epoch))
        with_updates(tmp_path / f"checkpoint{epoch}.pt", updates)
    fake_checkpoint(tmp_path / "checkpoint_last.pt", 4.0)
    with_updates(tmp_path / "checkpoint_last.pt", 90)
    assert [p.name for p in last_checkpoints(tmp_path, 3, "epoch")] == [
        "checkpoint2.pt",
        "checkpoint3.pt",
        "checkpoint_last.pt",
    ]
    with_updates(tmp_path / "checkpoint_last.pt", 78)  # stopped at an epoch's end: the same state as checkpoint3.pt
    assert [p.name for p in last_checkpoints(tmp_path, 3, "epoch")] == [
        "checkpoint1.pt",
        "checkpoint2.pt",
        "checkpoint3.pt",
    ]


def test_averaging_fewer_checkpoints_than_asked_is_a_recorded_deviation(tmp_path):
    for epoch in (1, 2):
        fake_checkpoint(tmp_path / f"checkpoint{epoch}.pt", float(epoch))
    picked = last_checkpoints(tmp_path, 5, "epoch")
    assert averaging_deviation(picked, 5) == (
        "averaged 2 of the 5 checkpoints asked: only these were saved (checkpoint1.pt, checkpoint2.pt)"
    )
    assert averaging_deviation(picked, 2) is None


def test_update_checkpoints_averaged_across_a_skipped_interval_are_a_recorded_deviation(tmp_path):
    for epoch, updates in ((3, 4000), (3, 4500), (4, 5500), (4, 6000)):  # none at 5000, where epoch 3 ended
        fake_checkpoint(tmp_path / f"checkpoint_{epoch}_{updates}.pt", float(updates))
    picked = last_checkpoints(tmp_path, 4, "update")
    assert averaging_gap(picked) == (
        "the 4 update checkpoints averaged span 4 intervals of 500 updates: none was saved at update 5000 "
        "(fairseq-train saves none at an interval that ends an epoch)"
    )
    assert averaging_gap(picked[1:]) is not None and averaging_gap(picked[2:]) is None  # two: no interval known
    fake_checkpoint(tmp_path / "checkpoint_3_5000.pt", 5000.0)  # every interval saved: nothing to note
    assert averaging_gap(last_checkpoints(tmp_path, 5, "update")) is None


def trained_cfg(layers):
    model = {"arch": "residual_transformer", "residual_scheme": "residual", "encoder_layers": layers}
    return {"model": {**model, "decoder_layers": layers, "encoder_embed_dim": 32, "dropout": 0.1}}


@pytest.mark.parametrize("lowercase", [True, False])
def test_the_record_says_what_was_trained_and_how_the_data_was_prepared(tmp_path, lowercase):
    """A 2+2 model trained as cell iwslt14/residual/e6d6 through overrides, on data prepared (not) lowercased."""
    data = tmp_path / "out" / "bin"
    data.mkdir(parents=True)
    summary = {"recipe": "custom", "pairs": {"train": 800}, "subword": "bpe", "options": {"lowercase": lowercase}}
    summary["translation"] = {"lowercase": lowercase, "tokenizer": "moses"}
    write_json(data.parent / "summary.json", summary)
    record = what_ran(trained_cfg(2), data, "iwslt14")
    assert (record["scheme"], record["encoder_layers"], record["decoder_layers"]) == ("residual", 2, 2)
    assert record["model"] == {k: v for k, v in trained_cfg(2)["model"].items() if k != "dropout"}
    assert record["data"]["lowercase"] is lowercase and record["data"]["recipe"] == "custom"
    assert record["data"]["summary_json"] == str(data.parent / "summary.json")
    text = scoring_description(DATASETS["iwslt14"], record["data"])
    assert ("tokenised lowercased text" in text) is lowercase
    assert ("tokenised text in its original case" in text) is not lowercase


def test_without_a_data_prep_summary_the_case_is_unknown_not_assumed(tmp_path):
    record = what_ran(trained_cfg(6), tmp_path / "bin", "iwslt14")
    assert (record["data"]["data_bin"], record["data"]["summary_json"], record["data"]["papers_data"]) == (
        str(tmp_path / "bin"),
        None,
        False,
    )
    assert "case unknown" in scoring_description(DATASETS["iwslt14"], record["data"])


def test_list_says_evaluated_and_marks_a_result_that_is_not_the_papers_setting_or_data(tmp_path, capsys):
    cell = "iwslt14/residual/e6d6"
    record = {"status": "measured", "scores": {"bleu": 1.0}, "data": {"data_bin": "/bin", "papers_data": True}}
    write_json(tmp_path / "cells" / f"{cell}.json", {**record, "training": {"state": "trained", "deviations": []}})
    write_json(
        tmp_path / "cells" / "iwslt14/pre/e6d6.json",
        {**record, "training": {"state": "trained", "deviations": ["trained on CPU"]}},
    )
    own = {"data_bin": "/own/bin", "papers_data": False}
    write_json(
        tmp_path / "cells" / "iwslt14/post/e12d12.json", {**record, "data": own, "training": {"state": "trained"}}
    )
    argv = ["reproduce", "--table", "iwslt14", "--list", "--results", str(tmp_path / "cells"), "--work", str(tmp_path)]
    assert cli.main(argv) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows[cell][:1] == ["evaluated"] and rows["iwslt14/pre/e6d6"][:2] == ["evaluated", "†"]
    assert rows["iwslt14/post/e12d12"][:3] == ["evaluated,", "other", "data"]
    assert rows["iwslt14/post/e6d6"][:2] == ["not", "run"]


#: the untouched test text of a recipe that lowercases: the T- round trip (Moses-tokenised, lowercased, BPE, an <unk>,
#: detokenised) is not it: curly quotes stay split, the case is lost, a rare word is <unk>
ORIGINAL_REFERENCES = [
    "Abram’s brother’s son went with him to Zoar.",
    "Then God said, “Let there be light,” and there was light.",
]
ROUND_TRIP = """S-1\tdijo dios : sea la luz
T-1\tthen god said , “ let there be light , ” and there was light .
H-1\t-0.3\tthen god said , “ let there be light , ” and there was light .
S-0\tel hijo del hermano de abram
T-0\tabram ’ s brother ’ s son went with him to <unk> .
H-0\t-0.4\tabram ’ s brother ’ s son went with him to zoar .
"""


def test_sacrebleu_scores_the_hypotheses_by_sample_id_against_the_untouched_references_as_the_cli_does(tmp_path):
    import subprocess
    import sys

    from sacrebleu.metrics import BLEU

    gen = scoring.parse_generate(ROUND_TRIP)
    hypotheses = scoring.detokenize(gen.hypotheses, "en")
    references = scoring.original_references(gen, ORIGINAL_REFERENCES)
    assert references == ORIGINAL_REFERENCES  # sample id 0 is line 0
    assert scoring.detokenize(gen.references, "en") != [r.lower() for r in ORIGINAL_REFERENCES]  # the round trip
    score, signature = scoring.reference_sacrebleu(hypotheses, references, lowercase=True)
    assert "case:lc" in signature
    (tmp_path / "ref").write_text("\n".join(ORIGINAL_REFERENCES) + "\n", encoding="utf-8")
    (tmp_path / "hyp").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    cli = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(tmp_path / "ref"), "-i", str(tmp_path / "hyp"), "-lc", "-b", "-w", "2"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert score == float(cli.stdout.strip())
    # against the round-tripped T- lines the score is another (higher) number: what the project printed before
    round_trip = BLEU().corpus_score(hypotheses, [scoring.detokenize(gen.references, "en")]).score
    assert round(round_trip, 2) != score
    cased, cased_signature = scoring.reference_sacrebleu(hypotheses, references, lowercase=False)
    assert cased < score and "case:mixed" in cased_signature


def test_a_recipes_sample_id_mapping_picks_the_reference_lines_and_a_partial_decoding_is_refused():
    gen = scoring.parse_generate(ROUND_TRIP)
    assert scoring.original_references(gen, ["dropped", "a", "b"], line_of=[1, 2]) == ["a", "b"]
    with pytest.raises(DataError, match="decoded 2 sentences .* test set of 3 lines"):
        scoring.original_references(gen, ["x", "y", "z"])
    with pytest.raises(DataError, match="not in the recipe's mapping"):
        scoring.original_references(gen, ["x", "y"], line_of=[0])


def sacrebleu_command(tmp_path, references, hypotheses, *options):
    """What the sacrebleu command prints for ``hypotheses`` against the reference file ``references``."""
    import subprocess
    import sys

    (tmp_path / "hyp").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    command = [sys.executable, "-m", "sacrebleu", str(references), "-i", str(tmp_path / "hyp"), "-b", "-w", "2"]
    return float(subprocess.run([*command, *options], capture_output=True, text=True, check=True).stdout)


def test_iwslt_sacrebleu_is_the_sacrebleu_command_on_the_untouched_text_lowercased_where_the_recipe_lowercased(
    tmp_path,
):
    """The T- round trip (lowercased, split curly quotes, <unk>) is not what the score is against."""
    gen = scoring.parse_generate(ROUND_TRIP + "Generate test with beam=5: BLEU4 = 61.2, 90/70/60/50 (BP=1.000)\n")
    (tmp_path / "ref").write_text("\n".join(ORIGINAL_REFERENCES) + "\n", encoding="utf-8")
    scores = scoring.score_iwslt(gen, untouched(ORIGINAL_REFERENCES, lowercase=True), "en")
    hypotheses = scoring.detokenize(gen.hypotheses, "en")
    assert scores["sacrebleu"] == sacrebleu_command(tmp_path, tmp_path / "ref", hypotheses, "-lc")
    assert scores["sacrebleu_signature"].startswith("nrefs:1|case:lc|eff:no|tok:13a")
    assert scores["bleu"] == 61.2 and scores["sentences"] == 2  # the paper's figure: fairseq's, as printed
    cased = scoring.score_iwslt(gen, untouched(ORIGINAL_REFERENCES, lowercase=False), "en")
    assert cased["sacrebleu"] == sacrebleu_command(tmp_path, tmp_path / "ref", hypotheses)
    assert "case:mixed" in cased["sacrebleu_signature"] and cased["sacrebleu"] < scores["sacrebleu"]


def test_a_recipes_sample_id_mapping_pairs_each_hypothesis_with_its_own_reference():
    """Test lines dropped and reordered by a recipe: sample id i is line line_of_sample[i] of the untouched text."""
    gen = scoring.Generation(["this is the second line", "this is the first line"], ["t", "t"], ids=[0, 1])
    lines = ["dropped", "This is the first line", "This is the second line"]
    text = untouched(lines, lowercase=True, line_of_sample=[2, 1])
    assert scoring.untouched_sacrebleu(gen, gen.hypotheses, text, "en")[0] == 100.0
    assert scoring.untouched_sacrebleu(gen, gen.hypotheses[::-1], text, "en")[0] < 100.0
