"""Speed and memory of the residual schemes beside fairseq's stock transformer (``make bench``).

For each model size (``variants.SIZES``), the same synthetic batches (``data``) go through
fairseq's stock ``transformer`` as Post-LN and Pre-LN and through ``residual_transformer``
with the size's schemes (``variants``). Measured (``steps``): one training step (forward,
label-smoothed cross entropy, backward, Adam) and beam-5 generation of a fixed length.

* ``timing``: warm-up, then interleaved rounds (A B C A B C ...); each ratio to stock Pre-LN
  is taken within a round, and reported as median (min-max) over the rounds;
* ``memory``: the peak of one training step's live tensors plus parameters and Adam state,
  the rise of the process's resident memory, and what autograd saves for backward;
* ``measure``: each size in fresh processes (``isolation``), several of them with the
  variants built in rotated orders ("layouts", pooled), as the heap a model's tensors land
  in moves its speed by a few percent;
* ``report``: ``bench.json`` and ``bench.md`` with the ratios and the goals they are checked on.

``cli`` is ``scripts/bench.py``. How the measurement was arrived at, and every recorded run:
``results/bench/README.md``.
"""
