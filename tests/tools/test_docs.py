"""The README and docs/: every relative link leads to a file (and heading) that exists, and the README's fairseq
commands run as written on the demo's data (the hydra one: tests/plugin/test_hydra_configs.py)."""

import re
import shlex
from pathlib import Path

import pytest
import torch
from helpers import PLUGIN_DIR, ROOT, TINY_MODEL, run_cli

PAGES = [ROOT / "README.md", ROOT / "data-prep" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def anchors(page: Path):
    """GitHub's anchors of a Markdown page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_leads_to_an_existing_file_and_heading():
    checked, broken = 0, []
    for page in PAGES:
        for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if link.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            checked += 1
            if not target.exists() or (anchor and target.suffix == ".md" and anchor not in anchors(target)):
                broken.append(f"{page.relative_to(ROOT)}: {link}")
    assert broken == []
    assert checked > 50


def test_the_readme_is_a_landing_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 120
    for doc in ["install", "usage", "translating", "checkpoints", "errors", "patches", "performance", "results"]:
        assert f"(docs/{doc}.md)" in readme


def readme_commands():
    """The README's indented fairseq commands, continuation lines joined, by program."""
    text = (ROOT / "README.md").read_text().replace("\\\n", " ")
    lines = re.findall(r"^    (fairseq-\S+ .*)$", text, flags=re.M)
    return {shlex.split(line)[0]: shlex.split(line)[1:] for line in lines}


@pytest.mark.slow
def test_readme_preprocess_train_and_generate_run_as_written(demo_databin, tmp_path):
    """With the demo's pair (src-tgt) for de-en, its BPE'd text for ``...``, the plugin's folder for the relative
    --user-dir; train adds a small width, three updates and --cpu after the README's flags (the last one wins)."""
    commands = readme_commands()
    assert list(commands) == ["fairseq-preprocess", "fairseq-train", "fairseq-generate", "fairseq-hydra-train"]
    bpe = demo_databin.root / "bpe"
    substitute = {"de": "src", "en": "tgt", "fairseq_residual": PLUGIN_DIR}
    substitute["..."] = f"{bpe}/train --validpref {bpe}/valid --testpref {bpe}/test --workers 1"

    def as_run(program):
        args = " ".join(substitute.get(a, shlex.quote(a)) for a in commands[program])
        return [f"fairseq_cli.{program.split('-')[1]}", *shlex.split(args)]

    run_cli(as_run("fairseq-preprocess"), cwd=tmp_path)
    assert (tmp_path / "data-bin" / "x" / "dict.src.txt").is_file()
    width = [a for i, a in enumerate(TINY_MODEL) if "layers" not in TINY_MODEL[i - (i % 2)]]
    train = [*as_run("fairseq-train"), *width, "--max-update", "3", "--cpu", "--num-workers", "0"]
    run_cli(train, cwd=tmp_path)
    state = torch.load(tmp_path / "checkpoints" / "checkpoint_best.pt", weights_only=True)  # the plugin's allowlist
    model = state["cfg"]["model"]
    assert (model["residual_scheme"], model["encoder_layers"], model["decoder_layers"]) == ("residual", 12, 12)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    generated = run_cli([*as_run("fairseq-generate"), "--cpu", "--max-len-b", "10"], cwd=tmp_path).stdout
    assert len(re.findall(r"^H-\d+\t", generated, flags=re.M)) == 40  # every test sentence
    assert re.search(r"^Generate test with beam=5: BLEU4 = ", generated, flags=re.M)


@pytest.mark.slow
def test_fairseq_train_help_lists_no_model_option_even_with_the_arch_and_the_options_module_does(tmp_path):
    """What the README and docs/usage.md say about --help (fairseq prints it before it adds a model's options)."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`fairseq-train --help` does not list the model options, even with `--arch residual_transformer`" in readme
    for arch in ["residual_transformer", "residual_transformer_iwslt_de_en"]:
        argv = ["fairseq_cli.train", "--user-dir", PLUGIN_DIR, "--arch", arch, "--help"]
        stock_help = run_cli(argv, cwd=tmp_path).stdout
        assert "--max-update" in stock_help and "--residual-scheme" not in stock_help
        assert "--encoder-layers" not in stock_help and "--encoder-embed-dim" not in stock_help
        options = run_cli(["fairseq_residual.options", "--arch", arch], cwd=tmp_path).stdout
        assert "--residual-scheme" in options and "--encoder-layers" in options
