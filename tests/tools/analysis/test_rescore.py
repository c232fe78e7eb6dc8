"""Committed Bible records scored again from their committed translations (``analysis.rescore``): sacreBLEU against
the untouched test verses (lowercased, as the recipe lowercases), the old figure kept beside it, the extensions'
comparisons made again, and nothing done the second time."""

import json

from sacrebleu.metrics import BLEU

from fairseq_residual_tools.analysis import rescore
from fairseq_residual_tools.dataprep.pipeline import file_sha256
from fairseq_residual_tools.files import write_json

ORIGINALS = ["Abram’s brother’s son went with him.", "Then God said, “Let there be light.”", "Jesus wept."]
CHAPTERS = ["Genesis 14", "Genesis 1", "John 11"]
ROUND_TRIP = ["abram ’ s brother ’ s son went with him.", "then god said, “ let there be light. ”", "jesus wept."]


def data_folder(root):
    (root / "bin").mkdir(parents=True)
    (root / "test-text").mkdir()
    (root / "test-text" / "test.en").write_text("\n".join(ORIGINALS) + "\n", encoding="utf-8")
    (root / "test-text" / "test.chapters").write_text("\n".join(CHAPTERS) + "\n", encoding="utf-8")
    en = {"path": "test-text/test.en", "sha256": file_sha256(root / "test-text" / "test.en"), "lines": 3}
    test = {"split": "test", "name": "test", "files": {"en": en, "es": en}, "line_of_sample": None}
    test["documents"] = "test-text/test.chapters"
    summary = {"recipe": "bible", "options": {"src": "es", "tgt": "en"}}
    write_json(root / "summary.json", {**summary, "test_text": {"lowercase": True, "sets": [test]}})
    return root


def record(folder, name, hypotheses, **more):
    run = {"name": name, "key": "k", "bleu": 30.0, "sacrebleu": 99.0, "sacrebleu_signature": "old|case:mixed"}
    run.update({"end_update": 6000, **more})
    write_json(folder / f"{name}-k.json", run)
    (folder / f"{name}-k.test.detok").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    return run


def test_each_record_is_scored_against_the_untouched_verses_and_its_extensions_compared_again(tmp_path, capsys):
    data, report = data_folder(tmp_path / "data"), tmp_path / "report"
    runs, extended = report / "runs", report / "extended"
    runs.mkdir(parents=True)
    extended.mkdir()
    (runs / rescore.ROUND_TRIP_REFERENCES).write_text("\n".join(ROUND_TRIP) + "\n", encoding="utf-8")
    good = ["abram's brother's son went with him.", "then god said, “let there be light.”", "jesus wept."]
    worse = ["abram went with him.", "god said, let there be light.", "jesus cried."]
    record(runs, "pre-e6d6-warmup-seed1", worse)
    record(runs, "post-e6d6-warmup-seed1", [], bleu=None, sacrebleu=None, fails="no progress")
    compared = [{"name": "pre-e6d6-warmup-seed1", "end_update": 6000, "p": 0.5, "delta": 0.0}]
    extension = dict(valid_curve=[[6000, 4.5]], from_update=6000, to_update=8750, best_valid_loss=4.4)
    extension.update(compared=compared, end_update=8750, stop="trained on to update 8750", git="abc")
    record(extended, "pre-e6d6-warmup-seed1-to-8750", good, **extension)

    assert rescore.main([str(report), "--data", str(data)]) == 0
    pre = json.loads((runs / "pre-e6d6-warmup-seed1-k.json").read_text())
    assert pre["sacrebleu"] == round(BLEU(lowercase=True).corpus_score(worse, [ORIGINALS]).score, 2)
    assert "case:lc" in pre["sacrebleu_signature"]
    assert pre["sacrebleu_against_round_trip"] == {"sacrebleu": 99.0, "signature": "old|case:mixed"}
    assert json.loads((runs / "post-e6d6-warmup-seed1-k.json").read_text())["sacrebleu"] is None  # failed: unscored
    assert (runs / "test-references.txt").read_text(encoding="utf-8").splitlines() == ORIGINALS
    assert (runs / "test-chapters.txt").read_text().splitlines() == CHAPTERS
    assert not (runs / rescore.ROUND_TRIP_REFERENCES).exists()

    ext = json.loads((extended / "pre-e6d6-warmup-seed1-to-8750-k.json").read_text())
    assert ext["sacrebleu"] == round(BLEU(lowercase=True).corpus_score(good, [ORIGINALS]).score, 2)
    (row,) = ext["compared"]
    assert abs(row["delta"] - (pre["sacrebleu"] - ext["sacrebleu"])) < 0.0101 and row["delta"] < 0  # each rounded
    assert "3 chapters" in row["test"] and len(row["ci95"]) == 2
    assert "Holm p" in (extended / "README.md").read_text()

    capsys.readouterr()
    assert rescore.main([str(report), "--data", str(data)]) == 0
    assert "nothing to do" in capsys.readouterr().out
    again = json.loads((runs / "pre-e6d6-warmup-seed1-k.json").read_text())
    assert again["sacrebleu_against_round_trip"]["sacrebleu"] == 99.0  # the first figure, not the rescored one
