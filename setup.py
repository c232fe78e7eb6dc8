"""A shim for ``python setup.py develop`` and older pip: every piece of metadata is in pyproject.toml.

It adds the one thing pyproject.toml cannot say: ``fairseq_residual_quiet.pth``, installed into site-packages
beside the packages (by a wheel and by ``pip install -e .``). fairseq's own CLIs print some third-party lines
before ``--user-dir`` (or ``common.user_dir``) loads the plugin: fairscale's import-time FutureWarnings, hydra's
notes while fairseq-hydra-train composes its config. Only filters that Python installs at startup silence those;
the .pth's one line installs them (``fairseq_residual/quiet.py``'s ``startup_line``, which has the others too).
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "fairseq_residual_quiet.pth"


def pth_line() -> str:
    """quiet.py's startup line; the module is loaded from its file (the package's ``__init__`` imports fairseq)."""
    spec = importlib.util.spec_from_file_location("quiet", Path(__file__).parent / "fairseq_residual" / "quiet.py")
    assert spec is not None and spec.loader is not None
    quiet = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(quiet)
    return quiet.startup_line()


class BuildPy(build_py):
    """A wheel carries the .pth at its root, which pip installs into site-packages."""

    def run(self):
        super().run()
        if not self.editable_mode:
            Path(self.build_lib, PTH_NAME).write_text(pth_line())

    def get_outputs(self, include_bytecode=True):
        extra = [] if self.editable_mode else [str(Path(self.build_lib, PTH_NAME))]
        return [*super().get_outputs(include_bytecode), *extra]


class EditableWheel(editable_wheel):
    """``pip install -e .``: the editable wheel's root is where setuptools puts its own .pth files."""

    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        Path(installation_dir, PTH_NAME).write_text(pth_line())


setup(cmdclass={"build_py": BuildPy, "editable_wheel": EditableWheel})
