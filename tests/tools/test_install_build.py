"""``make install`` builds fairseq-fixed's compiled extensions without a race.

fairseq-fixed's setup.py builds all six of its extensions (libbleu, the two Cython modules, three torch C++ ones)
with torch's ``BuildExtension``. Where ninja is installed, ``BuildExtension`` compiles an extension by writing
``<build_temp>/build.ninja`` and running ninja on it, and setuptools gives every extension the same build_temp. With
``[build_ext] parallel`` above 1, two extensions compiled at once overwrite each other's build file, so one ninja
run builds the other extension's objects and the link of the first cannot find its own ("ld: cannot find
.../data_utils_fast.o"): 2 of 7 fresh installs failed so on 1e6b799.

The tests build two tiny C++ extensions the same way (torch's ``BuildExtension``, one build folder), with both
compiles held, their build files written, until the other's is written too, so that the overlap that happens
by chance in a real install happens every time here.
"""

import re
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("ninja") is None, reason="the race is ninja's build file: no ninja, no race"),
]

#: setup.py of the two extensions; each compile, its build.ninja written, waits (up to WAIT_S s) for the other's
SETUP_PY = textwrap.dedent(
    """
    import os
    import threading

    from setuptools import Extension, setup
    from torch.utils import cpp_extension

    both_compiling = threading.Barrier(2, timeout=float(os.environ["WAIT_S"]))
    write_ninja_file = cpp_extension._write_ninja_file

    def write_then_wait_for_the_other(path, **kwargs):
        write_ninja_file(path, **kwargs)
        try:
            both_compiling.wait()  # both files written before either runs ninja: the later one is what both run
        except threading.BrokenBarrierError:
            pass  # one extension at a time: nobody to wait for

    cpp_extension._write_ninja_file = write_then_wait_for_the_other
    setup(
        name="two_extensions",
        # plain extensions, as fairseq's libbleu and Cython modules: BuildExtension compiles them with ninja too
        ext_modules=[Extension(name, [f"{name}.cpp"], language="c++") for name in ("first", "second")],
        cmdclass={"build_ext": cpp_extension.BuildExtension},
    )
    """
)

SOURCE = textwrap.dedent(
    """
    #include <Python.h>
    static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "{name}", NULL, -1, NULL}};
    PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&module); }}
    """
)


def build_two_extensions(folder, build_ext_config: str, wait_s: float) -> subprocess.CompletedProcess:
    """``setup.py build_ext`` of the two extensions with ``build_ext_config`` as the distutils config file that
    ``make install`` gives fairseq-fixed's build (DIST_EXTRA_CONFIG)."""
    (folder / "setup.py").write_text(SETUP_PY)
    for name in ("first", "second"):
        (folder / f"{name}.cpp").write_text(SOURCE.format(name=name))
    (folder / "build_ext.cfg").write_text(build_ext_config)
    env = {"PATH": "/usr/bin:/bin", "DIST_EXTRA_CONFIG": str(folder / "build_ext.cfg"), "CFLAGS": "-g0"}
    env["WAIT_S"] = str(wait_s)
    return subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"], cwd=folder, env=env, capture_output=True, text=True
    )


def install_build_line() -> str:
    """The command of ``make install`` that builds fairseq-fixed (``make -n``: printed, not run)."""
    recipe = subprocess.run(["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True, text=True, check=True)
    commands = recipe.stdout.replace("\\\n", " ").splitlines()  # a command continued over lines is one
    (line,) = [line for line in commands if "--no-build-isolation" in line]
    return line


def test_two_extensions_built_at_once_overwrite_one_build_file_and_the_link_fails(tmp_path):
    """The cause, on the settings of 1e6b799's Makefile: parallel = the number of cores (2 here)."""
    # built at once, the two meet at the build file even on a loaded machine (they met within 3 s on an idle one,
    # not always on a busy CI run)
    proc = build_two_extensions(tmp_path, "[build_ext]\nparallel = 2\n", wait_s=120)
    assert proc.returncode != 0
    assert re.search(r"(first|second)\.o: No such file or directory|cannot find .*(first|second)\.o", proc.stderr)


def test_the_install_builds_fairseq_extensions_one_at_a_time_and_so_the_same_two_build(tmp_path):
    line = install_build_line()
    assert "fairseq-fixed" in line
    # setuptools builds extensions one at a time unless a config file or --parallel says otherwise
    assert "DIST_EXTRA_CONFIG" not in line and "--parallel" not in line and "-j" not in line.split(), line
    proc = build_two_extensions(tmp_path, "", wait_s=1)  # one at a time: nobody to wait for
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name.split(".")[0] for p in tmp_path.glob("*.so")) == ["first", "second"]
