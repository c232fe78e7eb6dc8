"""Admin (Liu, Liu, Gao, Chen, Han 2020, "Understanding the Difficulty of Training Transformers",
EMNLP 2020, arXiv:2004.08249).

Post-LN with a learned, per-dimension scale omega_i on the residual of every sub-layer f_i
(self-attention; cross-attention in the decoder; FFN), numbered along each stack:

    x_i = LN(x_{i-1} * omega_i + f_i(x_{i-1}))

omega is initialised by profiling one forward pass (the authors' "adaptive-profiling"):
along each stack, with a running value r starting at 1,

    omega_i = r,    then    r <- sqrt( Var[x_{i-1} * omega_i] + Var[f_i(x_{i-1})] )

x_{i-1} is an LN output (unit variance), so omega_i^2 = 1 + sum_{j<i} Var[f_j(x_{j-1})]:
the paper's omega_i = sqrt(sum_{j<i} Var[f_j(x_{j-1})]), the embedding counted as one unit
of variance. Var is the population variance over every element of the batch tensor
(positions, sentences, features; padded positions included), in training mode, exactly as
``np.var`` is applied in the authors' code (LiyuanLucasLiu/Transformer-Clinic). Encoder and
decoder have separate chains; the decoder's runs self-attention, cross-attention, FFN.

When it happens: on the first forward pass in training mode of a freshly built model, i.e.
on ``fairseq-train``'s first training batch, with nothing to run beforehand. Each stack's
``admin_profiled`` buffer then records that it was done; it is saved in every checkpoint, so
a resumed run, ``fairseq-generate`` or a fine-tuning run never profiles again. Under
distributed training the variances are summed over all workers, so every copy of the model
gets the same omega.

How: ``Admin.initialize`` installs one-time hooks (``OmegaProfiling``): on that first training
batch they hand every layer of the stack one ``OmegaProfile`` as its ``stream`` argument (the
running r travels with it), mark the stack profiled and remove themselves. Loading a state
dict whose stack is already profiled removes them too. Afterwards no hook, flag or
device-to-host sync is left on the forward path.

How omega is stored: ``<sublayer>_omega0`` (a buffer, the profiled value) plus
``<sublayer>_omega_delta`` (the learned parameter, initialised to 0); omega = omega0 + delta.
The forward function and the gradients are those of one parameter omega; storing the profiled
value in a buffer keeps it out of the optimizer's hands, so that it survives optimizers which
copy parameters before the first batch (fairseq's ``--fp16`` keeps fp32 master weights built
before training starts). The one difference from the authors' single parameter: weight decay
pulls omega towards its profiled value instead of towards 0.

Other choices, following the authors' code: FFN weights Xavier-uniform with zero biases
(fairseq's ``Linear`` of the time); attention and embeddings as fairseq initialises them.

Appears in the ResiDual paper's IWSLT table (E6D6, E12D12) and WMT table (E6D6, E18D18).
"""

import logging
import math
from typing import List, Optional

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .base import SublayerDecoderLayer, SublayerEncoderLayer, SublayerLayer, SublayerScheme, stack_layers

logger = logging.getLogger(__name__)

#: buffer of each stack (encoder, decoder): 1 once its omega has been profiled
PROFILED_KEY = "admin_profiled"


def population_variance(t: Tensor) -> float:
    """Var over all elements (np.var), summed over distributed workers when there are several."""
    t = t.detach().double()
    stats = torch.stack((t.sum(), (t * t).sum(), t.new_tensor(float(t.numel()))))
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(stats)
    total, total_sq, count = stats.tolist()
    mean = total / count
    return total_sq / count - mean * mean


class OmegaProfile:
    """The running r of one stack during its profiling pass; inert once ``done`` (activation
    checkpointing re-runs the layers in backward with the same arguments)."""

    def __init__(self):
        self.ratio = 1.0
        self.values: List[float] = []
        self.done = False

    def assign(self, omega0: Tensor, residual: Tensor, x: Tensor):
        """omega_i = r; r <- sqrt(Var[x_{i-1} omega_i] + Var[f_i]) (omega_delta is still 0 here)."""
        if self.done:
            return
        omega0.fill_(self.ratio)
        self.values.append(self.ratio)
        self.ratio = math.sqrt(population_variance(residual * omega0) + population_variance(x))


class AdminLayer(SublayerLayer):
    """Mixin: fairseq's Post-LN layer with x_{i-1} * omega_i in each residual sum."""

    def setup_layer(self, cfg, decoder):
        super().setup_layer(cfg, decoder)
        for sublayer in self.admin_sublayers():
            self.register_buffer(f"{sublayer}_omega0", torch.ones(()))
            delta = nn.Parameter(torch.zeros(self.embed_dim))
            self.register_parameter(f"{sublayer}_omega_delta", delta)
        for fc in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(fc.weight)
            nn.init.zeros_(fc.bias)

    def admin_sublayers(self) -> List[str]:
        cross = ["encoder_attn"] if getattr(self, "encoder_attn", None) is not None else []
        return ["self_attn"] + cross + ["ffn"]

    def omega(self, sublayer: str) -> Tensor:
        return getattr(self, f"{sublayer}_omega0") + getattr(self, f"{sublayer}_omega_delta")

    def residual_sum(self, sublayer, x, residual, block_input, profile: Optional[OmegaProfile]):
        # x is f_i(x_{i-1}) after dropout, residual is x_{i-1}; fairseq's LN follows
        if profile is not None:
            profile.assign(getattr(self, f"{sublayer}_omega0"), residual, x)
        omega = self.omega(sublayer)
        if torch.is_grad_enabled():
            # two kernels: addcmul's backward would also multiply by its value (1) twice, mul's does not
            return residual * omega + x, profile
        return torch.addcmul(x, residual, omega), profile  # one kernel where no backward follows (decoding)


class AdminEncoderLayer(AdminLayer, SublayerEncoderLayer):
    pass


class AdminDecoderLayer(AdminLayer, SublayerDecoderLayer):
    pass


class OmegaProfiling:
    """The one-time hooks that profile one stack's omega on its first training batch.

    Referenced only by the hooks themselves: nothing is added to a module, and ``remove``
    leaves the model without a trace of them.
    """

    def __init__(self, stack: nn.Module):
        self.stack = stack
        self.profile: Optional[OmegaProfile] = None
        self.handles = [
            stack.register_forward_pre_hook(self.begin),
            stack.register_forward_hook(self.end),
            stack.register_load_state_dict_post_hook(self.loaded),
        ]
        self.handles += [
            layer.register_forward_pre_hook(self.hand_over, with_kwargs=True) for layer in stack_layers(stack)
        ]

    def profiled(self) -> bool:
        return bool(getattr(self.stack, PROFILED_KEY))

    def begin(self, stack, args):
        if not stack.training:
            return
        if self.profiled():  # a profiled checkpoint's weights were copied in without load_state_dict
            self.remove()
            return
        self.profile = OmegaProfile()

    def hand_over(self, layer, args, kwargs):
        if self.profile is not None:
            return args, dict(kwargs, stream=self.profile)
        return None

    def end(self, stack, args, output):
        profile = self.profile
        if profile is None:
            return
        profile.done = True
        getattr(stack, PROFILED_KEY).fill_(1)
        logger.info(
            "Admin: profiled omega of %s (%d sub-layers): %s",
            type(stack).__name__,
            len(profile.values),
            " ".join(f"{v:.3f}" for v in profile.values),
        )
        self.remove()

    def loaded(self, stack, incompatible_keys):
        if self.profiled():
            self.remove()

    def remove(self):
        for handle in self.handles:
            handle.remove()
        self.profile = None


class Admin(SublayerScheme):
    name = "admin"
    summary = "Admin: x_i = LN(x_{i-1}*omega_i + f_i(x_{i-1})), omega profiled on the first batch"
    normalize_before = False
    encoder_layer_cls = AdminEncoderLayer
    decoder_layer_cls = AdminDecoderLayer

    def initialize(self, model, cfg):
        for stack in (model.encoder, model.decoder):
            stack.register_buffer(PROFILED_KEY, torch.zeros((), dtype=torch.long))
            OmegaProfiling(stack)
