"""The console commands (``[project.scripts]``): each resolves to a tool, data preparation starts
without torch or fairseq, and a user error ends as one line."""

import importlib
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path
from types import SimpleNamespace

import pytest

from fairseq_residual_tools import console
from fairseq_residual_tools.errors import DataError, exit_on_user_error

ROOT = Path(__file__).resolve().parents[2]
#: pyproject.toml's [project.scripts]
SCRIPTS = dict(re.findall(r'^(fairseq-residual-[\w-]+) = "(.+)"$', (ROOT / "pyproject.toml").read_text(), flags=re.M))


def test_the_installed_console_scripts_are_pyprojects():
    installed = {
        ep.name: ep.value for ep in entry_points(group="console_scripts") if ep.dist.name == "fairseq_residual"
    }
    assert installed == SCRIPTS, "the installed commands are not pyproject.toml's: run make install"


def test_every_console_script_names_a_function_of_the_console_module():
    assert len(SCRIPTS) == 16
    for name, target in SCRIPTS.items():
        module, function = target.split(":")
        assert name.startswith("fairseq-residual-") and module == "fairseq_residual_tools.console"
        assert callable(getattr(console, function)), name


def test_every_console_command_runs_the_main_of_an_existing_tool(monkeypatch):
    called = []

    def tool(name):
        return SimpleNamespace(main=lambda argv: called.append((name, argv)) or 0)

    monkeypatch.setattr(console, "import_module", tool)
    monkeypatch.setattr(sys, "argv", ["fairseq-residual-x", "--flag"])
    for target in SCRIPTS.values():
        assert getattr(console, target.split(":")[1])() == 0
    assert len(called) == len(SCRIPTS)
    assert ("fairseq_residual_tools.repro.cli", ["train", "--flag"]) in called
    assert ("fairseq_residual_tools.dataprep.custom", ["--flag"]) in called
    monkeypatch.undo()
    for module, _ in called:
        assert callable(importlib.import_module(module).main), module


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_console_commands_help_names_the_command(name, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"/some/venv/bin/{name}", "--help"])
    with pytest.raises(SystemExit) as stop:
        getattr(console, SCRIPTS[name].split(":")[1])()
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {name} [-h]")


def test_tables_help_describes_every_option(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fairseq-residual-tables", "--help"])
    with pytest.raises(SystemExit):
        console.tables()
    options = " ".join(capsys.readouterr().out.split("options:")[1].split())
    assert re.findall(r"(--\S+) [A-Z]+ ", options) == ["--results", "--work", "--out"]
    assert "--results RESULTS per-cell JSON of evaluated cells (default results/cells/)" in options
    assert "--work WORK checkpoint root, for the logs of cells not evaluated (default checkpoints/)" in options
    assert "--out OUT the Markdown tables to write (default results/tables.md)" in options


@pytest.mark.parametrize("recipe", ["iwslt14", "wmt14", "opus100", "custom", "monolingual", "bible"])
def test_data_prep_help_loads_neither_torch_nor_fairseq(recipe):
    code = (
        "import sys\n"
        "from fairseq_residual_tools import console\n"
        f"sys.argv = ['fairseq-residual-prepare-{recipe}', '--help']\n"
        "try:\n"
        f"    console.prepare_{recipe}()\n"
        "except SystemExit as e:\n"
        "    status = e.code\n"
        "heavy = [m for m in ('torch', 'fairseq', 'fairseq_residual') if m in sys.modules]\n"
        "print('status', status, 'loaded', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "usage:" in out and "--out" in out
    assert out.splitlines()[-1] == "status 0 loaded []"


def test_a_user_error_of_a_console_command_is_one_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["fairseq-residual-train", "--cell", "nope/x/y"])
    assert console.train() == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cell 'nope/x/y' is not DATASET/SCHEME/eNdM") and err.count("\n") == 1


def test_exit_status_is_mains_int_else_zero():
    def fails():
        raise DataError("missing corpus.de: give --train-prefix")

    assert exit_on_user_error(lambda: 3) == 3
    assert exit_on_user_error(lambda: None) == 0
    # probes and the CPU study return their results for the tests: not an exit status
    assert exit_on_user_error(lambda: {"post": {"bleu": 1.0}}) == 0
    assert exit_on_user_error(fails) == 1
