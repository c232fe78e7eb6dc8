"""Residual schemes: one small module per scheme, registered here by name.

Adding a scheme: write a ``ResidualScheme`` subclass in its own module, add it to
``SCHEMES`` below, and it becomes a ``--residual-scheme`` choice everywhere. If it needs
its own layers, write one mixin for both stacks (``base.SchemeLayer``, whose
``setup_layer`` adds parameters or initialisation; ``base.SublayerLayer`` for a residual
sum that depends on the sub-layer or on values of the current call) and combine it with
fairseq's ``TransformerEncoderLayerBase`` / ``TransformerDecoderLayerBase`` (or
``base.SublayerEncoderLayer`` / ``SublayerDecoderLayer``), with no constructor of its own
(``b2t.py`` is the shortest example). docs/schemes.md, "Adding a scheme", has the steps;
a forward pass keeps its state in locals and arguments, never on a module.
"""

from typing import Dict

from ..errors import ConfigError
from .admin import Admin
from .attention_residuals import AttentionResiduals
from .b2t import B2T
from .base import ResidualScheme
from .deepnet import DeepNet
from .dlcl import DLCL
from .hyper_connections import HyperConnections
from .keel import Keel
from .ln_scaling import LayerNormScaling
from .manifold_hyper_connections import ManifoldHyperConnections
from .mix_ln import MixLN
from .normformer import NormFormer
from .post_ln import PostLN
from .pre_ln import PreLN
from .residual import ResiDual
from .residual_sandwich import ResiDualSandwich
from .sandwich import Sandwich
from .siamese import SiameseNorm
from .tfixup import TFixup

SCHEMES: Dict[str, ResidualScheme] = {
    s.name: s
    for s in (
        PostLN(),
        PreLN(),
        ResiDual(),
        DeepNet(),
        B2T(),
        Admin(),
        TFixup(),
        DLCL(),
        Sandwich(),
        NormFormer(),
        ResiDualSandwich(),
        MixLN(),
        LayerNormScaling(),
        Keel(),
        HyperConnections(),
        ManifoldHyperConnections(),
        SiameseNorm(),
        AttentionResiduals(),
    )
}


class UnknownSchemeError(ConfigError):
    pass


def get_scheme(name) -> ResidualScheme:
    name = str(name)
    try:
        return SCHEMES[name]
    except KeyError:
        raise UnknownSchemeError(
            f"unknown residual scheme {name!r}; choose one of: {', '.join(SCHEMES)} "
            "(--residual-scheme / model.residual_scheme)"
        ) from None
