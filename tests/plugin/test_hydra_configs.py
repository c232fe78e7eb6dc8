"""The hydra configs: languages from overrides (the paper's pairs by default), the README's example on another
pair, hydra's run folder ignored by git."""

import re
import subprocess
import sys

import pytest
from helpers import PLUGIN_DIR, ROOT, TINY_MODEL
from omegaconf import OmegaConf


def test_configs_default_to_the_papers_language_pairs():
    for name, (src, tgt) in {"iwslt14": ("de", "en"), "wmt14": ("en", "de")}.items():
        task = OmegaConf.load(ROOT / "configs" / f"{name}.yaml").task
        assert (task.source_lang, task.target_lang) == (src, tgt)


def readme_hydra_command():
    """The README's fairseq-hydra-train example, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^    (fairseq-hydra-train (?:.*\\\n)*.*)$", text, flags=re.M)
    return match.group(1).replace("\\\n", " ").split()


@pytest.mark.slow
def test_readme_hydra_example_trains_on_another_language_pair(demo_databin, tmp_path):
    """The README's example, with the demo's pair (src-tgt) given where the README gives de-en."""
    command = readme_hydra_command()
    assert command[:5] == ["fairseq-hydra-train", "--config-dir", "configs", "--config-name", "iwslt14"]
    substitute = {
        "configs": str(ROOT / "configs"),
        "task.data=$PWD/data-bin/x": f"task.data={demo_databin.databin}",
        "task.source_lang=de": "task.source_lang=src",
        "task.target_lang=en": "task.target_lang=tgt",
        "common.user_dir=$PWD/fairseq_residual": f"common.user_dir={PLUGIN_DIR}",
    }
    assert set(substitute) <= set(command)
    args = [substitute.get(a, a) for a in command[1:]]
    # the tiny model of the CLI tests, two updates, no checkpoint
    tiny = [f"model.{k[2:].replace('-', '_')}={v}" for k, v in zip(TINY_MODEL[::2], TINY_MODEL[1::2])]
    args += tiny + ["common.cpu=true", "dataset.max_tokens=1024", "optimization.max_update=2"]
    args += ["checkpoint.no_save=true", "dataset.disable_validation=true", "dataset.num_workers=0"]
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.hydra_train", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "num_updates 2" in log or '"num_updates": "2"' in log, log[-2000:]
    assert "src-tgt" in log and "dict.de.txt" not in log
    # hydra ran in ./outputs/<date>/<time>/, which git ignores
    runs = list((tmp_path / "outputs").glob("*/*/.hydra"))
    assert len(runs) == 1
    run_dir = runs[0].parent.relative_to(tmp_path)
    ignored = subprocess.run(["git", "check-ignore", "-q", str(run_dir / "hydra_train.log")], cwd=ROOT)
    assert ignored.returncode == 0
