"""docs/language-models.md's commands as written, at a tiny width: monolingual text prepared, a
residual_transformer_lm trained by fairseq-train, evaluated by fairseq-eval-lm, and loaded by the hub, which scores
and samples raw text."""

import logging
import math
import re

import pytest
import torch
from fixtures_dataprep import write_monolingual
from helpers import PLUGIN_DIR, doc_commands, run_cli

from fairseq_residual.hub import load_language_model
from fairseq_residual_tools.dataprep import monolingual

pytestmark = pytest.mark.slow  # fairseq-train and fairseq-eval-lm run as processes

#: what the tests add after the page's flags (the last one wins): a tiny width, 40 updates at a fixed rate, the CPU
LM = ["--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64"]
LM += ["--decoder-attention-heads", "2", "--tokens-per-sample", "64", "--max-tokens", "512"]
SHORT = ["--lr", "3e-3", "--lr-scheduler", "fixed", "--warmup-updates", "0", "--dropout", "0", "--max-update", "40"]
SHORT += ["--seed", "3", "--no-epoch-checkpoints", "--log-format", "json", "--cpu", "--num-workers", "0"]


def as_run(program, extra):
    """The page's command for ``program`` as ``run_cli`` runs it, the plugin's folder for --user-dir."""
    args = [PLUGIN_DIR if a == "fairseq_residual" else a for a in doc_commands("language-models.md")[program]]
    return [f"fairseq_cli.{program.split('-', 1)[1].replace('-', '_')}", *args, *extra]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(data-prep folder, checkpoint, raw text files) of an LM trained for 40 updates by the page's commands."""
    root = tmp_path_factory.mktemp("lm")
    raw = write_monolingual(root / "raw")
    names = {f"{split}.txt": str(path) for split, path in raw.items()}
    prepare = [names.get(a, a) for a in doc_commands("language-models.md")["data-prep/prepare-monolingual.sh"]]
    prepare = [a if a.startswith(("-", "/")) else str(root / a) for a in prepare]
    assert monolingual.main([*prepare, "--bpe-merges", "120", "--workers", "1", "--quiet"]) == 0
    run_cli(as_run("fairseq-train", [*LM, *SHORT]), cwd=root)
    return root / "data" / "lm", root / "checkpoints" / "lm" / "checkpoint_best.pt", raw


def test_the_page_has_the_commands_these_tests_run():
    assert list(doc_commands("language-models.md")) == [
        "data-prep/prepare-monolingual.sh",
        "fairseq-train",
        "fairseq-eval-lm",
    ]


def test_eval_lm_perplexity_is_the_hubs_score_of_the_raw_test_text(trained):
    out, checkpoint, raw = trained
    eval_lm = as_run(
        "fairseq-eval-lm", ["--tokens-per-sample", "64", "--max-tokens", "512", "--cpu", "--num-workers", "0"]
    )
    proc = run_cli(eval_lm, cwd=out.parent.parent)
    assert "{'_name': None, 'common':" not in proc.stdout + proc.stderr  # no 10 KB configuration dump
    loss, perplexity = map(float, re.search(r"Loss \(base 2\): ([\d.]+), Perplexity: ([\d.]+)", proc.stderr).groups())
    lm = load_language_model(checkpoint, out)
    model, dictionary = lm.hub.models[0], lm.hub.task.source_dictionary
    assert perplexity < len(dictionary) / 2  # it learned: better than half a uniform guess over the vocabulary
    # the same number from raw text through the hub's encoding: each sentence scored alone, end of sentence
    # included, as fairseq-eval-lm --sample-break-mode eos does; the hub's own score leaves the end out
    total, count = 0.0, 0
    for line in raw["test"].read_text().splitlines():
        tokens = lm.encode(line)
        previous = torch.cat([tokens.new_tensor([dictionary.eos()]), tokens[:-1]])
        with torch.no_grad():
            log_probs = model.get_normalized_probs(model(previous[None]), log_probs=True)[0]
        scores = log_probs.gather(-1, tokens[:, None]).squeeze(-1)
        torch.testing.assert_close(lm.score(line)["positional_scores"], scores[:-1], atol=1e-5, rtol=0)
        total, count = total + scores.sum().item(), count + len(tokens)
    assert -total / count / math.log(2) == pytest.approx(loss, abs=1e-4)
    assert perplexity == pytest.approx(2**loss, rel=1e-3)


def test_the_hub_loads_the_lm_and_samples_a_continuation_of_the_prefix(trained, caplog):
    out, checkpoint, _ = trained
    with caplog.at_level(logging.INFO):
        lm = load_language_model(checkpoint, out)
    assert [f"{r.name}: {r.getMessage()}" for r in caplog.records] == []  # fairseq's archive and dictionary lines
    assert type(lm.hub.models[0]).__name__ == "ResidualTransformerLanguageModel"
    assert lm.hub.models[0].residual_scheme == "residual"
    torch.manual_seed(0)
    text = lm.sample("The house", max_len_b=12)
    assert text.startswith("The house ") and len(text.split()) > 2
    one = lm.score("The water of the city is not the world.")
    assert lm.hub.decode(one["tokens"]) == "The water of the city is not the world." and len(
        one["positional_scores"]
    ) == len(one["tokens"])
    assert one["perplexity"] == pytest.approx(math.exp(-one["positional_scores"].mean().item()))
