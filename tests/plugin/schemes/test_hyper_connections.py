"""Hyper-Connections (hc) and mHC compute their papers' equations, start as Pre-LN, and a wrong variant fails.

The equation checks compare with ``reference_hyper_connections.py`` after every connection parameter (static
matrices, dynamic weights and scales, norms; mHC's phi, alpha, biases) is made random: at init the dynamic
parts are zero and all streams are equal, so a mapping in the wrong place would not show.
"""

from argparse import Namespace

import pytest
import torch
from fairseq.models.transformer import TransformerModel
from helpers import TinyTask, build_model, model_args, random_batch
from reference_hyper_connections import hyper_connections, sinkhorn

from fairseq_residual.errors import ConfigError
from fairseq_residual.schemes import hyper_connections as hc_scheme
from fairseq_residual.schemes import manifold_hyper_connections as mhc_scheme

#: the equation checks run in float64: the mixes of random streams amplify float32 rounding past 1e-5
TOL = 1e-10
#: what a wrong variant must miss the reference by, at least
WRONG = 1e-3
pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: (scheme, options, the reference's kind)
VARIANTS = {
    "hc-dynamic": ("hc", {}, "dynamic"),
    "hc-static": ("hc", {"hc_static": True}, "static"),
    "mhc": ("mhc", {}, "mhc"),
}


def randomise_connections(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "hyper_connections" in name:
                p.add_(0.5 * torch.randn(p.shape, generator=g))


def hyper_model(variant, task, enc_layers=2, dec_layers=3, streams=3, randomise=True, seed=0):
    scheme, options, _ = VARIANTS[variant]
    torch.manual_seed(seed)
    model = build_model(
        task, scheme=scheme, layers=enc_layers, decoder_layers=dec_layers, hc_streams=streams, **options
    )
    if randomise:
        randomise_connections(model, seed)
    return model


def max_mismatch(variant, streams=3, enc_layers=2, dec_layers=3):
    task = TinyTask()
    model = hyper_model(variant, task, enc_layers, dec_layers, streams).double()
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        logits = model(src, src_lengths, prev)[0]
        ref_enc, pad, ref_logits = hyper_connections(model, src, prev, n=streams, kind=VARIANTS[variant][2])
    keep = ~pad.t()
    assert pad.any() and logits.abs().max() > 0.1
    return max((enc[keep] - ref_enc[keep]).abs().max().item(), (logits - ref_logits).abs().max().item())


@pytest.mark.parametrize("streams", [1, 3])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_encoder_and_decoder_match_the_paper_equations(variant, streams):
    assert max_mismatch(variant, streams) < TOL


def test_equation_check_fails_when_the_residual_mix_a_r_is_not_applied(monkeypatch):
    def write_without_a_r(out, streams, coefficients):
        return streams + coefficients[1].unsqueeze(-1) * out.unsqueeze(-2)

    monkeypatch.setattr(hc_scheme.HyperConnection, "write", staticmethod(write_without_a_r))
    assert max_mismatch("hc-dynamic") > WRONG


def test_equation_check_fails_without_the_dynamic_part():
    task = TinyTask()
    model = hyper_model("hc-dynamic", task).double()
    src, src_lengths, prev = random_batch(task)
    for layer in list(model.encoder.layers) + list(model.decoder.layers):
        for connection in layer.hyper_connections.values():
            connection.dynamic = False  # the static matrices alone, where the reference adds s tanh(norm(H) W)
    with torch.no_grad():
        logits = model(src, src_lengths, prev)[0]
        _, _, ref_logits = hyper_connections(model, src, prev, n=3, kind="dynamic")
    assert (logits - ref_logits).abs().max() > WRONG


def test_equation_check_fails_without_the_sinkhorn_projection(monkeypatch):
    monkeypatch.setattr(mhc_scheme, "sinkhorn_knopp", torch.exp)
    assert max_mismatch("mhc") > WRONG


def test_mhc_residual_mix_is_doubly_stochastic():
    task = TinyTask()
    model = hyper_model("mhc", task, streams=4)
    streams = torch.randn(5, 3, 4, 16)
    for layer in list(model.encoder.layers) + list(model.decoder.layers):
        for connection in layer.hyper_connections.values():
            with torch.no_grad():
                connection.phi.mul_(0.2)  # logits spread over about +-2, as after some training
                h_pre, h_post, h_res = connection.mappings(streams)
            assert h_res.shape == (5, 3, 4, 4) and (h_res >= 0).all()
            torch.testing.assert_close(h_res.sum(-1), torch.ones(5, 3, 4), atol=1e-6, rtol=0)  # rows: exact last
            # columns: within what the paper's t_max = 20 rounds reach (exact in the limit: the next test)
            torch.testing.assert_close(h_res.sum(-2), torch.ones(5, 3, 4), atol=1e-3, rtol=0)
            assert ((h_pre > 0) & (h_pre < 1)).all() and ((h_post > 0) & (h_post < 2)).all()
            assert h_res.std() > 0.01  # a real mix, not the same matrix for every token


def test_sinkhorn_knopp_matches_the_papers_iteration_and_converges():
    logits = 3 * torch.randn(7, 4, 4)
    ours = mhc_scheme.sinkhorn_knopp(logits)
    torch.testing.assert_close(ours, sinkhorn(logits), atol=1e-6, rtol=0)
    many = mhc_scheme.sinkhorn_knopp(logits, iterations=500)
    torch.testing.assert_close(many.sum(-2), torch.ones(7, 4), atol=1e-5, rtol=0)


def stock_pre_ln(task, layers):
    args = vars(model_args("post", layers=layers))
    args.pop("residual_scheme")
    args.update(arch="transformer", encoder_normalize_before=True, decoder_normalize_before=True)
    return TransformerModel.build_model(Namespace(**args), task).eval()


def pre_ln_twin(model, task, layers):
    """fairseq's own Pre-LN transformer with the model's weights (all but the connections')."""
    stock = stock_pre_ln(task, layers)
    state = {k: v for k, v in model.state_dict().items() if k in stock.state_dict()}
    assert set(stock.state_dict()) == set(state)  # every stock weight comes from the model
    stock.load_state_dict(state, strict=True)
    return stock


@pytest.mark.parametrize("static", [True, False])
@pytest.mark.parametrize("layers", [1, 3])
def test_one_stream_at_init_is_stock_pre_ln_exactly(static, layers):
    torch.manual_seed(0)
    task = TinyTask()
    model = build_model(task, scheme="hc", layers=layers, hc_streams=1, hc_static=static)
    stock = pre_ln_twin(model, task, layers)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        assert torch.equal(model(src, src_lengths, prev)[0], stock(src, src_lengths, prev)[0])


def test_static_one_stream_is_stock_pre_ln_whenever_its_weights_are_one():
    # with n = 1 static HC is Pre-LN whose sums are a_r x + b f (trained: not 1): set them to 1 and it is exact
    torch.manual_seed(0)
    task = TinyTask()
    model = build_model(task, scheme="hc", layers=2, hc_streams=1, hc_static=True)
    randomise_connections(model)
    stock = pre_ln_twin(model, task, 2)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        assert not torch.allclose(model(src, src_lengths, prev)[0], stock(src, src_lengths, prev)[0])
        for name, p in model.named_parameters():
            if "hyper_connections" in name:
                p.fill_(0.0 if name.endswith(".a_m") else 1.0)  # A_m = e_0 + 0
        assert torch.equal(model(src, src_lengths, prev)[0], stock(src, src_lengths, prev)[0])


@pytest.mark.parametrize("scheme", ["hc", "mhc"])
def test_n_streams_at_init_are_pre_ln_up_to_layernorm_epsilon(scheme):
    # all streams equal: y = LN(n x) = LN(x) with the final LN's epsilon divided by n^2 (mHC: and its sub-layers'
    # LNs read a multiple of x, sum_i sigmoid(b^pre_i), the same up to their epsilon)
    torch.manual_seed(0)
    task = TinyTask()
    model = build_model(task, scheme=scheme, layers=2, hc_streams=4)
    stock = pre_ln_twin(model, task, 2)
    for stack in (stock.encoder, stock.decoder):
        stack.layer_norm.eps /= 16
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        ours, theirs = model(src, src_lengths, prev)[0], stock(src, src_lengths, prev)[0]
    atol = 1e-5 if scheme == "hc" else 1e-3
    torch.testing.assert_close(ours, theirs, atol=atol, rtol=0)
    if scheme == "hc":  # the streams themselves are Pre-LN's stream, bit for bit: only the top's sum rounds
        assert (ours - theirs).abs().max() < 1e-6


def test_a_m_starts_at_stream_k_mod_n_along_each_stack():
    model = build_model(TinyTask(), scheme="hc", layers=2, hc_streams=4)

    def reads(stack):
        return [
            (c.a_m_start + c.a_m).argmax().item() for layer in stack.layers for c in layer.hyper_connections.values()
        ]

    assert reads(model.decoder) == [0, 1, 2, 3, 0, 1]  # self-attention, cross-attention, FFN in two layers
    assert reads(model.encoder) == [0, 1, 2, 3]
    for stack in (model.encoder, model.decoder):  # A_r = I, B = 1 and every A_m one-hot at init
        for layer in stack.layers:
            for c in layer.hyper_connections.values():
                assert torch.equal(c.a_r, torch.eye(4)) and torch.equal(c.b, torch.ones(4))
                assert sorted((c.a_m_start + c.a_m).tolist()) == [0, 0, 0, 1]
                assert c.s_alpha.item() == c.s_beta.item() == pytest.approx(0.01) and not c.w_alpha.any()


@pytest.mark.parametrize(
    "options,message",
    [
        ({"residual_scheme": "hc", "hc_streams": 0}, "--hc-streams must be a positive number"),
        ({"residual_scheme": "mhc", "hc_static": True}, "--hc-static is for --residual-scheme hc"),
    ],
)
def test_bad_hyper_connection_options_are_one_line_errors(options, message):
    scheme = options.pop("residual_scheme")
    with pytest.raises(ConfigError, match=message):
        build_model(TinyTask(), scheme=scheme, **options)
