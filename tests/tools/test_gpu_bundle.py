"""The offline bundle for a GPU node: its manifest, the checks before installing, the install and import check.

The build itself (a Python 3.12 environment with the node's torch, ~4.7 GB, and fairseq compiled against it) is not
run here: results/gpu-check/README.md records it and its install into a simulated node."""

import json
import subprocess
import sys
import zipfile

import pytest
from helpers import ROOT

from fairseq_residual_tools import gpu_bundle
from fairseq_residual_tools.errors import UserError


def make_wheel(folder, name="tinydist", version="1.0", tags="py3-none-any", module_text="VALUE = 41 + 1\n"):
    """A minimal installable wheel holding one module ``name``."""
    path = folder / f"{name}-{version}-{tags}.whl"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": module_text,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {tags}\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{f},,\n" for f in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as z:
        for member, text in files.items():
            z.writestr(member, text)
    return path


@pytest.fixture
def bundle(tmp_path, monkeypatch):
    folder = tmp_path / "bundle"
    folder.mkdir()
    make_wheel(folder)
    make_wheel(folder, "otherdist", "2.0")
    monkeypatch.setattr(gpu_bundle, "_installed_version", lambda name: {"torch": "2.11.0+cu130"}.get(name))
    record = gpu_bundle.manifest(folder, "2.11.0")
    (folder / gpu_bundle.MANIFEST).write_text(json.dumps(record))
    return folder


def test_the_manifest_names_every_wheel_with_version_and_sha256(bundle):
    record = json.loads((bundle / gpu_bundle.MANIFEST).read_text())
    assert [(f["name"], f["version"], f["tags"]) for f in record["files"]] == [
        ("otherdist", "2.0", "py3-none-any"),
        ("tinydist", "1.0", "py3-none-any"),
    ]
    for entry in record["files"]:
        assert entry["sha256"] == gpu_bundle.sha256(bundle / entry["file"]) and len(entry["sha256"]) == 64
    assert record["bytes"] == sum((bundle / f["file"]).stat().st_size for f in record["files"])
    assert record["torch"] == "2.11.0" and record["source_sha256"] == gpu_bundle.source_digest()
    assert [p.name for p in gpu_bundle.verify(bundle)] == [f["file"] for f in record["files"]]


def test_every_bundled_distribution_is_pinned_in_the_tested_constraints():
    pins = gpu_bundle.read_pins(ROOT / "constraints.txt")
    assert [name for name in gpu_bundle.BUNDLED if gpu_bundle.normalise(name) not in pins] == []
    assert gpu_bundle.read_pins(gpu_bundle.BUILD_PINS)["torch"] == "2.11.0"


def break_it(bundle, how):
    if how == "missing":
        (bundle / "tinydist-1.0-py3-none-any.whl").unlink()
    elif how == "corrupt":
        with open(bundle / "tinydist-1.0-py3-none-any.whl", "ab") as f:
            f.write(b"x")
    elif how == "unlisted":
        make_wheel(bundle, "stranger", "0.1")
    elif how == "no manifest":
        (bundle / gpu_bundle.MANIFEST).unlink()


@pytest.mark.parametrize(
    "how, message",
    [
        ("missing", "lacks tinydist-1.0-py3-none-any.whl (tinydist 1.0), which its manifest lists"),
        ("corrupt", "tinydist-1.0-py3-none-any.whl differs from the manifest's sha256"),
        ("unlisted", "holds stranger-0.1-py3-none-any.whl, which its manifest does not list"),
        ("no manifest", "has no manifest.json: not a complete bundle"),
    ],
)
def test_a_wrong_or_missing_wheel_is_named_in_one_line(bundle, how, message):
    break_it(bundle, how)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gpu_bundle.verify(bundle)


def test_a_wheel_for_another_python_or_a_node_with_another_torch_is_refused(bundle, monkeypatch):
    record = json.loads((bundle / gpu_bundle.MANIFEST).read_text())
    other = make_wheel(bundle, "compiled", "1.0", tags="cp27-cp27mu-manylinux1_x86_64")
    record["files"].append(
        {"file": other.name, **gpu_bundle.wheel_fields(other.name), "sha256": gpu_bundle.sha256(other)}
    )
    (bundle / gpu_bundle.MANIFEST).write_text(json.dumps(record))
    with pytest.raises(UserError, match=r"compiled 1.0\) is built for cp27-cp27mu-manylinux1_x86_64, which this"):
        gpu_bundle.verify(bundle)
    other.unlink()
    record["files"].pop()
    (bundle / gpu_bundle.MANIFEST).write_text(json.dumps(record))
    monkeypatch.setattr(gpu_bundle, "_installed_version", lambda name: "2.12.1+cu130")
    with pytest.raises(UserError, match="built against torch 2.11.0, but this node has torch 2.12.1"):
        gpu_bundle.verify(bundle)


def test_install_puts_the_wheels_into_the_target_offline_and_names_an_import_that_fails(bundle, tmp_path, monkeypatch):
    target = tmp_path / "target"
    monkeypatch.setattr(gpu_bundle, "IMPORTS", {"tinydist": "tinydist", "otherdist": "otherdist"})
    gpu_bundle.install(gpu_bundle.parse_args(["install", "--bundle", str(bundle), "--target", str(target)]))
    assert (target / "tinydist.py").read_text() == "VALUE = 41 + 1\n" and (target / "otherdist.py").is_file()
    code = "import tinydist; print(tinydist.VALUE)"
    env = {"PYTHONPATH": gpu_bundle.python_path(target)}
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout == "42\n"
    monkeypatch.setattr(gpu_bundle, "IMPORTS", {"tinydist": "tinydist", "fairseq.no_such_module": "fairseq-fixed"})
    with pytest.raises(
        UserError,
        match=r"import fairseq.no_such_module fails \(ModuleNotFoundError: .*the bundle's "
        r"fairseq-fixed wheel does not fit this node, or is missing",
    ):
        gpu_bundle.check_imports(target)


def test_the_command_line_reports_a_bad_bundle_in_one_line(tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "fairseq_residual_tools.gpu_bundle",
        "install",
        "--bundle",
        str(tmp_path),
        "--target",
        str(tmp_path / "t"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"error: {tmp_path} has no manifest.json: not a complete bundle (make one with make gpu-bundle)"
    ]
