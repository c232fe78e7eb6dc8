"""The package as pip and ``python -m build`` see it: metadata from pyproject.toml only (setup.py is a shim), a
wheel and an sdist with the plugin, the tools and the hydra configs, and an install into a fresh venv."""

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import warnings
import zipfile
from pathlib import Path

import pytest

from fairseq_residual.quiet import KNOWN_WARNINGS, VERBOSE_VARIABLE

ROOT = Path(__file__).resolve().parents[2]
#: what a source tree needs to build; tests/, results/ and .venv stay out of the copy
SOURCES = ["pyproject.toml", "setup.py", "README.md", "configs", "fairseq_residual", "fairseq_residual_tools"]
PTH = "fairseq_residual_quiet.pth"
CONFIGS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """sdist and wheel of a copy of the sources, built by ``python -m build`` with this environment's setuptools."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (wheel,) = out.glob("fairseq_residual-0.1.0-*.whl")
    (sdist,) = out.glob("fairseq_residual-0.1.0.tar.gz")
    return wheel, sdist


def test_setup_py_takes_every_piece_of_metadata_from_pyproject():
    # setup() gets build commands only (the .pth below): nothing to keep in step with pyproject.toml
    assert "setup(cmdclass={" in (ROOT / "setup.py").read_text()
    proc = subprocess.run([sys.executable, "setup.py", "--name", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["fairseq_residual", "0.1.0"]


def pth_line():
    """setup.py's PTH_LINE, read without running setup.py."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "PTH_LINE"]
    return ast.literal_eval(value)


def test_the_pth_line_installs_quiet_pys_fairscale_filter_unless_verbose(monkeypatch):
    (fairscale,) = [(c, m, mod) for c, m, mod in KNOWN_WARNINGS if mod == r"fairscale\."]
    assert pth_line().startswith("import ") and pth_line().count("\n") == 1  # what site.py executes
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", message=fairscale[1], category=fairscale[0], module=fairscale[2])
        expected = warnings.filters[0]
        warnings.resetwarnings()
        monkeypatch.delenv(VERBOSE_VARIABLE, raising=False)
        exec(pth_line())
        assert warnings.filters == [expected]
        warnings.resetwarnings()
        monkeypatch.setenv(VERBOSE_VARIABLE, "1")
        exec(pth_line())
        assert warnings.filters == []


def test_the_wheel_carries_the_plugin_the_tools_and_the_configs(dist):
    wheel, _ = dist
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ["fairseq_residual/__init__.py", "fairseq_residual/schemes/residual.py"]:
        assert module in names
    for module in ["fairseq_residual_tools/console.py", "fairseq_residual_tools/repro/cli.py"]:
        assert module in names
    assert "fairseq_residual_tools/dataprep/checksums.json" in names
    assert zipfile.ZipFile(wheel).read(PTH).decode() == pth_line()  # at the root: pip puts it in site-packages
    data = "fairseq_residual-0.1.0.data/data/share/fairseq_residual/"
    assert {n[len(data) :] for n in names if n.startswith(data)} == set(CONFIGS)
    assert not [n for n in names if n.startswith(("tests/", "results/", "scripts/"))]
    entry_points = zipfile.ZipFile(wheel).read("fairseq_residual-0.1.0.dist-info/entry_points.txt").decode()
    assert "fairseq-residual-train = fairseq_residual_tools.console:train" in entry_points


def test_the_sdist_carries_setup_py_pyproject_and_the_configs(dist):
    _, sdist = dist
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    assert {"setup.py", "pyproject.toml", "README.md", "fairseq_residual/model.py"} <= names
    assert set(CONFIGS) <= names


@pytest.mark.slow
def test_pip_install_of_the_wheel_into_a_fresh_venv(dist, tmp_path):
    """Without dependencies (torch and fairseq are large): the files land where the docs say."""
    wheel, _ = dist
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-deps"]
    subprocess.run([*pip, "--no-index", str(wheel)], check=True, capture_output=True)
    code = (
        "import json, sys, fairseq_residual_tools.dataprep as d\n"
        "from pathlib import Path\n"
        "print(json.dumps([Path(d.__file__).is_file(), sys.prefix]))\n"
    )
    out = subprocess.run([venv / "bin" / "python", "-c", code], capture_output=True, text=True, check=True).stdout
    imported, prefix = json.loads(out)
    assert imported
    configs = Path(prefix) / "share" / "fairseq_residual" / "configs"
    assert sorted(str(p.relative_to(configs.parent)) for p in configs.rglob("*.yaml")) == CONFIGS
    assert (venv / "bin" / "fairseq-residual-train").is_file()
    (site_packages,) = venv.glob("lib/python*/site-packages")
    assert (site_packages / PTH).read_text() == pth_line()


@pytest.mark.slow
def test_an_editable_install_puts_the_pth_into_site_packages(tmp_path):
    """pip install -e . (as make install does), into a prefix: the .pth beside setuptools' own; uninstalled with it."""
    prefix = tmp_path / "prefix"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # --ignore-installed: pip would otherwise first uninstall the package from the environment running the tests
    install = [*pip, "install", "--no-deps", "--no-build-isolation", "--ignore-installed", "--prefix", str(prefix)]
    install += ["-e", str(ROOT)]
    ours = sorted(Path(sysconfig.get_path("purelib")).glob("*fairseq_residual*"))
    proc = subprocess.run(install, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(Path(sysconfig.get_path("purelib")).glob("*fairseq_residual*")) == ours  # this install untouched
    (site_packages,) = prefix.glob("lib/python*/site-packages")
    assert (site_packages / PTH).read_text() == pth_line()
    record = next(site_packages.glob("fairseq_residual-*.dist-info")) / "RECORD"
    assert any(line.startswith(PTH + ",") for line in record.read_text().splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "scripts").glob("*.py") if p.name != "repo_venv.py"))
def test_scripts_run_with_a_python_outside_the_venv(script, tmp_path):
    """As the .sh callers do, scripts/*.py take the repository's .venv (made by make install), from any folder."""
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run([python, ROOT / "scripts" / script, "--help"], cwd=tmp_path, env=env, capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert proc.stdout.decode().startswith("usage: ")
