"""fairseq_residual: ResiDual (Xie et al. 2023) and its baselines as a fairseq plugin.

Use it as ``--user-dir fairseq_residual`` (or ``common.user_dir`` with hydra);
importing the package registers the ``residual_transformer`` model and presets,
allows fairseq's checkpoint contents through torch's safe loader, keeps the
last batch that fairseq's batching drops (see ``batching_fix``), makes every
checkpoint file complete after a kill and resuming skip an unreadable one
(``checkpoint_saving``, ``checkpoint_reading``), checks the data folder
(``data_folder``), and makes user errors print as one line. It first silences the known
third-party warnings and log lines (``quiet``; ``FAIRSEQ_RESIDUAL_VERBOSE=1`` shows them).
"""

from . import quiet

quiet.apply()  # before fairseq is imported below

from . import (  # noqa: E402
    architectures,  # noqa: F401  (registers the presets)
    batching_fix,
    checkpoint_loading,
    checkpoint_reading,
    checkpoint_saving,
    data_folder,
    errors,
    model,  # noqa: F401  (registers the model)
)

checkpoint_loading.allow_fairseq_checkpoints()
batching_fix.apply()
checkpoint_saving.apply()
checkpoint_reading.apply()
data_folder.apply()
errors.install_excepthook()

__version__ = "0.1.0"
