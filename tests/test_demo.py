"""`make demo`'s job runs end to end (tiny settings) and writes its report from that run."""

import json

from fairseq_residual_tools.demo import run


def test_demo_writes_table_json_and_plot_from_its_own_run(tmp_path, capsys):
    out = tmp_path / "out"
    run.main(
        [
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
            "--layers",
            "1",
            "--dim",
            "16",
            "--max-update",
            "4",
            "--validate-every",
            "2",
            "--warmup",
            "2",
            "--train-pairs",
            "300",
            "--schemes",
            "post,residual",
        ]
    )
    printed = capsys.readouterr().out
    report = json.loads((out / "results.json").read_text())
    assert [r["scheme"] for r in report["rows"]] == ["post", "residual"]
    for row in report["rows"]:
        assert 0.0 <= row["bleu"] <= 100.0
        assert row["bleu_signature"].startswith("nrefs:1|case:mixed")
        assert [u for u, _ in row["valid_losses"]] == [2, 4]
        assert f"| {row['scheme']} | {row['bleu']:.2f} |" in printed
    assert (out / "valid_loss.png").stat().st_size > 1000
    readme = (out / "README.md").read_text()
    assert "not** a reproduction" in readme and "fairseq" in readme
