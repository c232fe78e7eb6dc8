"""A tiny residual_transformer_lm trained by fairseq-train on prepared monolingual text, evaluated by
fairseq-eval-lm, and loaded by the hub, which scores and samples raw text."""

import math
import re

import pytest
import torch
from fixtures_dataprep import write_monolingual
from helpers import PLUGIN_DIR, run_cli

from fairseq_residual.hub import load_language_model
from fairseq_residual_tools.dataprep import monolingual

pytestmark = pytest.mark.slow  # fairseq-train and fairseq-eval-lm run as processes

LM = ["--decoder-layers", "2", "--decoder-embed-dim", "32", "--decoder-ffn-embed-dim", "64"]
LM += ["--decoder-attention-heads", "2", "--tokens-per-sample", "64"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(data-prep folder, checkpoint, raw text files) of an LM trained for 40 updates."""
    root = tmp_path_factory.mktemp("lm")
    raw = write_monolingual(root / "raw")
    out = root / "out"
    assert (
        monolingual.main(
            ["--train", str(raw["train"]), "--valid", str(raw["valid"]), "--test", str(raw["test"])]
            + ["--out", str(out), "--bpe-merges", "120", "--workers", "1", "--quiet"]
        )
        == 0
    )
    train = [
        "fairseq_cli.train", str(out / "bin"), "--task", "language_modeling", "--user-dir", PLUGIN_DIR,
        "--arch", "residual_transformer_lm_gpt2_tiny", "--residual-scheme", "residual", *LM,
        "--sample-break-mode", "eos", "--dropout", "0", "--optimizer", "adam", "--lr", "3e-3",
        "--max-tokens", "512", "--max-update", "40", "--cpu", "--num-workers", "0", "--seed", "3",
        "--save-dir", str(root / "ck"), "--no-epoch-checkpoints", "--log-format", "json",
    ]  # fmt: skip
    run_cli(train, cwd=root)
    return out, root / "ck" / "checkpoint_last.pt", raw


def test_eval_lm_perplexity_is_the_hubs_score_of_the_raw_test_text(trained):
    out, checkpoint, raw = trained
    eval_lm = [
        "fairseq_cli.eval_lm", str(out / "bin"), "--path", str(checkpoint), "--user-dir", PLUGIN_DIR,
        "--gen-subset", "test", "--sample-break-mode", "eos", "--tokens-per-sample", "64", "--max-tokens", "512",
        "--cpu", "--num-workers", "0",
    ]  # fmt: skip
    proc = run_cli(eval_lm, cwd=out)
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


def test_the_hub_loads_the_lm_and_samples_a_continuation_of_the_prefix(trained):
    out, checkpoint, _ = trained
    lm = load_language_model(checkpoint, out)
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
