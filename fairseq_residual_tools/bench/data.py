"""Synthetic batches: real (non-special) tokens, fixed lengths, no padding, a fixed seed."""

from typing import Dict

import torch
from fairseq.data import Dictionary
from fairseq.utils import apply_to_sample


class SyntheticTask:
    """The dictionaries fairseq's build_model needs: ``vocab`` real symbols plus the specials."""

    def __init__(self, vocab: int):
        self.source_dictionary = self.target_dictionary = Dictionary()
        for i in range(vocab):
            self.source_dictionary.add_symbol(f"w{i}")


def synthetic_batch(task, batch: int, src_len: int, tgt_len: int, seed: int = 0, device: str = "cpu") -> Dict:
    """A fairseq translation sample of ``batch`` sentences, every source and target ending in EOS,
    drawn on the CPU (the same tokens on every device) and moved to ``device``."""
    d = task.target_dictionary
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (batch, src_len), generator=g)
    target = torch.randint(d.nspecial, len(d), (batch, tgt_len), generator=g)
    src[:, -1] = target[:, -1] = d.eos()
    prev = torch.cat((target.new_full((batch, 1), d.eos()), target[:, :-1]), dim=1)
    sample = {
        "net_input": {
            "src_tokens": src,
            "src_lengths": torch.full((batch,), src_len, dtype=torch.long),
            "prev_output_tokens": prev,
        },
        "target": target,
        "ntokens": target.numel(),
    }
    return apply_to_sample(lambda t: t.to(device), sample)
