"""``fused_label_smoothed_cross_entropy`` and ``fused_cross_entropy``: fairseq's two criteria, the logits never whole.

    fairseq-train ... --criterion fused_label_smoothed_cross_entropy --label-smoothing 0.1
    fairseq-train --task language_modeling ... --criterion fused_cross_entropy

Each computes what its stock criterion (``label_smoothed_cross_entropy``, ``cross_entropy``) computes, with the
same options, logs and metrics (it is a subclass: ``reduce_metrics`` is fairseq's), from the decoder's features and
its output projection (``fused_loss``): the model runs with ``features_only=True``, the rows of padding (and of
``--ignore-prefix-size``) are dropped, and the rest go through ``fused_loss_kernels.fused_loss`` a chunk at a time.
Validation computes the same sums without gradients; generation does not use a criterion. The model and its
checkpoints are untouched, so a run resumes with either criterion.

Under autocast (``--amp``) the features and the projection are cast to autocast's dtype, as autocast casts a
Linear's inputs, and the loss runs with autocast off, in that dtype. ``reduce=False`` (per-token losses, which no
fairseq training path asks for) is the stock criterion's own code. A model without a plain bias-free output
projection (adaptive softmax, a decoder with its own ``output_layer`` or log-probabilities) gets a one-line error
naming the stock criterion.
"""

from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
from fairseq import utils
from fairseq.criterions import register_criterion
from fairseq.criterions.cross_entropy import CrossEntropyCriterion, CrossEntropyCriterionConfig
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.dataclass import FairseqDataclass
from fairseq.models.fairseq_decoder import FairseqDecoder
from fairseq.models.transformer import TransformerDecoderBase
from torch import Tensor, nn

from . import fused_loss_kernels
from .errors import ConfigError
from .fused_loss import LossSums


@dataclass
class FusedLossConfig(FairseqDataclass):
    fused_loss_kernel: str = field(
        default="auto",
        metadata={
            "help": "auto: on CUDA Liger Kernel's or Cut Cross-Entropy's kernel where installed and it fits the "
            "options, else the chunked torch path (always on the CPU); torch, liger, cce: that one"
        },
    )
    fused_loss_chunk_rows: int = field(
        default=0,
        metadata={
            "help": "rows of the torch path's chunks; 0: fused_loss.chunk_rows_for (64 at the study's size, 512 at "
            "IWSLT E6D6's, 256 at WMT E6D6's)"
        },
    )


@dataclass
class FusedLabelSmoothedCrossEntropyConfig(FusedLossConfig, LabelSmoothedCrossEntropyCriterionConfig):
    pass


@dataclass
class FusedCrossEntropyConfig(FusedLossConfig, CrossEntropyCriterionConfig):
    pass


def output_projection(model, criterion: str, stock: str) -> nn.Linear:
    """The decoder's output projection, or a one-line ConfigError where the logits are not h W^T (bias-free)
    followed by fairseq's log-softmax."""
    decoder = getattr(model, "decoder", None)
    projection = getattr(decoder, "output_projection", None)
    problem = None
    if decoder is None:
        problem = "no decoder"
    elif getattr(decoder, "adaptive_softmax", None) is not None:
        problem = "an adaptive softmax"
    elif not isinstance(projection, nn.Linear) or projection.bias is not None:
        problem = "no bias-free Linear output projection"
    elif type(decoder).output_layer is not TransformerDecoderBase.output_layer or (
        type(decoder).get_normalized_probs_scriptable is not FairseqDecoder.get_normalized_probs_scriptable
    ):
        problem = f"a decoder ({type(decoder).__name__}) with its own output layer or log-probabilities"
    if problem is not None:
        raise ConfigError(
            f"--criterion {criterion} computes the loss from the decoder's features and its output projection, and "
            f"this model has {problem}: use --criterion {stock}"
        )
    assert isinstance(projection, nn.Linear)
    return projection


def in_compute_dtype(features: Tensor, weight: Tensor) -> Tuple[Tensor, Tensor]:
    """The features and the projection in the dtype the output projection computes in: autocast's where it is on
    (as autocast casts a Linear's inputs), else the features' (the weight's, in fairseq's --fp16 and --bf16)."""
    device = features.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else features.dtype
    return features.to(dtype), weight.to(dtype)


class FusedLoss:
    """What both criteria share: the features of the rows that count, and the kernel that sums their loss."""

    padding_idx: int
    names: Tuple[str, str]
    kernel: str
    chunk_rows: int

    def setup_fused(self, name: str, stock: str, kernel: str, chunk_rows: int) -> None:
        if kernel not in fused_loss_kernels.CHOICES:
            raise ConfigError(f"--fused-loss-kernel {kernel}: choose one of {', '.join(fused_loss_kernels.CHOICES)}")
        if chunk_rows < 0:
            raise ConfigError(f"--fused-loss-chunk-rows {chunk_rows}: give a positive number, or 0 for the default")
        self.names, self.kernel, self.chunk_rows = (name, stock), kernel, chunk_rows

    def fused_sums(
        self, model, sample: Dict, epsilon: float, ignore_prefix_size: int, count_correct: bool
    ) -> Tuple[LossSums, int]:
        """The loss's sums over the sample's target tokens past ``ignore_prefix_size``, and their number."""
        output_projection(model, *self.names)  # refused before the forward
        net_output = model(**sample["net_input"], features_only=True)
        weight = output_projection(model, *self.names).weight  # after it: FSDP gathers the parameters in forward
        features = net_output[0]
        target = model.get_targets(sample, net_output)
        if ignore_prefix_size > 0:
            features, target = features[:, ignore_prefix_size:, :], target[:, ignore_prefix_size:]
        target = target.reshape(-1)
        rows = target.ne(self.padding_idx).nonzero().squeeze(1)  # padding computes nothing (stock's: zeros)
        features = features.reshape(-1, features.size(-1)).index_select(0, rows)
        features, weight = in_compute_dtype(features, weight)
        target = target.index_select(0, rows)
        kernel = fused_loss_kernels.choose(self.kernel, features.device.type, features.dtype, epsilon, count_correct)
        with torch.autocast(features.device.type, enabled=False):
            sums = fused_loss_kernels.fused_loss(
                kernel, features, weight, target, epsilon, self.chunk_rows or None, count_correct
            )
        return sums, rows.numel()

    @staticmethod
    def logging_output(sample: Dict, loss: Tensor, sample_size: int) -> Dict:
        return {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }


@register_criterion("fused_label_smoothed_cross_entropy", dataclass=FusedLabelSmoothedCrossEntropyConfig)
class FusedLabelSmoothedCrossEntropyCriterion(FusedLoss, LabelSmoothedCrossEntropyCriterion):
    """fairseq's ``label_smoothed_cross_entropy`` from the features (the module's docstring)."""

    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        fused_loss_kernel="auto",
        fused_loss_chunk_rows=0,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        names = ("fused_label_smoothed_cross_entropy", "label_smoothed_cross_entropy")
        self.setup_fused(*names, fused_loss_kernel, fused_loss_chunk_rows)

    def forward(self, model, sample, reduce=True):
        if not reduce:
            return super().forward(model, sample, reduce=False)
        sums, rows = self.fused_sums(model, sample, self.eps, self.ignore_prefix_size, self.report_accuracy)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {**self.logging_output(sample, sums.loss, sample_size), "nll_loss": sums.nll_loss.data}
        if self.report_accuracy:
            n_correct: Optional[Tensor] = sums.n_correct
            assert n_correct is not None
            logging_output["n_correct"] = utils.item(n_correct.data)
            logging_output["total"] = rows
        return sums.loss, sample_size, logging_output


@register_criterion("fused_cross_entropy", dataclass=FusedCrossEntropyConfig)
class FusedCrossEntropyCriterion(FusedLoss, CrossEntropyCriterion):
    """fairseq's ``cross_entropy`` from the features (the module's docstring)."""

    def __init__(self, task, sentence_avg, fused_loss_kernel="auto", fused_loss_chunk_rows=0):
        super().__init__(task, sentence_avg)
        self.setup_fused("fused_cross_entropy", "cross_entropy", fused_loss_kernel, fused_loss_chunk_rows)

    def forward(self, model, sample, reduce=True):
        if not reduce:
            return super().forward(model, sample, reduce=False)
        sums, _ = self.fused_sums(model, sample, 0.0, 0, False)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        return sums.loss, sample_size, self.logging_output(sample, sums.loss, sample_size)


# fairseq's checkpoints record the criterion by its class's name, and Trainer.load_checkpoint refuses to resume with
# another ("Criterion does not match; please reset the optimizer"), which would lose Adam's state: each fused
# criterion goes by its stock twin's class name (the same model, the same optimizer state), so that a run resumes
# with either criterion; fairseq's log still names the one that runs (its configuration's criterion._name)
FusedLabelSmoothedCrossEntropyCriterion.__name__ = LabelSmoothedCrossEntropyCriterion.__name__
FusedCrossEntropyCriterion.__name__ = CrossEntropyCriterion.__name__
