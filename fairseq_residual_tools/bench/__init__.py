"""Speed and memory of the residual schemes beside fairseq's stock transformer (``make bench``).

The same synthetic batches (``data``) go through fairseq's stock ``transformer`` as Post-LN and Pre-LN
and through ``residual_transformer`` with each size's schemes (``variants``): a training step and
beam-5 generation (``steps``), timed in interleaved rounds with ratios to stock Pre-LN (``timing``),
and a training step's peak memory (``memory``), on the CPU or a GPU (``device``). ``measure`` runs
each size in fresh processes (``isolation``); ``report`` writes ``bench.json`` and ``bench.md``;
``cli`` is ``scripts/bench.py``. How the measurement was arrived at: ``results/bench/README.md``.
"""
