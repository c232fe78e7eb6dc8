"""Measuring the paper's claims on CPU: ``probes`` (per-block gradient norms and the diversity of adjacent
block inputs, Theorems 3.1-3.6 of Xie et al. 2023; ``plotting`` draws them) and ``study`` (a small-scale
depth x warmup analogue of the paper's warmup-ablation table, trained on the embedded synthetic corpus)."""
