"""fused_loss_kernels: which kernel serves which run, and each CUDA kernel's adapter, on a CPU without them.

Liger Kernel and Cut Cross-Entropy run on CUDA only and are not installed here: the choice is checked for every
case by its decision logic, and each adapter's arithmetic (ε converted to PyTorch's smoothing, the nll derived from
the smoothed loss) against a stand-in implementing the library's documented contract from materialised logits."""

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

from fairseq_residual.errors import ConfigError
from fairseq_residual.fused_loss_kernels import choose, fused_loss, installed, nll_from_smoothed

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def liger_contract(input, weight, target, label_smoothing=0.0, reduction="mean", **_):
    """Liger's liger_fused_linear_cross_entropy as documented: PyTorch's cross_entropy of input @ weight^T."""
    return F.cross_entropy((input @ weight.t()).float(), target, label_smoothing=label_smoothing, reduction=reduction)


def cce_contract(e, c, targets, reduction="mean", filter_eps="auto", **_):
    """Cut Cross-Entropy's linear_cross_entropy as documented (``filter_eps=None``: exact); no label smoothing."""
    assert filter_eps is None, "the adapter asks for the exact mode"
    return F.cross_entropy((e @ c.t()).float(), targets, reduction=reduction)


def both_installed(name):
    return {"liger": liger_contract, "cce": cce_contract}[name]


def none_installed(name):
    return None


F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16


def test_the_cpu_always_takes_the_torch_path_whatever_is_installed():
    for dtype in (F32, BF16, F16):
        assert choose("auto", "cpu", dtype, 0.1, False, find=both_installed) == "torch"


@pytest.mark.parametrize(
    "dtype, epsilon, count_correct, expected",
    [
        (F32, 0.1, False, "liger"),  # label smoothing: Liger's
        (BF16, 0.1, False, "liger"),
        (F16, 0.1, False, "torch"),  # Liger scales after float16 rounding; CCE has no smoothing
        (F16, 0.0, False, "cce"),  # CCE recomputes in backward
        (BF16, 0.0, False, "liger"),  # both fit: the first in KERNELS
        (F32, 0.1, True, "torch"),  # --report-accuracy: neither counts
    ],
)
def test_on_cuda_auto_takes_the_first_installed_kernel_that_fits(dtype, epsilon, count_correct, expected):
    assert choose("auto", "cuda", dtype, epsilon, count_correct, find=both_installed) == expected


def test_on_cuda_without_the_packages_auto_takes_the_torch_path():
    assert choose("auto", "cuda", BF16, 0.1, False, find=none_installed) == "torch"
    only_cce = {"cce": cce_contract}.get
    assert choose("auto", "cuda", BF16, 0.1, False, find=only_cce) == "torch"  # smoothing: CCE cannot
    assert choose("auto", "cuda", BF16, 0.0, False, find=only_cce) == "cce"


def test_a_named_kernel_that_cannot_serve_is_a_one_line_error_saying_why():
    with pytest.raises(ConfigError, match="liger cannot serve this run: it runs on CUDA devices only"):
        choose("liger", "cpu", F32, 0.1, False, find=both_installed)
    with pytest.raises(ConfigError, match="cce cannot serve this run: it has no label smoothing"):
        choose("cce", "cuda", F32, 0.1, False, find=both_installed)
    with pytest.raises(ConfigError, match="pip install liger-kernel, or use --fused-loss-kernel auto"):
        choose("liger", "cuda", F32, 0.1, False, find=none_installed)
    with pytest.raises(ConfigError, match="choose one of auto, torch, liger, cce"):
        choose("triton", "cuda", F32, 0.1, False, find=both_installed)
    assert choose("torch", "cuda", F32, 0.1, False, find=both_installed) == "torch"


def test_neither_package_is_installed_here():
    assert installed("liger") is None and installed("cce") is None


def problem(n=40, d=6, vocab=30):
    g = torch.Generator().manual_seed(0)
    features = torch.randn(n, d, generator=g, dtype=torch.float64)
    weight = torch.randn(vocab, d, generator=g, dtype=torch.float64)
    return features, weight, torch.randint(0, vocab, (n,), generator=g)


def sums_and_gradients(kernel, epsilon, find):
    features, weight, target = problem()
    h, w = features.clone().requires_grad_(), weight.clone().requires_grad_()
    if kernel == "stock":
        loss, nll = label_smoothed_nll_loss(torch.log_softmax(h @ w.t(), -1), target, epsilon, ignore_index=None)
    else:
        loss, nll, _ = fused_loss(kernel, h, w, target, epsilon, None, False, find=find)
    loss.backward()
    return loss.detach().double(), nll.double(), h.grad, w.grad


@pytest.mark.parametrize("kernel, epsilon", [("liger", 0.1), ("liger", 0.0), ("cce", 0.0)])
def test_each_adapter_gives_fairseqs_loss_nll_and_gradients(kernel, epsilon):
    # the stand-ins compute in float32 (as the kernels do: their loss is float32), stock here in float64
    expected = sums_and_gradients("stock", epsilon, None)
    got = sums_and_gradients(kernel, epsilon, both_installed)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g.double(), e, rtol=1e-5, atol=1e-5)


def test_the_nll_follows_from_the_smoothed_loss_without_the_logits():
    features, weight, target = problem()
    for epsilon in (0.0, 0.1, 0.5):
        loss, nll = label_smoothed_nll_loss(torch.log_softmax(features @ weight.t(), -1), target, epsilon)
        torch.testing.assert_close(nll_from_smoothed(loss, features, weight, target, epsilon).double(), nll)


def test_kernels_are_looked_up_once_per_process():
    installed.cache_clear()
    installed("liger")
    installed("liger")
    assert installed.cache_info().hits == 1
