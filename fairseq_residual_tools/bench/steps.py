"""The work that is timed, on synthetic batches: one training step, and beam search of a fixed length."""

import functools
from typing import Callable, Dict, List

import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from fairseq.sequence_generator import SequenceGenerator
from fairseq.utils import apply_to_sample

LABEL_SMOOTHING = 0.1
BEAM = 5


class SyntheticTask:
    """The dictionaries fairseq's build_model needs: ``vocab`` real symbols plus the specials."""

    def __init__(self, vocab: int):
        self.source_dictionary = self.target_dictionary = Dictionary()
        for i in range(vocab):
            self.source_dictionary.add_symbol(f"w{i}")


def synthetic_batch(task, batch: int, src_len: int, tgt_len: int, seed: int = 0, device: str = "cpu") -> Dict:
    """A fairseq translation sample of ``batch`` sentences of real (non-special) tokens at fixed lengths,
    no padding, every source and target ending in EOS; drawn on the CPU (the same tokens on every device)."""
    d = task.target_dictionary
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (batch, src_len), generator=g)
    target = torch.randint(d.nspecial, len(d), (batch, tgt_len), generator=g)
    src[:, -1] = target[:, -1] = d.eos()
    prev = torch.cat((target.new_full((batch, 1), d.eos()), target[:, :-1]), dim=1)
    lengths = torch.full((batch,), src_len, dtype=torch.long)
    net_input = dict(src_tokens=src, src_lengths=lengths, prev_output_tokens=prev)
    sample = dict(net_input=net_input, target=target, ntokens=target.numel())
    return apply_to_sample(lambda t: t.to(device), sample)


class TrainingStep:
    """forward + label-smoothed CE + backward + Adam step, fp32; gradients freed after the step."""

    def __init__(self, model, sample, forward=None):
        self.model = model.train()
        self.forward = forward or self.model  # the model's forward, or a compiled form of it
        self.sample = sample
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98))

    def loss(self):
        net_output = self.forward(**self.sample["net_input"])
        lprobs = self.model.get_normalized_probs(net_output, log_probs=True)
        lprobs, target = lprobs.view(-1, lprobs.size(-1)), self.sample["target"].view(-1)
        loss, _ = label_smoothed_nll_loss(lprobs, target, LABEL_SMOOTHING, ignore_index=self.model.decoder.padding_idx)
        return loss

    def __call__(self) -> torch.Tensor:
        """One step; the loss, detached (reading it, not returning it, would wait for a GPU)."""
        loss = self.loss()
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def persistent_bytes(self) -> int:
        """Parameters, buffers and optimizer state: what the process holds between steps."""
        tensors = list(self.model.parameters()) + list(self.model.buffers())
        for state in self.optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in tensors)


def generation(model, task, sample, length: int) -> Callable[[], List]:
    """Beam search by fairseq's SequenceGenerator over ``sample``, incremental decoding; ``min_len`` =
    ``max_len``, so every model decodes ``length`` tokens + EOS whatever its (random) weights prefer."""
    generator = SequenceGenerator(
        [model.eval()], task.target_dictionary, beam_size=BEAM, min_len=length, max_len_a=0, max_len_b=length
    )
    return functools.partial(generator.generate, [model], sample)
