"""Reproducing the paper's tables: one cell = one dataset, scheme and depth.

* ``cells``: the cells, read from the paper's tables (``results/paper/``), and how each is evaluated;
* ``launch``: the training command of a cell (one GPU, torchrun, srun), the batch kept at the
  paper's size, resume and logs; ``distributed_train``: the per-process entry point;
* ``averaging``, ``scoring``, ``evaluate``: checkpoint averaging, BLEU as the paper scores it,
  the per-cell JSON;
* ``tables``: ``results/tables.md``, measured beside the paper's figures;
* ``estimates``: GPU-hour estimates per cell;
* ``cli``: what ``scripts/train.sh``, ``evaluate.sh``, ``reproduce.sh`` and ``make_tables.py`` run.
"""
