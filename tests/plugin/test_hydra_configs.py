"""The hydra configs: languages from overrides (the paper's pairs by default), the README's example on another
pair, hydra's run folder ignored by git."""

import json
import re
import subprocess
import sys

import pytest
from helpers import PLUGIN_DIR, ROOT, TINY_MODEL
from omegaconf import OmegaConf

from fairseq_residual_tools.repro.launch import dataset_config


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
    assert command[:6] == [
        "fairseq-hydra-train",
        "--config-dir",
        "configs",
        "--config-name",
        "iwslt14",
        "+hardware=cpu",
    ]
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
    args += tiny + ["dataset.max_tokens=1024", "optimization.max_update=2"]
    args += ["checkpoint.no_save=true", "dataset.disable_validation=true", "dataset.num_workers=0"]
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.hydra_train", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert '"train_num_updates": "2"' in log, log[-2000:]  # +hardware=cpu: JSON records
    assert "src-tgt" in log and "dict.de.txt" not in log
    # hydra ran in ./outputs/<date>/<time>/, which git ignores
    runs = list((tmp_path / "outputs").glob("*/*/.hydra"))
    assert len(runs) == 1
    run_dir = runs[0].parent.relative_to(tmp_path)
    ignored = subprocess.run(["git", "check-ignore", "-q", str(run_dir / "hydra_train.log")], cwd=ROOT)
    assert ignored.returncode == 0


PAPER_CONFIGS = ["iwslt14", "wmt14", "opus100"]


@pytest.mark.parametrize("name", PAPER_CONFIGS)
def test_hardware_cpu_makes_a_paper_config_a_short_cpu_run_of_the_same_model(name):
    paper, cpu = dataset_config(name), dataset_config(name, ("+hardware=cpu",))
    assert cpu.common.cpu and not (cpu.common.amp or cpu.common.fp16 or cpu.common.memory_efficient_fp16)
    assert (cpu.optimization.max_update, list(cpu.optimization.update_freq), cpu.common.log_interval) == (10, [1], 1)
    assert not cpu.task.eval_bleu and cpu.checkpoint.best_checkpoint_metric == "loss"
    assert not cpu.checkpoint.maximize_best_checkpoint_metric
    assert cpu.model == paper.model and cpu.lr_scheduler == paper.lr_scheduler
    assert cpu.optimization.lr == paper.optimization.lr and cpu.dataset.max_tokens == paper.dataset.max_tokens


@pytest.mark.slow
def test_hardware_cpu_trains_the_wmt14_config_with_amp_on_the_demo_data(demo_databin, tmp_path):
    """Without the group, wmt14.yaml's AMP stops on a machine without CUDA; with it the paper's model trains."""
    args = ["--config-dir", str(ROOT / "configs"), "--config-name", "wmt14", "+hardware=cpu"]
    args += [f"task.data={demo_databin.databin}", "task.source_lang=src", "task.target_lang=tgt"]
    args += [
        f"common.user_dir={PLUGIN_DIR}",
        "dataset.num_workers=0",
        "checkpoint.no_save=true",
        "dataset.max_tokens=1024",
    ]
    # four of the group's ten updates show that the paper's model trains, validates and stops
    args += ["optimization.max_update=4", "dataset.validate_interval_updates=4", "common.log_interval=2"]
    proc = subprocess.run(
        [sys.executable, "-m", "fairseq_cli.hydra_train", *args], cwd=tmp_path, capture_output=True, text=True
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    records = [json.loads(line[line.index("{") :]) for line in log.splitlines() if '{"epoch"' in line]
    assert [int(r["num_updates"]) for r in records if "loss" in r] == [2, 4]  # every 2nd update here
    assert [int(r["valid_num_updates"]) for r in records if "valid_loss" in r][-1] == 4
    assert "encoder_embed_dim': 512" in log or '"encoder_embed_dim": 512' in log or "encoder_embed_dim=512" in log
    assert "done training" in log
