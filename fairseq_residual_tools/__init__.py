"""fairseq_residual_tools: everything around the plugin -- data preparation, the reproduction
harness, probes and studies, the demo and the benchmark.

The plugin (``fairseq_residual``) is what ``--user-dir`` loads; importing it loads fairseq and
torch. This package imports neither at package level, so data preparation starts instantly;
the modules that train, generate or build models import them where they need them.
"""
