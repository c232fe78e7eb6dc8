"""Synthetic batches: real (non-special) tokens, fixed lengths, no padding, a fixed seed."""

from typing import Dict

import torch
from fairseq.data import Dictionary


class SyntheticTask:
    """The dictionaries fairseq's build_model needs: ``vocab`` real symbols plus the specials."""

    def __init__(self, vocab: int):
        self.source_dictionary = self.target_dictionary = Dictionary()
        for i in range(vocab):
            self.source_dictionary.add_symbol(f"w{i}")


def synthetic_batch(task, batch: int, src_len: int, tgt_len: int, seed: int = 0) -> Dict:
    """A fairseq translation sample of ``batch`` sentences, every source and target ending in EOS."""
    d = task.target_dictionary
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (batch, src_len), generator=g)
    target = torch.randint(d.nspecial, len(d), (batch, tgt_len), generator=g)
    src[:, -1] = target[:, -1] = d.eos()
    prev = torch.cat((target.new_full((batch, 1), d.eos()), target[:, :-1]), dim=1)
    return {
        "net_input": {
            "src_tokens": src,
            "src_lengths": torch.full((batch,), src_len, dtype=torch.long),
            "prev_output_tokens": prev,
        },
        "target": target,
        "ntokens": target.numel(),
    }
