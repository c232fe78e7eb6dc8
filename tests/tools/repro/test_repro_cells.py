"""Every cell of the paper's four tables has a config (dataset YAML + overrides) and a dry-run command."""

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, SCRIPTS

from fairseq_residual.schemes import SCHEMES
from fairseq_residual_tools.repro import cells
from fairseq_residual_tools.repro.cells import NOT_IMPLEMENTED, Cell, paper_cells, paper_tables, parse_cell
from fairseq_residual_tools.repro.launch import compose
from fairseq_residual_tools.repro.tables import make_tables


def test_the_tables_give_the_papers_cells():
    tables = paper_tables()
    assert list(tables) == ["iwslt14", "wmt14", "opus100", "warmup"]
    names = {t: [c.name for c in table.cells()] for t, table in tables.items()}
    assert len(names["iwslt14"]) == 12 and "iwslt14/tfixup/e12d12" in names["iwslt14"]
    assert len(names["wmt14"]) == 16 and "wmt14/b2t/e18d18" in names["wmt14"] and "wmt14/dlcl/e6d6" in names["wmt14"]
    assert names["opus100"] == ["opus100/pre/e18d18", "opus100/deepnet/e100d100", "opus100/residual/e18d18"]
    # the ablation's rows with warmup are the IWSLT-14 cells; without warmup, 6 more
    assert sorted(n for n in names["warmup"] if n.endswith("/nowarmup")) == sorted(
        f"iwslt14/{s}/{d}/nowarmup" for s in ("post", "pre", "residual") for d in ("e6d6", "e12d12")
    )
    assert set(names["warmup"]) - set(names["iwslt14"]) == {n for n in names["warmup"] if n.endswith("/nowarmup")}
    assert len(paper_cells("all")) == 12 + 16 + 3 + 6


def test_a_cell_name_round_trips_and_bad_names_say_why():
    cell = parse_cell("iwslt14/pre/e12d12/nowarmup")
    assert cell == Cell("iwslt14", "pre", 12, 12, warmup=False) and cell.name == "iwslt14/pre/e12d12/nowarmup"
    assert cell.overrides() == [
        "model.residual_scheme=pre",
        "model.encoder_layers=12",
        "model.decoder_layers=12",
        "+warmup=none",
    ]
    with pytest.raises(ValueError, match="DATASET/SCHEME/eNdM"):
        parse_cell("iwslt14/pre/12")
    with pytest.raises(ValueError, match="unknown dataset 'wmt19'"):
        parse_cell("wmt19/pre/e6d6")


def test_a_scheme_not_registered_is_marked_not_implemented(tmp_path, monkeypatch):
    # a registry without Admin where the cells read it; deleting from SCHEMES itself would put "admin" back at the
    # end, changing the choices' order that later tests in this process see
    monkeypatch.setattr(cells, "SCHEMES", {name: s for name, s in SCHEMES.items() if name != "admin"})
    assert not parse_cell("iwslt14/admin/e6d6").implemented
    from fairseq_residual_tools.repro.tables import make_tables

    text = make_tables(tmp_path / "results", tmp_path / "work", tmp_path / "tables.md")
    assert re.search(r"^\| +Admin +\| " + re.escape(NOT_IMPLEMENTED) + r" +\| 35\.50 +\|", text, re.M)


def resolved(cfg):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True)


def test_cell_configs_follow_the_authors_settings():
    iwslt = resolved(compose(parse_cell("iwslt14/post/e12d12"), ["task.data=/d"]))
    assert iwslt["model"]["residual_scheme"] == "post" and iwslt["model"]["encoder_layers"] == 12
    assert (iwslt["model"]["encoder_embed_dim"], iwslt["model"]["encoder_ffn_embed_dim"]) == (256, 1024)
    assert (iwslt["model"]["dropout"], iwslt["model"]["share_all_embeddings"]) == (0.3, True)
    assert iwslt["optimization"]["lr"] == [0.0005] and iwslt["optimizer"]["weight_decay"] == 0.0001
    assert iwslt["lr_scheduler"]["warmup_updates"] == 4000 and iwslt["lr_scheduler"]["warmup_init_lr"] == 1e-07
    assert iwslt["checkpoint"]["patience"] == 20 and iwslt["checkpoint"]["best_checkpoint_metric"] == "bleu"
    assert iwslt["criterion"]["label_smoothing"] == 0.1 and iwslt["optimizer"]["adam_betas"] == [0.9, 0.98]

    nowarmup = resolved(compose(parse_cell("iwslt14/residual/e6d6/nowarmup"), ["task.data=/d"]))
    # no warmup: the schedule starts at the peak learning rate; the decay is unchanged
    assert nowarmup["lr_scheduler"]["warmup_init_lr"] == 0.0005 and nowarmup["lr_scheduler"]["warmup_updates"] == 4000

    wmt = resolved(compose(parse_cell("wmt14/residual/e18d18"), ["task.data=/d"]))
    assert wmt["model"]["residual_scheme"] == "residual" and wmt["model"]["decoder_layers"] == 18
    assert wmt["model"]["encoder_embed_dim"] == 512 and wmt["common"]["amp"] is True
    assert (wmt["optimization"]["lr"], wmt["optimization"]["update_freq"], wmt["optimization"]["max_update"]) == (
        [0.001],
        [16],
        50000,
    )

    opus = resolved(
        compose(parse_cell("opus100/pre/e18d18"), ["task.data=/d", "task.lang_pairs=en-de", "task.langs=[de,en]"])
    )
    assert opus["model"]["encoder_layers"] == 18 and opus["model"]["dual_stream_scale"] == 0.05
    assert opus["model"]["share_decoder_input_output_embed"] and not opus["model"]["share_all_embeddings"]
    assert opus["common"]["memory_efficient_fp16"] and opus["common"]["fp16_init_scale"] == 8
    assert opus["optimization"]["clip_norm"] == 1.0 and opus["lr_scheduler"]["warmup_updates"] == 8000
    assert opus["task"]["sampling_temperature"] == 5.0 and opus["task"]["encoder_langtok"] == "tgt"


def test_wmt_decodes_and_averages_as_b2ts_protocol_and_the_config_keeps_the_checkpoints_it_averages():
    """takase/b2t_connection: the last 10 checkpoints, beam 4, length penalty 0.6 on newstest2014, 1.0 otherwise."""
    wmt, iwslt = cells.DATASETS["wmt14"], cells.DATASETS["iwslt14"]
    assert wmt.decoding_for("newstest2014") == {"beam": 4, "lenpen": 0.6}
    assert all(wmt.decoding_for(f"newstest{y}") == {"beam": 4, "lenpen": 1.0} for y in (2010, 2013, 2016))
    assert iwslt.decoding_for("test") == {"beam": 5, "lenpen": 1.0, "max_len_a": 1.2, "max_len_b": 10}
    assert (wmt.average, iwslt.average, cells.DATASETS["opus100"].average) == (10, 5, 5)
    kept = {
        "wmt14": resolved(compose(parse_cell("wmt14/b2t/e18d18"), ["task.data=/d"]))["checkpoint"],
        "iwslt14": resolved(compose(parse_cell("iwslt14/pre/e6d6"), ["task.data=/d"]))["checkpoint"],
    }
    assert kept["wmt14"]["keep_interval_updates"] == 10 and kept["iwslt14"]["keep_last_epochs"] == 5
    assert paper_tables()["wmt14"].metric == "sacrebleu"  # the WMT table's figure


@pytest.mark.slow
def test_dry_run_of_every_cell_prints_a_command_naming_existing_configs(tmp_path):
    proc = subprocess.run(
        [
            "bash",
            str(SCRIPTS / "reproduce.sh"),
            "--table",
            "all",
            "--dry-run",
            "--gpus",
            "4",
            "--work",
            str(tmp_path),
            "--results",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = re.split(r"^== cell (\S+)\n", proc.stdout, flags=re.M)[1:]
    by_cell = dict(zip(blocks[::2], blocks[1::2]))
    assert list(by_cell) == [c.name for c in paper_cells("all")]
    for name, text in by_cell.items():
        cell = parse_cell(name)
        if not cell.implemented:
            assert f"skipped: {NOT_IMPLEMENTED}" in text
            continue
        assert "effective batch: 4 GPUs x " in text and "WARNING" not in text
        (command,) = [line for line in text.splitlines() if "torch.distributed.run" in line]
        argv = shlex.split(command)
        assert argv[argv.index("--nproc-per-node=4") + 1 : argv.index("--nproc-per-node=4") + 3] == [
            "-m",
            "fairseq_residual_tools.repro.distributed_train",
        ]
        config_dir = Path(argv[argv.index("--config-dir") + 1])
        config_name = argv[argv.index("--config-name") + 1]
        assert config_dir == ROOT / "configs" and (config_dir / f"{config_name}.yaml").is_file()
        assert config_name == cell.dataset
        overrides = dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith("--"))
        assert overrides["model.residual_scheme"] == cell.scheme
        assert overrides["model.encoder_layers"] == str(cell.encoder_layers)
        assert overrides["checkpoint.save_dir"] == str(tmp_path / name)
        for group, option in ((k[1:], v) for k, v in overrides.items() if k.startswith("+")):
            assert (config_dir / group / f"{option}.yaml").is_file()
        assert ("+warmup" in overrides) == (not cell.warmup)
        assert f"then: bash scripts/evaluate.sh --cell {name}" in text


def test_the_reproduction_guide_lists_every_cell():
    guide = (ROOT / "docs" / "reproduce.md").read_text()
    missing = [c.name for c in paper_cells("all") if not re.search(rf"(?<![\w/]){re.escape(c.name)}(?![\w/])", guide)]
    assert not missing


def test_make_tables_regenerates_the_committed_tables_byte_for_byte(tmp_path):
    """results/tables.md is make_tables' output for results/cells/ (no training folders here)."""
    out = tmp_path / "tables.md"
    make_tables(ROOT / "results" / "cells", tmp_path / "no-trainings", out)
    assert out.read_bytes() == (ROOT / "results" / "tables.md").read_bytes()
