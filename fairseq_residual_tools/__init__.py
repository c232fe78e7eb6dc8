"""fairseq_residual_tools: data preparation, the reproduction harness, probes and studies, the demo and the
benchmark around the plugin (``fairseq_residual``). Nothing here imports fairseq or torch at package level,
so data preparation starts instantly; the modules that train or build models import them where they need them.
"""

import importlib.util
import os
import sys


def quiet_third_party():
    """The plugin's filters of known third-party lines (``fairseq_residual/quiet.py``), installed before
    fairseq is imported; loaded from its file because the plugin's ``__init__`` imports fairseq."""
    if "fairseq_residual.quiet" not in sys.modules:
        plugin = importlib.util.find_spec("fairseq_residual")  # finds the package without running it
        assert plugin is not None, "fairseq_residual is not importable"
        path = os.path.join(list(plugin.submodule_search_locations or [])[0], "quiet.py")
        spec = importlib.util.spec_from_file_location("fairseq_residual.quiet", path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    sys.modules["fairseq_residual.quiet"].apply()
