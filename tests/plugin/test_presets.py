"""The ``--arch`` presets build the paper's models with the sizes the README documents."""

from argparse import Namespace

import pytest
from fairseq.models import ARCH_CONFIG_REGISTRY
from helpers import TinyTask

from fairseq_residual.model import ResidualTransformerModel
from fairseq_residual.schemes.base import stack_layers

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# (embed, ffn, heads, encoder / decoder layers, dropout, attention / activation dropout, positions, s)
DOCUMENTED = {
    "residual_transformer_wmt_en_de": (512, 2048, 8, 6, 0.3, 0.1, 1024, 1.0),
    "residual_transformer_opus100": (512, 2048, 8, 18, 0.1, 0.1, 256, 0.05),
}


def preset_model(arch, **flags):
    args = Namespace(arch=arch, residual_scheme="residual", share_all_embeddings=True, **flags)
    ARCH_CONFIG_REGISTRY[arch](args)
    return ResidualTransformerModel.build_model(args, TinyTask())


@pytest.mark.parametrize("arch", list(DOCUMENTED))
def test_preset_builds_the_documented_model(arch):
    embed, ffn, heads, layers, dropout, inner_dropout, positions, scale = DOCUMENTED[arch]
    model = preset_model(arch)
    for stack in (model.encoder, model.decoder):
        assert len(stack.layers) == layers
        assert stack.max_positions() == positions
        assert stack.layer_norm.dual_stream_scale == scale  # the top of the stack: y = x^ln + LN(x^d)
        for layer in stack_layers(stack):
            assert (layer.embed_dim, layer.fc1.out_features, layer.self_attn.num_heads) == (embed, ffn, heads)
            assert layer.dropout_module.p == dropout
            assert layer.self_attn.dropout_module.p == inner_dropout
            assert layer.activation_dropout_module.p == inner_dropout
            assert layer.dual_stream_scale == scale  # what each sub-layer adds to x^d is scaled by s


def test_a_flag_given_on_the_command_line_wins_over_the_preset():
    model = preset_model("residual_transformer_opus100", encoder_layers=2, decoder_layers=1, dual_stream_scale=1.0)
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (2, 1)
    assert model.encoder.layers[0].dual_stream_scale == model.decoder.layer_norm.dual_stream_scale == 1.0
    assert model.encoder.layers[0].fc1.out_features == 2048  # what the flags do not name still comes from the preset
