"""A shim for ``python setup.py develop`` and older pip: every piece of metadata is in pyproject.toml.

It adds the one thing pyproject.toml cannot say: ``fairseq_residual_quiet.pth``, installed into site-packages
beside the packages (by a wheel and by ``pip install -e .``). fairseq's own CLIs import fairseq, and with it
fairscale, before ``--user-dir`` loads the plugin, so fairscale's two import-time FutureWarnings can only be
silenced by a filter that Python installs at startup (fairseq_residual/quiet.py has the others).
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH_NAME = "fairseq_residual_quiet.pth"
#: one line that site.py executes at every start of this environment's Python (a .pth line starting with
#: "import"); it must match the fairscale entry of quiet.KNOWN_WARNINGS (tests/tools/test_packaging.py)
PTH_LINE = (
    'import os, warnings; os.environ.get("FAIRSEQ_RESIDUAL_VERBOSE", "") not in ("", "0") or '
    'warnings.filterwarnings("ignore", message=r"`torch\\.cuda\\.amp\\.custom_(fwd|bwd)\\(args\\.\\.\\.\\)` '
    'is deprecated", category=FutureWarning, module=r"fairscale\\.")\n'
)


class BuildPy(build_py):
    """A wheel carries the .pth at its root, which pip installs into site-packages."""

    def run(self):
        super().run()
        if not self.editable_mode:
            Path(self.build_lib, PTH_NAME).write_text(PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        extra = [] if self.editable_mode else [str(Path(self.build_lib, PTH_NAME))]
        return [*super().get_outputs(include_bytecode), *extra]


class EditableWheel(editable_wheel):
    """``pip install -e .``: the editable wheel's root is where setuptools puts its own .pth files."""

    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        Path(installation_dir, PTH_NAME).write_text(PTH_LINE)


setup(cmdclass={"build_py": BuildPy, "editable_wheel": EditableWheel})
