"""Label-smoothed cross-entropy straight from the decoder's features: the logits are never whole (issue 67).

fairseq's ``label_smoothed_cross_entropy`` projects the decoder's features h (n rows of width d) onto the
vocabulary, z = h W^T (n x V), writes their float32 log-probabilities, reads both again for the loss and twice more
in backward: at the CPU study's size (4,096 tokens, 7,840 words) 128 MB a tensor and half of a training step. Here
the rows go through in chunks of ``chunk_rows``; for each, the logits, their log-sum-exp, the loss and both
gradients are computed while the chunk is in cache, then dropped. With fairseq's smoothing (ε spread over the V - 1
other words, ε_i = ε / (V - 1)) and t_i the target of row i (padding rows are left out by the caller):

    z_i      = W h_i                               the chunk's logits, in the compute dtype
    lse_i    = log Σ_j exp z_ij                    float32, as fairseq's log_softmax(dtype=float32)
    nll_i    = lse_i - z_{i,t_i}
    smooth_i = Σ_j (lse_i - z_ij)
    loss     = (1 - ε - ε_i) Σ_i nll_i + ε_i Σ_i smooth_i          (fairseq's label_smoothed_nll_loss, summed)

    ∂loss/∂z_ij = p_ij - q_ij,    p_i = softmax(z_i),    q_ij = 1 - ε if j = t_i, else ε_i
    ∂loss/∂h_i  = Σ_j (p_ij - q_ij) W_j,     ∂loss/∂W = Σ_i (p_i - q_i) h_i^T

(the gradient's coefficients of p sum to (1 - ε - ε_i) + V ε_i = 1, so it is p - q with Σ_j q_ij = 1.)

Where the gradients are computed. In float32 and bfloat16 during the forward, in the same pass as the loss
(``GRADIENTS_IN_FORWARD``); backward then multiplies them by the incoming gradient, a power of two or 1 in fairseq's
training (bfloat16 shares float32's exponent range, so the order of scaling and rounding changes nothing). In
float16 the incoming gradient is the loss scale, which keeps p - q from underflowing float16 before the products:
there backward recomputes each chunk's logits from the saved log-sum-exp and scales p - q in float32 before the cast,
as stock's backward does, at the cost of the projection's forward product once more.

Precision as stock's: the products in the compute dtype (the features' and weight's, or autocast's), the softmax
and loss in float32, p - q cast back to the compute dtype for the two gradient products; ∂loss/∂W is summed over
the chunks in float32 and cast once. What differs from stock is the order of float32 sums (over chunks instead of
over all rows at once).

Chunk size: every chunk reads W twice and adds into ∂loss/∂W (a cost per chunk of order V d), every row costs
order V, so W's traffic per row is d / rows passes over the row's logits. ``chunk_rows_for`` keeps a chunk's float32
logits within ``CHUNK_BYTES`` (in a core's cache) where that still leaves at least d rows; where it does not (wide
models, large vocabularies) cache cannot be had without W's traffic dominating, so it takes 2 d rows, at most
``MAX_CHUNK_BYTES`` of logits (far below the batch's). docs/performance.md has the measured sweep.
"""

from typing import NamedTuple, Optional

import torch
from torch import Tensor

#: a chunk of float32 logits that stays in cache (bytes): half of a core's L2 on the Xeon measured (4 MiB), where the
#: study's size steps fastest at 64 rows (1.25x stock) against 1.15x at 128 and 1.14x at 32 (docs/performance.md)
CHUNK_BYTES = 2 * 2**20
#: the largest chunk of float32 logits where cache is out of reach: far below the batch's logits at WMT's size
MAX_CHUNK_BYTES = 32 * 2**20
#: the fewest rows a chunk takes
MIN_CHUNK_ROWS = 64
#: compute dtypes whose gradients are computed in the forward pass (see the module's docstring for float16)
GRADIENTS_IN_FORWARD = (torch.float32, torch.bfloat16, torch.float64)


def chunk_rows_for(width: int, vocab: int) -> int:
    """Rows per chunk, a multiple of 32, at least ``MIN_CHUNK_ROWS``: as many as ``CHUNK_BYTES`` of float32 logits
    hold where that is at least ``width`` rows (cache, with W's traffic at most one pass per row), else 2 x the width
    and at most ``MAX_CHUNK_BYTES`` of logits (W's traffic amortised)."""
    in_cache = CHUNK_BYTES // (4 * vocab)
    rows = in_cache if in_cache >= width else min(2 * width, MAX_CHUNK_BYTES // (4 * vocab))
    return max(MIN_CHUNK_ROWS, rows - rows % 32)


class LossSums(NamedTuple):
    """The summed loss (differentiable), the summed nll_i and the number of rows whose largest logit is the target
    (``None`` when not asked for): float32, float32 and int64 tensors of no dimension."""

    loss: Tensor
    nll_loss: Tensor
    n_correct: Optional[Tensor]


def linear_cross_entropy(
    features: Tensor,
    weight: Tensor,
    target: Tensor,
    epsilon: float,
    chunk_rows: Optional[int] = None,
    count_correct: bool = False,
) -> LossSums:
    """fairseq's label-smoothed cross-entropy, summed over the rows of ``features`` (n x d) projected by ``weight``
    (V x d, no bias) with ``target`` (n word indices, no padding among them), ``chunk_rows`` at a time (default
    ``chunk_rows_for``); ``epsilon`` 0 is fairseq's ``cross_entropy``. The features and the weight are in the compute
    dtype (the caller casts them under autocast)."""
    if features.dtype != weight.dtype:
        raise TypeError(f"features are {features.dtype} and the output projection {weight.dtype}: cast both first")
    if chunk_rows is None or chunk_rows <= 0:
        chunk_rows = chunk_rows_for(weight.size(1), weight.size(0))
    if torch.is_grad_enabled() and (features.requires_grad or weight.requires_grad):
        loss, nll_loss, n_correct = _LinearCrossEntropy.apply(
            features, weight, target, epsilon, chunk_rows, count_correct
        )
        return LossSums(loss, nll_loss, n_correct if count_correct else None)
    sums = _forward_chunks(features, weight, target, epsilon, chunk_rows, count_correct, gradients=False)
    return LossSums(sums.loss, sums.nll_loss, sums.n_correct if count_correct else None)


class _Sums(NamedTuple):
    loss: Tensor
    nll_loss: Tensor
    n_correct: Tensor
    grad_features: Optional[Tensor]
    grad_weight: Optional[Tensor]


def _smoothing(epsilon: float, vocab: int) -> float:
    """ε_i = ε / (V - 1), fairseq's share of ε for each word other than the target."""
    return epsilon / (vocab - 1)


def _subtract_target(probs: Tensor, target: Tensor, epsilon: float, eps_i: float) -> Tensor:
    """p - q in place: ε_i off every entry, 1 - ε - ε_i more off each row's target."""
    if eps_i:
        probs.sub_(eps_i)
    return probs.scatter_add_(1, target[:, None], probs.new_full((target.numel(), 1), -(1.0 - epsilon - eps_i)))


def _accumulate_weight_gradient(grad_weight: Tensor, grad_logits: Tensor, features: Tensor) -> None:
    """∂loss/∂W += (p - q)^T h for one chunk, in float32 (``grad_weight``) whatever the compute dtype."""
    if grad_logits.dtype == grad_weight.dtype:
        grad_weight.addmm_(grad_logits.t(), features)
    else:  # a half-precision product, rounded once per chunk, summed in float32
        grad_weight.add_(torch.mm(grad_logits.t(), features))


def _forward_chunks(
    features: Tensor,
    weight: Tensor,
    target: Tensor,
    epsilon: float,
    chunk_rows: int,
    count_correct: bool,
    gradients: bool,
) -> _Sums:
    """The loss's sums over the chunks; with ``gradients``, ∂loss/∂h and ∂loss/∂W too (unscaled)."""
    vocab = weight.size(0)
    eps_i = _smoothing(epsilon, vocab)
    accumulate = torch.float64 if weight.dtype == torch.float64 else torch.float32
    nll_sum = features.new_zeros((), dtype=accumulate)
    smooth_sum = features.new_zeros((), dtype=accumulate)
    n_correct = target.new_zeros(())
    grad_features = torch.empty_like(features) if gradients else None
    grad_weight = torch.zeros(weight.shape, dtype=accumulate, device=weight.device) if gradients else None
    for start in range(0, features.size(0), chunk_rows):
        rows = slice(start, start + chunk_rows)
        h, t = features[rows], target[rows]
        logits = torch.mm(h, weight.t())
        if count_correct:
            n_correct += logits.argmax(1).eq(t).sum()
        log_probs = torch.log_softmax(logits, 1, dtype=accumulate)
        del logits
        nll_sum -= log_probs.gather(1, t[:, None]).sum()
        if eps_i:
            smooth_sum -= log_probs.sum(1).sum()
        if gradients:
            assert grad_features is not None and grad_weight is not None
            grad_logits = _subtract_target(log_probs.exp_(), t, epsilon, eps_i).to(weight.dtype)
            torch.mm(grad_logits, weight, out=grad_features[rows])
            _accumulate_weight_gradient(grad_weight, grad_logits, h)
    loss = (1.0 - epsilon - eps_i) * nll_sum + eps_i * smooth_sum
    return _Sums(loss, nll_sum, n_correct, grad_features, grad_weight)


def _backward_chunks(
    features: Tensor, weight: Tensor, target: Tensor, lse: Tensor, epsilon: float, chunk_rows: int, scale: Tensor
):
    """∂(scale · loss)/∂h and ∂(scale · loss)/∂W, each chunk's logits computed again: p = exp(z - lse), and
    scale (p - q) in float32 before the cast to the compute dtype (float16: the scale keeps it from underflowing)."""
    eps_i = _smoothing(epsilon, weight.size(0))
    grad_features = torch.empty_like(features)
    grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
    for start in range(0, features.size(0), chunk_rows):
        rows = slice(start, start + chunk_rows)
        h, t = features[rows], target[rows]
        probs = torch.mm(h, weight.t()).float().sub_(lse[rows, None]).exp_()
        grad_logits = _subtract_target(probs, t, epsilon, eps_i).mul_(scale).to(weight.dtype)
        torch.mm(grad_logits, weight, out=grad_features[rows])
        _accumulate_weight_gradient(grad_weight, grad_logits, h)
    return grad_features, grad_weight.to(weight.dtype)


def _log_sum_exp(features: Tensor, weight: Tensor, chunk_rows: int) -> Tensor:
    """lse_i of every row, float32, a chunk at a time (what float16's backward needs)."""
    return torch.cat(
        [
            torch.logsumexp(torch.mm(features[s : s + chunk_rows], weight.t()).float(), 1)
            for s in range(0, features.size(0), chunk_rows)
        ]
    )


class _LinearCrossEntropy(torch.autograd.Function):
    """``linear_cross_entropy`` with autograd: gradients from the forward pass (float32, bfloat16) or recomputed
    in backward (float16); the nll sum and the count are not differentiable."""

    @staticmethod
    def forward(ctx, features, weight, target, epsilon, chunk_rows, count_correct):
        in_forward = features.dtype in GRADIENTS_IN_FORWARD
        sums = _forward_chunks(features, weight, target, epsilon, chunk_rows, count_correct, gradients=in_forward)
        ctx.epsilon, ctx.chunk_rows, ctx.in_forward = epsilon, chunk_rows, in_forward
        if in_forward:
            assert sums.grad_weight is not None
            ctx.save_for_backward(sums.grad_features, sums.grad_weight.to(weight.dtype))
        else:
            ctx.save_for_backward(features, weight, target, _log_sum_exp(features, weight, chunk_rows))
        ctx.mark_non_differentiable(sums.nll_loss, sums.n_correct)
        return sums.loss, sums.nll_loss, sums.n_correct

    @staticmethod
    def backward(ctx, grad_loss, _grad_nll, _grad_correct):
        if ctx.in_forward:
            grad_features, grad_weight = ctx.saved_tensors
            scale = grad_loss.to(grad_features.dtype)
            grad_features, grad_weight = grad_features * scale, grad_weight * scale
        else:
            features, weight, target, lse = ctx.saved_tensors
            grad_features, grad_weight = _backward_chunks(
                features, weight, target, lse, ctx.epsilon, ctx.chunk_rows, grad_loss.float()
            )
        return (
            grad_features if ctx.needs_input_grad[0] else None,
            grad_weight if ctx.needs_input_grad[1] else None,
            None,
            None,
            None,
            None,
        )
