"""Speed and memory of the residual schemes beside fairseq's stock transformer (``make bench``); how the
measurement was arrived at: ``results/bench/README.md``."""
