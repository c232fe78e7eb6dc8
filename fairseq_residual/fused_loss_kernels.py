"""Which kernel computes the fused loss: a maintained CUDA kernel where one is installed and fits, else the torch path.

``--fused-loss-kernel auto`` (the default) takes, on a CUDA device, the first of ``KERNELS`` that is installed and
fits the run's options (``unfit``), else ``fused_loss.linear_cross_entropy``, which runs everywhere (the CPU
always). Naming a kernel asks for it: a one-line error says why it cannot serve. What each kernel fits, and why:

* ``liger`` (``liger-kernel``: Liger Kernel's fused linear cross-entropy, Triton). Its label smoothing is PyTorch's
  (ε' spread over all V words, the target included), fairseq's spreads ε over the V - 1 others: ε' = ε V / (V - 1)
  gives the same loss. It returns the smoothed loss alone; fairseq also logs the nll, which follows from it in
  O(n d) work (``nll_from_smoothed``). It computes the gradients during the forward pass and scales them
  afterwards, so under float16's loss scaling p - q would underflow where stock's does not: not float16.
* ``cce`` (``cut-cross-entropy``: Cut Cross-Entropy, Wijmans et al. 2024). No label smoothing: ε = 0 only (the
  language model's ``fused_cross_entropy``, or translation without smoothing); run with ``filter_eps=None``, its
  exact mode (its default skips small gradient entries). It recomputes the logits in backward, so float16 fits.
* Neither returns the count of rows whose largest logit is the target: ``--report-accuracy`` takes the torch path.

Nothing here runs on this project's CPU machines; ``tests/plugin/test_fused_loss_kernels.py`` checks the choice for
every case and each adapter's arithmetic against a stand-in that implements the library's documented contract from
materialised logits. The GPU check measures the torch path and whichever kernel its machine has installed.
"""

import functools
import importlib
from typing import Callable, Dict, Optional

import torch
from torch import Tensor

from .errors import ConfigError
from .fused_loss import LossSums, linear_cross_entropy

#: the kernels, in the order ``auto`` tries them: name -> (module, function, the pip package)
KERNELS = {
    "liger": ("liger_kernel.transformers.functional", "liger_fused_linear_cross_entropy", "liger-kernel"),
    "cce": ("cut_cross_entropy", "linear_cross_entropy", "cut-cross-entropy"),
}
CHOICES = ("auto", "torch", *KERNELS)


@functools.lru_cache(maxsize=None)
def installed(name: str) -> Optional[Callable]:
    """The kernel's function, or None where its package is not installed (or fails to import: no Triton); looked up
    once per process (a failed import would search the file system again at every step)."""
    module, function, _ = KERNELS[name]
    try:
        return getattr(importlib.import_module(module), function)
    except Exception:  # ImportError, or a Triton/CUDA set-up error raised while importing
        return None


def unfit(name: str, device_type: str, dtype: torch.dtype, epsilon: float, count_correct: bool) -> Optional[str]:
    """Why kernel ``name`` cannot compute this run's loss (a phrase), or None if it can."""
    if device_type != "cuda":
        return f"it runs on CUDA devices only, and this run is on {device_type}"
    if count_correct:
        return "it does not count the rows whose largest logit is the target (--report-accuracy)"
    if name == "liger" and dtype == torch.float16:
        return "it scales its gradients after computing them in float16, where the loss scale must come first"
    if name == "cce" and epsilon != 0:
        return "it has no label smoothing (--label-smoothing 0 only)"
    return None


def choose(
    requested: str,
    device_type: str,
    dtype: torch.dtype,
    epsilon: float,
    count_correct: bool,
    find: Callable[[str], Optional[Callable]] = installed,
) -> str:
    """The kernel that computes the loss: ``requested`` if it can (else a one-line ConfigError), or for ``auto`` the
    first of ``KERNELS`` that is installed (``find``) and fits, else ``torch``."""
    if requested == "torch":
        return "torch"
    if requested == "auto":
        for name in KERNELS:
            if unfit(name, device_type, dtype, epsilon, count_correct) is None and find(name) is not None:
                return name
        return "torch"
    if requested not in KERNELS:
        raise ConfigError(f"--fused-loss-kernel {requested}: choose one of {', '.join(CHOICES)}")
    why = unfit(requested, device_type, dtype, epsilon, count_correct)
    if why is not None:
        raise ConfigError(f"--fused-loss-kernel {requested} cannot serve this run: {why}; use --fused-loss-kernel auto")
    if find(requested) is None:
        package = KERNELS[requested][2]
        raise ConfigError(
            f"--fused-loss-kernel {requested}: {package} is not installed (or does not import): pip install "
            f"{package}, or use --fused-loss-kernel auto"
        )
    return requested


def nll_from_smoothed(loss: Tensor, features: Tensor, weight: Tensor, target: Tensor, epsilon: float) -> Tensor:
    """Σ_i nll_i from the summed smoothed loss L, without the logits: fairseq's per-row loss is
    lse_i - (1 - ε - ε_i) z_{i,t_i} - ε_i Σ_j z_ij, so

        Σ_i nll_i = Σ_i (lse_i - z_{i,t_i}) = L - (ε + ε_i) Σ_i z_{i,t_i} + ε_i (Σ_i h_i) · (Σ_j W_j)

    O(n d) work, in float64 (the terms are larger than their difference); not differentiable (fairseq logs it)."""
    if epsilon == 0:
        return loss.detach().float()
    eps_i = epsilon / (weight.size(0) - 1)
    with torch.no_grad():
        h, w = features.double(), weight.double()
        target_logits = (h * w.index_select(0, target)).sum()
        all_logits = h.sum(0).dot(w.sum(0))
        return (loss.double() - (epsilon + eps_i) * target_logits + eps_i * all_logits).float()


def liger_loss(function: Callable, features: Tensor, weight: Tensor, target: Tensor, epsilon: float) -> LossSums:
    """Liger's fused linear cross-entropy as fairseq's smoothing: ε' = ε V / (V - 1), summed."""
    vocab = weight.size(0)
    loss = function(features, weight, target, label_smoothing=epsilon * vocab / (vocab - 1), reduction="sum")
    loss = loss.float()
    return LossSums(loss, nll_from_smoothed(loss, features, weight, target, epsilon), None)


def cce_loss(function: Callable, features: Tensor, weight: Tensor, target: Tensor, epsilon: float) -> LossSums:
    """Cut Cross-Entropy in its exact mode (no gradient filtering), summed; ε = 0 (``unfit``)."""
    loss = function(features, weight, target, reduction="sum", filter_eps=None).float()
    return LossSums(loss, loss.detach(), None)


ADAPTERS: Dict[str, Callable[..., LossSums]] = {"liger": liger_loss, "cce": cce_loss}


def fused_loss(
    kernel: str,
    features: Tensor,
    weight: Tensor,
    target: Tensor,
    epsilon: float,
    chunk_rows: Optional[int],
    count_correct: bool,
    find: Callable[[str], Optional[Callable]] = installed,
) -> LossSums:
    """The loss by ``kernel`` (a ``choose`` result) over rows without padding."""
    if kernel == "torch":
        return linear_cross_entropy(features, weight, target, epsilon, chunk_rows, count_correct)
    function = find(kernel)
    assert function is not None, f"{kernel} was chosen but is not installed"
    return ADAPTERS[kernel](function, features, weight, target, epsilon)
