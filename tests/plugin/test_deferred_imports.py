"""fairseq starts without scikit-learn and SciPy (fairseq_residual/deferred_imports.py): the two fairseq modules
that import them get stand-ins that give the real functions' results when called; no other import changes."""

import importlib
import json
import subprocess
import sys

import pytest

from fairseq_residual import deferred_imports

#: run in a fresh interpreter of this environment: what importing fairseq's training CLI loaded, then the deferred
#: names' results beside the libraries' own, computed after them
PROBE = """
import json, sys
import fairseq_cli.train
from fairseq.criterions import sentence_prediction as sp
from fairseq.tasks import audio_classification as ac
loaded = sorted(n for n in ("sklearn", "sklearn.metrics", "scipy", "scipy.stats") if n in sys.modules)
preds, labels = [1, 0, 1, 1, 0, 1], [1, 0, 0, 1, 1, 1]
import numpy as np
ours = [sp.acc_and_f1(np.array(preds), np.array(labels))["f1"], sp.matthews_corrcoef(preds, labels),
        *sp.pearson_and_spearman(np.array(preds), np.array(labels)).values()]
ours.append(ac.sklearn_metrics.roc_curve([0, 1, 1, 0], [0.1, 0.8, 0.3, 0.4])[1].tolist())
from scipy.stats import pearsonr, spearmanr
from sklearn import metrics
p, s = pearsonr(preds, labels)[0], spearmanr(preds, labels)[0]
theirs = [metrics.f1_score(labels, preds), metrics.matthews_corrcoef(labels, preds), p, s, (p + s) / 2,
          metrics.roc_curve([0, 1, 1, 0], [0.1, 0.8, 0.3, 0.4])[1].tolist()]
real = [type(sys.modules[n]).__name__ for n in ("sklearn", "sklearn.metrics", "scipy.stats")]
print(json.dumps({"loaded_by_fairseq": loaded, "ours": [float(x) if not isinstance(x, list) else x for x in ours],
                  "theirs": [float(x) if not isinstance(x, list) else x for x in theirs], "module_types": real}))
"""


@pytest.mark.parametrize("verbose", ["", "1"])
def test_fairseq_starts_without_sklearn_and_scipy_and_their_functions_give_the_libraries_results(verbose):
    env = {"FAIRSEQ_RESIDUAL_VERBOSE": verbose, "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout)
    assert probe["loaded_by_fairseq"] == []  # the .pth installed the finder before fairseq was imported
    assert probe["ours"][:5] == pytest.approx(probe["theirs"][:5], abs=1e-12)
    assert probe["ours"][5] == probe["theirs"][5] == [0.0, 0.5, 0.5, 1.0, 1.0]
    assert probe["module_types"] == ["module", "module", "module"]  # afterwards the real libraries


@pytest.fixture
def consumer(tmp_path, monkeypatch):
    """A package ``heavylib`` (counting its imports) and a module ``consumer`` taking a function from it."""
    (tmp_path / "heavylib").mkdir()
    (tmp_path / "heavylib" / "__init__.py").write_text("import builtins\nbuiltins.heavylib_imports += 1\n")
    (tmp_path / "heavylib" / "stats.py").write_text("def double(x):\n    return 2 * x\n")
    (tmp_path / "consumer.py").write_text("from heavylib.stats import double\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("builtins.heavylib_imports", 0, raising=False)
    monkeypatch.setitem(deferred_imports.DEFERRED, "consumer", ("heavylib", "heavylib.stats"))
    finder = deferred_imports.DeferredImportsFinder()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    yield
    for name in ("consumer", "heavylib", "heavylib.stats"):
        sys.modules.pop(name, None)


def test_the_library_is_imported_at_the_first_call_and_no_stand_in_stays_in_sys_modules(consumer):
    import builtins

    import consumer as module

    assert builtins.heavylib_imports == 0 and "heavylib" not in sys.modules
    assert type(module.double).__name__ == "Deferred"
    assert module.double(21) == 42
    assert builtins.heavylib_imports == 1 and type(sys.modules["heavylib.stats"]).__name__ == "module"
    assert module.double(1) == 2 and builtins.heavylib_imports == 1


def test_a_library_imported_before_is_bound_as_it_is(consumer):
    stats = importlib.import_module("heavylib.stats")  # first
    module = importlib.import_module("consumer")
    assert module.double is stats.double


def test_an_error_in_the_module_leaves_no_stand_in_behind(consumer, tmp_path):
    (tmp_path / "consumer.py").write_text("from heavylib.stats import double\nraise RuntimeError('in consumer')\n")
    with pytest.raises(RuntimeError, match="in consumer"):
        import consumer  # noqa: F401
    assert "heavylib" not in sys.modules and "heavylib.stats" not in sys.modules


def test_install_puts_one_finder_first_however_often_it_runs(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if type(f).__name__ != "DeferredImportsFinder"])
    deferred_imports.install()
    deferred_imports.install()
    names = [type(f).__name__ for f in sys.meta_path]
    assert names[0] == "DeferredImportsFinder" and names.count("DeferredImportsFinder") == 1
