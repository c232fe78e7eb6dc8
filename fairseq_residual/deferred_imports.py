"""fairseq without scikit-learn and SciPy at start-up: 2.5 of the 6 CPU seconds of importing fairseq_cli.train.

fairseq imports every task and criterion when it starts. Two of them import scikit-learn and SciPy at their top
for metrics of tasks a translation or language-model run never uses (sentence prediction's F1, MCC and
correlations; audio classification's ROC curve). While those two modules are imported, the names they take from
``sklearn`` and ``scipy.stats`` are bound to stand-ins that import the real object when first called or read;
any other import of those libraries, before or after, is the real one. A library already imported is used as it
is.

``install()`` runs at every start of the environment's Python, from the line of ``fairseq_residual_quiet.pth``
(fairseq's CLIs import fairseq before ``--user-dir`` loads the plugin), and again, doing nothing the second time,
when the plugin is imported. Standard library only: the .pth loads this file by its path, without the package's
``__init__`` (which imports fairseq).
"""

import importlib
import importlib.abc
import sys
import types

#: fairseq module -> the modules it imports at its top for those metrics only
DEFERRED = {
    "fairseq.criterions.sentence_prediction": ("sklearn", "sklearn.metrics", "scipy", "scipy.stats"),
    "fairseq.tasks.audio_classification": ("sklearn", "sklearn.metrics"),
}


class Deferred:
    """``module.name``, imported when first called or when one of its attributes is read."""

    def __init__(self, module: str, name: str):
        self._module, self._name = module, name

    def resolve(self):
        module = importlib.import_module(self._module)
        try:
            return getattr(module, self._name)
        except AttributeError:  # a submodule its package does not import itself (``sklearn.metrics``)
            return importlib.import_module(f"{self._module}.{self._name}")

    def __call__(self, *args, **kwargs):
        return self.resolve()(*args, **kwargs)

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self.resolve(), attr)

    def __repr__(self):
        return f"<deferred {self._module}.{self._name}>"


class StandIn(types.ModuleType):
    """In ``sys.modules`` only while a module of ``DEFERRED`` runs its imports: each name read is ``Deferred``."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Deferred(self.__name__, name)


class _WithStandIns(importlib.abc.Loader):
    """The module's own loader, run with stand-ins for the libraries of ``DEFERRED`` not imported yet."""

    def __init__(self, loader, libraries):
        self.loader, self.libraries = loader, libraries

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def __getattr__(self, name):  # get_source, get_filename, ...: tracebacks and inspect read the file as before
        return getattr(self.loader, name)

    def exec_module(self, module):
        placed = {name: StandIn(name) for name in self.libraries if name not in sys.modules}
        sys.modules.update(placed)
        try:
            self.loader.exec_module(module)
        finally:
            for name, stand_in in placed.items():
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]


class DeferredImportsFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of ``DEFERRED`` with the other finders and wraps their loaders."""

    def find_spec(self, name, path, target=None):
        if name not in DEFERRED:
            return None
        for finder in sys.meta_path:
            if type(finder).__name__ == type(self).__name__ or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _WithStandIns(spec.loader, DEFERRED[name])
                return spec
        return None


def install() -> None:
    """Put the finder first on ``sys.meta_path``, once per process (a second copy of this file finds it there)."""
    if not any(type(finder).__name__ == DeferredImportsFinder.__name__ for finder in sys.meta_path):
        sys.meta_path.insert(0, DeferredImportsFinder())
