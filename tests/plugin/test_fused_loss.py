"""fused_loss.linear_cross_entropy: fairseq's label-smoothed cross-entropy and its gradients, a chunk of rows at a time.

The reference is fairseq's own ``label_smoothed_nll_loss`` on the materialised float32 log-probabilities (what
``label_smoothed_cross_entropy`` runs), differentiated by autograd; and once the formula worked by hand."""

import math

import pytest
import torch
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

from fairseq_residual import fused_loss
from fairseq_residual.fused_loss import chunk_rows_for, linear_cross_entropy

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def problem(n=70, d=8, vocab=50, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(n, d, generator=g, dtype=torch.float64)
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64) * d**-0.5
    target = torch.randint(0, vocab, (n,), generator=g)
    return features.to(dtype), weight.to(dtype), target


def stock(features, weight, target, epsilon, scale=1.0):
    """fairseq's loss on the materialised logits: (loss, nll, ∂/∂features, ∂/∂weight) of scale x loss."""
    h, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
    accumulate = torch.float64 if h.dtype == torch.float64 else torch.float32
    lprobs = torch.log_softmax(h @ w.t(), -1, dtype=accumulate)
    loss, nll = label_smoothed_nll_loss(lprobs, target, epsilon, ignore_index=None)
    (loss * scale).backward()
    return loss.detach(), nll.detach(), h.grad, w.grad


def fused(features, weight, target, epsilon, scale=1.0, **options):
    h, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
    loss, nll, _ = linear_cross_entropy(h, w, target, epsilon, **options)
    (loss * scale).backward()
    return loss.detach(), nll.detach(), h.grad, w.grad


def test_the_loss_is_fairseqs_smoothing_worked_by_hand():
    # one row, V = 3 words, logits z = (0, ln 2, ln 5) (p = 1/8, 2/8, 5/8), target word 2, ε = 0.2: ε_i = 0.1, the
    # target gets 1 - ε = 0.8 and each other word 0.1, so loss = -(0.8 ln 5/8 + 0.1 ln 1/8 + 0.1 ln 2/8)
    features = torch.tensor([[1.0]], dtype=torch.float64)
    weight = torch.tensor([[0.0], [math.log(2)], [math.log(5)]], dtype=torch.float64)
    loss, nll, _, grad_weight = fused(features, weight, torch.tensor([2]), 0.2)
    assert loss.item() == pytest.approx(-(0.8 * math.log(5 / 8) + 0.1 * math.log(1 / 8) + 0.1 * math.log(2 / 8)))
    assert nll.item() == pytest.approx(-math.log(5 / 8))
    # ∂loss/∂z = p - q = (1/8 - 0.1, 2/8 - 0.1, 5/8 - 0.8), times h = 1
    assert grad_weight.flatten().tolist() == pytest.approx([0.025, 0.15, -0.175])


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
@pytest.mark.parametrize("chunk_rows", [1, 16, 32, 70, 1000])
def test_float64_gives_stocks_loss_and_gradients_to_rounding_for_any_chunking(epsilon, chunk_rows):
    # 70 rows: chunks that divide them, that leave a shorter last one, one row, all in one
    expected = stock(*problem(dtype=torch.float64), epsilon)
    got = fused(*problem(dtype=torch.float64), epsilon, chunk_rows=chunk_rows)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-14)  # float64: only the order of the sums differs


def test_float32_gives_stocks_loss_and_gradients_within_float32_reordering():
    # the same float32 terms summed in another order (per chunk, then over chunks): the loss within a few units of
    # float32 rounding (6e-8) relative, each gradient entry within 1e-6 of the largest (sums of 70 and 32 terms)
    expected = stock(*problem(), 0.1)
    loss, nll, grad_features, grad_weight = fused(*problem(), 0.1, chunk_rows=16)
    torch.testing.assert_close(loss, expected[0], rtol=5e-7, atol=0)
    torch.testing.assert_close(nll, expected[1], rtol=5e-7, atol=0)
    for g, e in ((grad_features, expected[2]), (grad_weight, expected[3])):
        torch.testing.assert_close(g, e, rtol=0, atol=1e-6 * e.abs().max().item())


def test_bfloat16_gives_stocks_gradients_within_a_few_bfloat16_roundings():
    # both compute the logits in bfloat16 and the loss in float32; ∂loss/∂W is each chunk's bfloat16 product (one
    # rounding, 2^-9 relative) summed in float32 where stock rounds one product: 5 chunks, within 4 units of
    # bfloat16 rounding (2^-8) of the largest entry
    expected = stock(*problem(dtype=torch.bfloat16), 0.1)
    got = fused(*problem(dtype=torch.bfloat16), 0.1, chunk_rows=16)
    torch.testing.assert_close(got[0], expected[0], rtol=5e-7, atol=0)
    for g, e in zip(got[2:], expected[2:]):
        assert g.dtype == torch.bfloat16
        torch.testing.assert_close(g.float(), e.float(), rtol=0, atol=4 * 2**-8 * e.abs().max().item())


def test_float16_scales_before_rounding_so_a_tiny_probability_survives_the_loss_scale_as_in_stock():
    # word 1's probability is e^-19 ≈ 5.6e-9, below float16's smallest number (6e-8): stock's backward multiplies it
    # by the loss scale (1024) before the cast and keeps it; float16's path here recomputes the logits in backward
    # for that reason, where a gradient computed in forward and scaled afterwards would be 0
    features = torch.tensor([[1.0]], dtype=torch.float16)
    weight = torch.tensor([[0.0], [-19.0], [0.0]], dtype=torch.float16)
    target = torch.tensor([0])
    expected = stock(features, weight, target, 0.0, scale=1024.0)[3]
    got = fused(features, weight, target, 0.0, scale=1024.0)[3]
    assert expected[1].item() > 0
    torch.testing.assert_close(got, expected, rtol=2**-10, atol=0)


def test_float16_in_forward_would_lose_that_probability(monkeypatch):
    # the reason for the recomputation, shown: gradients computed in the forward pass in float16, then scaled
    monkeypatch.setattr(fused_loss, "GRADIENTS_IN_FORWARD", (*fused_loss.GRADIENTS_IN_FORWARD, torch.float16))
    features = torch.tensor([[1.0]], dtype=torch.float16)
    weight = torch.tensor([[0.0], [-19.0], [0.0]], dtype=torch.float16)
    assert fused(features, weight, torch.tensor([0]), 0.0, scale=1024.0)[3][1].item() == 0


def test_backward_multiplies_by_the_incoming_gradient():
    once = fused(*problem(dtype=torch.float64), 0.1)
    thrice = fused(*problem(dtype=torch.float64), 0.1, scale=3.0)
    torch.testing.assert_close(thrice[3], 3 * once[3], rtol=1e-14, atol=0)


def test_without_gradients_the_sums_and_the_count_of_correct_rows_are_the_same():
    features, weight, target = problem()
    target[:20] = (features[:20] @ weight.t()).argmax(1)  # 20 rows at least whose largest logit is the target
    with torch.no_grad():
        loss, nll, n_correct = linear_cross_entropy(features, weight, target, 0.1, chunk_rows=16, count_correct=True)
    expected = stock(features, weight, target, 0.1)
    torch.testing.assert_close(loss, expected[0], rtol=5e-7, atol=0)
    torch.testing.assert_close(nll, expected[1], rtol=5e-7, atol=0)
    assert n_correct.item() == (features @ weight.t()).argmax(1).eq(target).sum().item() >= 20
    assert linear_cross_entropy(features, weight, target, 0.1).n_correct is None


def test_the_chunk_stays_in_cache_where_that_leaves_the_width_in_rows_and_else_is_twice_the_width():
    assert chunk_rows_for(64, 7840) == 64  # the CPU study's model: 2 MiB / (4 x 7,840) = 66 rows, 64 below
    assert chunk_rows_for(32, 1000) == 512  # 524 rows in 2 MiB
    assert chunk_rows_for(256, 10000) == 512  # IWSLT E6D6: 52 rows fit 2 MiB, < 256: 2 x the width (838 in 32 MiB)
    assert chunk_rows_for(512, 32000) == 256  # WMT E6D6: 2 x 512 rows would be 125 MiB; 262 fit 32 MiB
    assert chunk_rows_for(16, 10**7) == 64  # never fewer than 64


def test_features_and_projection_of_different_dtypes_are_refused_in_one_line():
    features, weight, target = problem()
    with pytest.raises(TypeError, match="cast both first"):
        linear_cross_entropy(features.double(), weight, target, 0.1)
