"""Reproducing the paper's tables (docs/reproduce.md); ``cli`` is what scripts/train.sh and its siblings run."""
