"""fairseq_residual: ResiDual (Xie et al. 2023) and its baselines as a fairseq plugin.

Use it as ``--user-dir fairseq_residual`` (or ``common.user_dir`` with hydra);
importing the package first silences the known third-party warnings and log lines
(``quiet``; ``FAIRSEQ_RESIDUAL_VERBOSE=1`` shows them), then registers the
``residual_transformer`` model, the ``residual_transformer_lm`` language model and their
presets, the criteria ``fused_label_smoothed_cross_entropy`` and ``fused_cross_entropy`` (fairseq's two, without
materialising the logits: ``criterions``), and applies the changes to fairseq listed in ``patches.PATCHES``: fairseq's
checkpoint contents through torch's safe loader, the last batch that fairseq's batching
drops, checkpoint files complete after a kill, resuming that skips an unreadable one, a
finished training that a re-run leaves as it is, data-folder checks, a word on
fairseq-interactive input that is not UTF-8 and one-line user errors (docs/patches.md).
"""

from . import deferred_imports, quiet

quiet.apply()  # before fairseq is imported below
deferred_imports.install()  # done already where the .pth ran; an install without it (pip --target) starts faster too

from . import (  # noqa: E402
    architectures,  # noqa: F401  (registers the presets)
    criterions,  # noqa: F401  (registers fused_label_smoothed_cross_entropy and fused_cross_entropy)
    language_model,  # noqa: F401  (registers the language model and its presets)
    model,  # noqa: F401  (registers the model)
    patches,
)

patches.apply_all()

__version__ = "0.1.0"
