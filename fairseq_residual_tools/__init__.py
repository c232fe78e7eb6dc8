"""fairseq_residual_tools: data preparation, the reproduction harness, probes and studies, the demo and the
benchmark around the plugin (``fairseq_residual``). Nothing here imports fairseq or torch at package level,
so data preparation starts instantly; the modules that train or build models import them where they need them.
"""
