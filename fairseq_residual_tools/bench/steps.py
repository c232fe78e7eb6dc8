"""The work that is timed: one training step, and beam search of a fixed length."""

import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.sequence_generator import SequenceGenerator

LABEL_SMOOTHING = 0.1
BEAM = 5


class TrainingStep:
    """forward + label-smoothed CE + backward + Adam step, fp32; gradients freed after the step."""

    def __init__(self, model, sample, padding_idx: int):
        self.model = model.train()
        self.sample = sample
        self.padding_idx = padding_idx
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98))

    def loss(self):
        net_output = self.model(**self.sample["net_input"])
        lprobs = self.model.get_normalized_probs(net_output, log_probs=True)
        loss, _ = label_smoothed_nll_loss(
            lprobs.view(-1, lprobs.size(-1)),
            self.sample["target"].view(-1),
            LABEL_SMOOTHING,
            ignore_index=self.padding_idx,
        )
        return loss

    def __call__(self):
        self.loss().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def persistent_bytes(self) -> int:
        """Parameters, buffers and optimizer state: what the process holds between steps."""
        tensors = list(self.model.parameters()) + list(self.model.buffers())
        for state in self.optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in tensors)

    def saved_bytes(self) -> int:
        from .memory import saved_for_backward_bytes

        return saved_for_backward_bytes(self.loss, self.model.parameters())


class Generation:
    """fairseq's SequenceGenerator over a fixed batch, incremental decoding; ``min_len`` = ``max_len``,
    so every model decodes ``length`` tokens + EOS whatever its (random) weights prefer."""

    def __init__(self, model, task, sample, length: int, beam: int = BEAM):
        self.model = model.eval()
        self.sample = {"net_input": {k: sample["net_input"][k] for k in ("src_tokens", "src_lengths")}}
        self.generator = SequenceGenerator(
            [model], task.target_dictionary, beam_size=beam, min_len=length, max_len_a=0, max_len_b=length
        )

    def __call__(self):
        return self.generator.generate([self.model], self.sample)
