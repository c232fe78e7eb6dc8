"""Reproducing the paper's tables (docs/reproduce.md): one cell = one dataset, scheme and depth.

``cli`` is what ``scripts/train.sh``, ``evaluate.sh``, ``reproduce.sh`` and ``make_tables.py`` run.
"""
