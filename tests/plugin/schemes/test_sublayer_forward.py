"""``SublayerEncoderLayer`` / ``SublayerDecoderLayer`` compute fairseq's Post-LN layers exactly.

ResiDual, B2T and Admin write fairseq's layer forward sub-layer by sub-layer so that their residual
sums receive the call's values as arguments. With the plain sum (residual + x) in place of theirs,
the layers must give fairseq's own layers' outputs bit for bit, with fairseq's NormFormer options, a
target without an encoder, attention weights and incremental decoding.
"""

import pytest
import torch
from fairseq.modules.transformer_layer import TransformerDecoderLayerBase, TransformerEncoderLayerBase
from helpers import model_args

from fairseq_residual.config import to_transformer_config
from fairseq_residual.schemes.base import SublayerDecoderLayer, SublayerEncoderLayer, SublayerLayer

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NORMFORMER = dict(scale_heads=True, scale_attn=True, scale_fc=True, scale_resids=True)


class PlainSums(SublayerLayer):
    def residual_sum(self, sublayer, x, residual, block_input, stream):
        return residual + x, stream


class PlainEncoderLayer(PlainSums, SublayerEncoderLayer):
    pass


class PlainDecoderLayer(PlainSums, SublayerDecoderLayer):
    pass


def twins(ours, theirs, options, *args):
    cfg = to_transformer_config(model_args(scheme="post", dropout=0.1, attention_dropout=0.1, **options))
    torch.manual_seed(0)
    a = ours(cfg, *args)
    torch.manual_seed(0)
    b = theirs(cfg, *args)
    b.load_state_dict(a.state_dict())
    return a, b


def seeded(run, seed=3):
    torch.manual_seed(seed)  # the same dropout draws in both layers
    return run()


@pytest.mark.parametrize("options", [{}, NORMFORMER], ids=["plain", "normformer"])
def test_encoder_layer_equals_fairseqs(options):
    ours, theirs = twins(PlainEncoderLayer, TransformerEncoderLayerBase, options)
    x, mask = torch.randn(7, 3, 16), torch.zeros(3, 7, dtype=torch.bool)
    mask[0, :2] = True
    got, stream = seeded(lambda: ours(x, encoder_padding_mask=mask, stream="carried"))
    assert stream == "carried"
    assert torch.equal(got, seeded(lambda: theirs(x, encoder_padding_mask=mask)))


@pytest.mark.parametrize("options", [{}, NORMFORMER], ids=["plain", "normformer"])
@pytest.mark.parametrize("with_encoder_out", [True, False])
def test_decoder_layer_equals_fairseqs_in_full_and_incremental_decoding(options, with_encoder_out):
    ours, theirs = twins(PlainDecoderLayer, TransformerDecoderLayerBase, options)
    x, enc = torch.randn(5, 3, 16), torch.randn(7, 3, 16) if with_encoder_out else None
    enc_mask = torch.zeros(3, 7, dtype=torch.bool) if with_encoder_out else None
    causal = torch.triu(torch.full((5, 5), float("-inf")), 1)
    kwargs = dict(encoder_out=enc, encoder_padding_mask=enc_mask, need_attn=True)
    for training in (True, False):
        ours.train(training), theirs.train(training)
        got = seeded(lambda: ours(x, self_attn_mask=causal, stream=None, **kwargs))
        expected = seeded(lambda: theirs(x, self_attn_mask=causal, **kwargs))
        assert torch.equal(got[0], expected[0]) and got[2] is expected[2] is None
        assert (got[1] is expected[1] is None) or torch.equal(got[1], expected[1])
    state_ours, state_theirs = {}, {}
    for t in range(x.size(0)):
        step = x[t : t + 1]
        got = ours(step, incremental_state=state_ours, stream=None, **kwargs)[0]
        assert torch.equal(got, theirs(step, incremental_state=state_theirs, **kwargs)[0])
