"""An offline bundle for a GPU node: every wheel such a node lacks, for CPython 3.12 on manylinux x86-64.

The node (an air-gapped cluster node, or the GPU machine lent to this project) has Python 3.12, torch 2.11 with
CUDA 13, numpy 2.x, sacrebleu, sentencepiece and tensorboard, but no fairseq, hydra, omegaconf, sacremoses,
subword-nmt or bitarray, and no network. Two commands:

    python3 -m fairseq_residual_tools.gpu_bundle build --out gpu-bundle          # here (make gpu-bundle)
    python3 -m fairseq_residual_tools.gpu_bundle install --bundle gpu-bundle --target DIR   # on the node

``build`` makes a CPython 3.12 build environment holding the node's torch (constraints-gpu-bundle.txt), builds
fairseq-fixed from its source against that torch (its C++ extensions load only with the torch they were built with;
the wheel on PyPI was built against an older one), tags it with auditwheel, collects the other wheels at
constraints.txt's versions and the project's own wheel, and writes ``manifest.json`` (each file's name, version,
sha256) last: a bundle without one is incomplete. A re-run reuses what is built. ``install`` checks the bundle
against its manifest and this interpreter, installs it with pip ``--no-index --no-deps`` into a target folder, and
imports fairseq, its compiled extensions and the plugin with the node's torch; anything wrong ends in one line
naming the wheel. Standard library only: it runs before fairseq can be imported.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from .errors import UserError, exit_on_user_error
from .files import write_json
from .provenance import git_state

ROOT = Path(__file__).resolve().parents[1]
BUILD_PINS = ROOT / "constraints-gpu-bundle.txt"
MANIFEST = "manifest.json"
MAX_BYTES = 40 * 2**20
PYTHON = "3.12"
#: what the node lacks (fairseq-fixed, its and the project's requirements) or has below the project's requirement
#: (sentencepiece 0.2.2); their versions are constraints.txt's
BUNDLED = (
    "fairseq-fixed",
    "hydra-core",
    "omegaconf",
    "antlr4-python3-runtime",
    "bitarray",
    "cffi",
    "pycparser",
    "sacremoses",
    "subword-nmt",
    "mock",
    "tensorboardX",
    "sacrebleu",
    "tabulate",
    "tqdm",
    "sentencepiece",
)
PROJECT = "fairseq_residual"
#: the import each check needs -> the distribution that provides it (fairseq's compiled extensions included)
IMPORTS = {
    "fairseq": "fairseq-fixed",
    "fairseq.libbleu": "fairseq-fixed",
    "fairseq.libbase": "fairseq-fixed",
    "fairseq.libnat": "fairseq-fixed",
    "fairseq.data.data_utils_fast": "fairseq-fixed",
    "fairseq.data.token_block_utils_fast": "fairseq-fixed",
    "fairseq_cli.train": "fairseq-fixed",
    "hydra": "hydra-core",
    "omegaconf": "omegaconf",
    "bitarray": "bitarray",
    "sacremoses": "sacremoses",
    "subword_nmt.apply_bpe": "subword-nmt",
    "tensorboardX": "tensorboardX",
    "sacrebleu": "sacrebleu",
    "sentencepiece": "sentencepiece",
    "fairseq_residual": PROJECT,
}
#: libraries auditwheel must leave to the torch package installed on the node
TORCH_LIBRARIES = ("libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path) -> Dict[str, str]:
    """``name==version`` lines of a constraints file, by normalised name."""
    pins = {}
    for line in Path(path).read_text().splitlines():
        name, sep, version = line.split("#")[0].strip().partition("==")
        if sep:
            pins[normalise(name)] = version.strip()
    return pins


def wheel_fields(filename: str) -> Dict[str, str]:
    """Distribution, version and tags from a wheel's file name (PEP 427)."""
    parts = Path(filename).name[: -len(".whl")].split("-")
    if not filename.endswith(".whl") or len(parts) not in (5, 6):
        raise UserError(f"{filename} is not a wheel file name (name-version-python-abi-platform.whl)")
    return {"name": normalise(parts[0]), "version": parts[1], "tags": "-".join(parts[-3:])}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def source_digest(root: Path = ROOT) -> str:
    """sha256 over the project's package files (what its wheel holds), to tell whether a bundle's project wheel
    was built from this checkout."""
    digest = hashlib.sha256()
    for package in ("fairseq_residual", "fairseq_residual_tools"):
        for path in sorted((root / package).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".json"):
                digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


# ---- build (here) -------------------------------------------------------------------------------------------


def find_python(requested: Optional[str]) -> str:
    """A CPython 3.12 interpreter: ``requested``, else python3.12 on PATH, else pyenv's."""
    candidates = (
        [requested]
        if requested
        else ["python3.12", *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]
    )
    for candidate in candidates:
        found = shutil.which(candidate) if candidate else None
        if found:
            version = subprocess.run(
                [found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
            ).stdout.strip()
            if version == PYTHON:
                return found
            if requested:
                raise UserError(f"--python {requested} is Python {version}; the bundle is for Python {PYTHON}")
    raise UserError(f"no Python {PYTHON} found: install one (e.g. pyenv install 3.12) or pass --python PATH")


def run(cmd: Sequence[object], what: str, env: Optional[Dict[str, str]] = None, log: Optional[Path] = None):
    """Run a build step; its output goes to ``log`` (if given), its failure becomes one line."""
    args = [str(c) for c in cmd]
    out = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(args)}\n{out.stdout}{out.stderr}")
    if out.returncode != 0:
        last = (out.stderr.strip() or out.stdout.strip() or "(no output)").splitlines()[-1]
        raise UserError(f"{what} failed: {last}" + (f"; full log: {log}" if log else ""))
    return out.stdout


def build_environment(python: str, env: Path) -> Path:
    """The build environment: a venv with constraints-gpu-bundle.txt installed (once: a stamp holds its pins)."""
    stamp, pins = env / ".pins", BUILD_PINS.read_text()
    interpreter = env / "bin" / "python"
    if stamp.exists() and stamp.read_text() == pins:
        return interpreter
    print(
        f"[gpu-bundle] build environment {env} (Python {PYTHON}, torch {read_pins(BUILD_PINS)['torch']}: ~4.7 GB "
        "with its CUDA libraries, downloaded once)",
        flush=True,
    )
    shutil.rmtree(env, ignore_errors=True)
    run([python, "-m", "venv", env], "creating the build environment")
    run(
        [interpreter, "-m", "pip", "install", "--disable-pip-version-check", "-r", BUILD_PINS],
        "installing the build environment",
        log=env.parent / "logs" / "build-env.log",
    )
    stamp.write_text(pins)
    return interpreter


def build_fairseq(python: Path, version: str, work: Path, out: Path) -> None:
    """fairseq-fixed from its sdist against the build environment's torch, without debug symbols, then tagged
    manylinux by auditwheel with torch's libraries left to the node's torch."""
    if list(out.glob(f"fairseq_fixed-{version}-*.whl")):
        return
    raw, logs = work / "fairseq-raw", work / "logs"
    shutil.rmtree(raw, ignore_errors=True)
    print(f"[gpu-bundle] building fairseq-fixed {version} against the node's torch (about 2 min)", flush=True)
    flags = {"CFLAGS": "-g0", "CXXFLAGS": "-g0", "LDFLAGS": "-s", "MAX_JOBS": str(os.cpu_count() or 1)}
    run(
        [
            python,
            "-m",
            "pip",
            "wheel",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "--no-binary",
            "fairseq-fixed",
            f"fairseq-fixed=={version}",
            "-w",
            raw,
        ],
        "building fairseq-fixed",
        env=flags,
        log=logs / "fairseq-wheel.log",
    )
    (wheel,) = raw.glob("*.whl")
    torch_lib = run(
        [python, "-c", "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))"],
        "locating torch",
    ).strip()
    excludes = [arg for lib in TORCH_LIBRARIES for arg in ("--exclude", lib)]
    bin_dir = str(python.parent)
    run(
        [bin_dir + "/auditwheel", "repair", *excludes, "-w", out, wheel],
        "tagging fairseq-fixed (auditwheel)",
        env={"LD_LIBRARY_PATH": torch_lib, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")},
        log=logs / "auditwheel.log",
    )


def collect(python: Path, pins: Dict[str, str], work: Path, out: Path) -> None:
    """The other bundled wheels at constraints.txt's versions (built here where PyPI has no wheel)."""
    wanted = [f"{name}=={pins[normalise(name)]}" for name in BUNDLED if name != "fairseq-fixed"]
    present = {(f["name"], f["version"]) for f in map(wheel_fields, map(str, out.glob("*.whl")))}
    missing = [w for w in wanted if (normalise(w.split("==")[0]), w.split("==")[1]) not in present]
    if missing:
        run(
            [python, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "-w", out, *missing],
            "collecting the wheels",
            log=work / "logs" / "wheels.log",
        )


def build_project(python: Path, work: Path, out: Path) -> None:
    """The project's own wheel, made anew every time (its name does not change with the code)."""
    for old in out.glob(f"{PROJECT}-*.whl"):
        old.unlink()
    run(
        [
            python,
            "-m",
            "pip",
            "wheel",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            out,
            ROOT,
        ],
        "building the project's wheel",
        log=work / "logs" / "project-wheel.log",
    )


def manifest(out: Path, torch_version: str) -> dict:
    files: List[Dict[str, Any]] = []
    for path in sorted(out.glob("*.whl")):
        fields = wheel_fields(path.name)
        files.append({"file": path.name, **fields, "sha256": sha256(path), "bytes": path.stat().st_size})
    total = sum(f["bytes"] for f in files)
    if total > MAX_BYTES:
        raise UserError(f"the bundle holds {total / 2**20:.1f} MiB, over its {MAX_BYTES / 2**20:.0f} MiB limit")
    return {
        "python": PYTHON,
        "torch": torch_version,
        "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(),
        "source_sha256": source_digest(),
        "bytes": total,
        "files": files,
    }


def build(args) -> dict:
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    previous = json.loads((out / MANIFEST).read_text()) if (out / MANIFEST).is_file() else None
    (out / MANIFEST).unlink(missing_ok=True)  # written last: a killed build leaves no complete-looking bundle
    pins = read_pins(ROOT / "constraints.txt")
    python = build_environment(find_python(args.python), work / "build-env")
    for stale in out.glob("*.whl"):  # a wheel of another version than constraints.txt's
        fields = wheel_fields(stale.name)
        if fields["name"] != normalise(PROJECT) and pins.get(fields["name"]) != fields["version"]:
            stale.unlink()
    build_fairseq(python, pins["fairseq-fixed"], work, out)
    collect(python, pins, work, out)
    if not (previous and previous["source_sha256"] == source_digest() and list(out.glob(f"{PROJECT}-*.whl"))):
        build_project(python, work, out)
    record = manifest(out, read_pins(BUILD_PINS)["torch"])
    if previous and previous["files"] == record["files"]:
        write_json(out / MANIFEST, previous)
        print(
            f"[gpu-bundle] {out} is up to date ({len(record['files'])} wheels, built {previous['built']}): "
            "nothing rebuilt"
        )
        return previous
    write_json(out / MANIFEST, record)
    print(
        f"[gpu-bundle] {out}: {len(record['files'])} wheels, {record['bytes'] / 2**20:.1f} MiB, "
        f"for Python {PYTHON} with torch {record['torch']}; manifest {out / MANIFEST}",
        flush=True,
    )
    return record


# ---- install (on the node) ----------------------------------------------------------------------------------


def supported_tags() -> set:
    try:
        from packaging.tags import sys_tags
    except ImportError:  # pip carries its own copy
        from pip._vendor.packaging.tags import sys_tags  # type: ignore[assignment]
    return {str(tag) for tag in sys_tags()}


def verify(bundle: Path) -> List[Path]:
    """The bundle's wheels, checked against its manifest, this interpreter and the node's torch."""
    if not (bundle / MANIFEST).is_file():
        raise UserError(f"{bundle} has no {MANIFEST}: not a complete bundle (make one with make gpu-bundle)")
    record = json.loads((bundle / MANIFEST).read_text())
    tags, wheels = supported_tags(), []
    for entry in record["files"]:
        path = bundle / entry["file"]
        what = f"{entry['file']} ({entry['name']} {entry['version']})"
        if not path.is_file():
            raise UserError(f"{bundle} lacks {what}, which its manifest lists: copy the whole bundle again")
        if sha256(path) != entry["sha256"]:
            raise UserError(
                f"{bundle}/{entry['file']} differs from the manifest's sha256: a corrupt or replaced "
                "file; copy the bundle again or rebuild it with make gpu-bundle"
            )
        python, abi, platforms = entry["tags"].split("-")
        if not any(
            f"{p}-{a}-{plat}" in tags
            for p in python.split(".")
            for a in abi.split(".")
            for plat in platforms.split(".")
        ):
            raise UserError(
                f"{what} is built for {entry['tags']}, which this Python ({sys.version.split()[0]}) "
                f"cannot install: build the bundle for this node (make gpu-bundle)"
            )
        wheels.append(path)
    listed = {e["file"] for e in record["files"]}
    extra = sorted(p.name for p in bundle.glob("*.whl") if p.name not in listed)
    if extra:
        raise UserError(f"{bundle} holds {extra[0]}, which its manifest does not list: rebuild with make gpu-bundle")
    node_torch = _installed_version("torch")
    if node_torch is None:
        raise UserError("torch is not installed in this Python: the bundle expects the node's own torch")
    if node_torch.split("+")[0] != record["torch"]:
        raise UserError(
            f"the bundle's fairseq extensions are built against torch {record['torch']}, but this node "
            f"has torch {node_torch}: rebuild with torch=={node_torch.split('+')[0]} in "
            "constraints-gpu-bundle.txt"
        )
    if record.get("source_sha256") != source_digest():
        print(
            f"[gpu-bundle] note: the bundle's {PROJECT} wheel was built from other sources than this checkout "
            f"(commit {(record.get('git') or {}).get('commit')}); the check runs this checkout's code",
            flush=True,
        )
    return wheels


def _installed_version(distribution: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def check_imports(target: Path, python: str = sys.executable) -> None:
    """Import every module the checks need, with the target and this checkout first on the path."""
    code = (
        "import importlib, sys\n"
        "import torch\n"  # fairseq's C++ extensions resolve their symbols in the node's torch
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        print(name, type(e).__name__, str(e).splitlines()[0] if str(e) else '', sep='\\t')\n"
        "        raise SystemExit(1)\n"
    )
    env = {**os.environ, "PYTHONPATH": python_path(target)}
    out = subprocess.run([python, "-c", code, *IMPORTS], capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        failed = [line for line in out.stdout.splitlines() if "\t" in line]
        if not failed:
            raise UserError(f"importing the bundle failed: {(out.stderr.strip() or '(no output)').splitlines()[-1]}")
        name, kind, message = (failed[-1].split("\t") + ["", ""])[:3]
        raise UserError(
            f"with the bundle installed, import {name} fails ({kind}: {message}): the bundle's "
            f"{IMPORTS[name]} wheel does not fit this node, or is missing; rebuild with make gpu-bundle"
        )


def python_path(target: Path) -> str:
    """This checkout first (its scripts and configs go with its code), then the bundle, then what was set."""
    return os.pathsep.join([str(ROOT), str(target), *filter(None, [os.environ.get("PYTHONPATH")])])


def install(args) -> None:
    bundle, target = Path(args.bundle), Path(args.target)
    wheels = verify(bundle)
    target.mkdir(parents=True, exist_ok=True)
    # pip byte-compiles what it installs: Python 3.12 would otherwise compile fairseq's sources in every fresh
    # process and print their SyntaxWarnings (invalid escape sequences in fairseq's own code) on stderr
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--no-deps", "--quiet"]
    run([*pip, "--target", target, *wheels], f"pip install of {bundle}")
    check_imports(target)
    print(
        f"[gpu-bundle] {len(wheels)} wheels from {bundle} installed into {target}; fairseq, its compiled "
        f"extensions and {PROJECT} import with torch {_installed_version('torch')}",
        flush=True,
    )


def parse_args(argv: Sequence[str]):
    parser = argparse.ArgumentParser(
        prog="python -m fairseq_residual_tools.gpu_bundle", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build", help="build the bundle here (needs PyPI and a Python 3.12)")
    b.add_argument("--out", default=str(ROOT / "gpu-bundle"), help="the bundle folder (default gpu-bundle/)")
    b.add_argument("--work", default=str(ROOT / "work" / "gpu-bundle"), help="build environment and logs")
    b.add_argument("--python", help="a CPython 3.12 interpreter (default: python3.12 on PATH, else pyenv's)")
    i = commands.add_parser("install", help="check and install a bundle into a folder (offline)")
    i.add_argument("--bundle", required=True, help="the bundle folder")
    i.add_argument("--target", required=True, help="the folder to install into (then first on PYTHONPATH)")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return exit_on_user_error(build if args.command == "build" else install, args)


if __name__ == "__main__":
    raise SystemExit(main())
