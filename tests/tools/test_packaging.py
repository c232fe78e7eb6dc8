"""The package as pip and ``python -m build`` see it: metadata from pyproject.toml only (setup.py is a shim), a
wheel and an sdist with the plugin, the tools and the hydra configs, and an install into a fresh venv."""

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from fairseq_residual.quiet import KNOWN_WARNINGS, VERBOSE_VARIABLE, startup_line

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
    """The .pth file's line, as setup.py writes it."""
    return startup_line()


#: run as a program under two names by ``filters_at_startup``: what the .pth line installed when Python started
STARTUP_PROBE = """
import json, site, sys, warnings
site.addsitedir(sys.argv[1])  # the folder holding the .pth: processed as site.py processes site-packages
imported_logging = "logging" in sys.modules
filters = [(f[1].pattern, f[2].__name__, f[3].pattern if f[3] else "") for f in warnings.filters if f[1]]
import logging
hydra = logging.getLogger("hydra.core.utils")
shown = [hydra.filter(logging.makeLogRecord({"msg": m})) for m in ("Setting JobRuntime:name=x", "other")]
print(json.dumps({"logging": imported_logging, "filters": filters, "hydra_records_shown": shown}))
"""


def filters_at_startup(tmp_path, program, **env):
    site_dir = tmp_path / "site"
    site_dir.mkdir(exist_ok=True)
    (site_dir / PTH).write_text(pth_line())
    (tmp_path / program).write_text(STARTUP_PROBE)
    # without PYTHONWARNINGS (a CI machine may set one, e.g. ignore:semaphore_tracker): only the .pth's filters
    env = {**{k: v for k, v in os.environ.items() if k not in (VERBOSE_VARIABLE, "PYTHONWARNINGS")}, **env}
    # -S: no site-packages of this environment (its own, possibly older, .pth); -W default: no -W of the caller's
    command = [sys.executable, "-S", "-W", "default", str(tmp_path / program), str(site_dir)]
    return json.loads(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout)


def test_the_pth_line_installs_quiet_pys_startup_filters_and_hydras_log_filter_under_fairseq_hydra_train(tmp_path):
    startup = [(k.message, k.category.__name__, k.module) for k in KNOWN_WARNINGS if k.at_startup]
    assert len(startup) == 3 and pth_line().startswith("import ") and pth_line().count("\n") == 1
    hydra_train = filters_at_startup(tmp_path, "fairseq-hydra-train")
    assert sorted(map(tuple, hydra_train["filters"])) == sorted(startup)
    assert hydra_train["hydra_records_shown"] == [False, True]
    other = filters_at_startup(tmp_path, "some-program")
    assert sorted(map(tuple, other["filters"])) == sorted(startup)
    assert other["hydra_records_shown"] == [True, True] and not other["logging"]  # no program pays for logging
    verbose = filters_at_startup(tmp_path, "fairseq-hydra-train", **{VERBOSE_VARIABLE: "1"})
    assert verbose["filters"] == [] and verbose["hydra_records_shown"] == [True, True]


def test_this_environment_has_this_sources_pth_line():
    """fairseq's own CLIs are quiet only with the line of the installed sources: a stale one needs make install."""
    installed = Path(sysconfig.get_path("purelib")) / PTH
    assert installed.read_text() == pth_line(), f"{installed} is not this source's line: run make install"


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
        "deferring = [type(f).__name__ for f in sys.meta_path].count('DeferredImportsFinder')\n"
        "print(json.dumps([Path(d.__file__).is_file(), sys.prefix, deferring]))\n"
    )
    out = subprocess.run([venv / "bin" / "python", "-c", code], capture_output=True, text=True, check=True).stdout
    imported, prefix, deferring = json.loads(out)
    assert imported and deferring == 1  # the .pth found deferred_imports.py in the wheel's layout
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
