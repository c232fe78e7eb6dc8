"""Speed and memory of the residual schemes beside fairseq's stock transformer (``make bench``).

``variants``: what is compared; ``steps``: the timed work; ``measure``: interleaved timing, each size in
fresh processes (``isolation``); ``memory``: a training step's peak; ``report``: ``bench.json`` and
``bench.md``; ``cli``: ``scripts/bench.py``. How the measurement was arrived at: ``results/bench/README.md``.
"""
