"""DeepNet, B2T, Admin, T-Fixup and DLCL compute exactly their papers' equations.

Each model is compared with the independent reference of ``reference_baselines.py`` on a
padded batch, for encoder and decoder depths that differ (the depth-derived constants of
DeepNet and T-Fixup use both). Learned mixing quantities (Admin's omega, DLCL's W) are set
to random values first, so that the comparison covers which value goes where.
"""

import pytest
import torch
from conftest import TinyTask, build_model, random_batch
from reference_baselines import REFERENCES

from fairseq_residual.schemes import b2t as b2t_scheme
from fairseq_residual.schemes import dlcl as dlcl_scheme

TOL = 1e-5
BASELINES = ["deepnet", "b2t", "admin", "tfixup", "dlcl"]
DEPTHS = [(1, 1), (2, 3), (6, 4)]  # (encoder layers, decoder layers)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread, and then a busy machine cannot oversubscribe them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def randomise_learned_mixing(model, scheme, seed=0):
    """Random omega (Admin) / lower-triangular W (DLCL), to exercise their indexing."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if scheme == "admin" and name.endswith("_omega_delta"):
                p.copy_(0.5 * torch.randn(p.shape, generator=g))
            if scheme == "dlcl" and name.endswith("history_weight"):
                used = p.ne(0)  # the entries a layer reads: 1/(l+1) after initialisation
                p.copy_(torch.where(used, torch.rand(p.shape, generator=g) + 0.5, p))


def baseline_model(scheme, task, enc_layers=3, dec_layers=3, seed=0, batch=None, **kwargs):
    """A model in eval mode; Admin's omega profiled (on ``batch``) and randomised, DLCL's W randomised."""
    torch.manual_seed(seed)
    model = build_model(task, scheme=scheme, layers=enc_layers, decoder_layers=dec_layers, **kwargs)
    if scheme == "admin":
        src, src_lengths, prev = batch or random_batch(task, seed=seed)
        model.train()
        with torch.no_grad():
            model(src, src_lengths, prev)  # the profiling pass (dropout is 0 in these models)
        model.eval()
    randomise_learned_mixing(model, scheme, seed)
    return model


def outputs(scheme, enc_layers, dec_layers, seed=0):
    task = TinyTask()
    batch = random_batch(task, seed=seed)
    model = baseline_model(scheme, task, enc_layers, dec_layers, seed, batch)
    src, src_lengths, prev = batch
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        logits = model(src, src_lengths, prev)[0]
        ref_enc, pad, ref_logits = REFERENCES[scheme](model, src, prev)
    return enc, ref_enc, pad, logits, ref_logits


def max_mismatch(scheme, enc_layers=2, dec_layers=3):
    enc, ref_enc, pad, logits, ref_logits = outputs(scheme, enc_layers, dec_layers, seed=1)
    keep = ~pad.t()
    return max((enc[keep] - ref_enc[keep]).abs().max(), (logits - ref_logits).abs().max())


@pytest.mark.parametrize("enc_layers,dec_layers", DEPTHS)
@pytest.mark.parametrize("scheme", BASELINES)
def test_encoder_and_decoder_match_the_paper_equations(scheme, enc_layers, dec_layers):
    enc, ref_enc, pad, logits, ref_logits = outputs(scheme, enc_layers, dec_layers)
    keep = ~pad.t()  # compare real tokens; padded positions carry no information
    assert pad.any(), "the batch must contain padding"
    torch.testing.assert_close(enc[keep], ref_enc[keep], atol=TOL, rtol=0)
    torch.testing.assert_close(logits, ref_logits, atol=TOL, rtol=0)
    assert logits.abs().max() > 0.1  # the comparison is not between two near-zero tensors


def test_equation_check_fails_without_the_bottom_to_top_connection(monkeypatch):
    monkeypatch.setattr(b2t_scheme.BottomToTopLayer, "combine", lambda self, sublayer, x, residual: residual + x)
    assert max_mismatch("b2t") > 100 * TOL


def test_equation_check_fails_with_an_unweighted_layer_history(monkeypatch):
    def mean_of_history(history, weight, embed_dim):
        chunks = history.size(-1) // embed_dim
        return history.view(*history.shape[:-1], chunks, embed_dim).mean(-2)

    monkeypatch.setattr(dlcl_scheme, "combine_history", mean_of_history)
    assert max_mismatch("dlcl") > 100 * TOL


def test_equation_check_fails_without_the_deepnorm_alpha():
    task = TinyTask()
    model = baseline_model("deepnet", task, 2, 3)
    src, src_lengths, prev = random_batch(task)
    for layer in list(model.encoder.layers) + list(model.decoder.layers):
        layer.deepnorm_alpha = 1.0  # plain Post-LN wiring, DeepNet's init kept
    with torch.no_grad():
        logits = model(src, src_lengths, prev)[0]
        _, _, ref_logits = REFERENCES["deepnet"](model, src, prev)
    assert (logits - ref_logits).abs().max() > 100 * TOL


def test_equation_check_fails_without_admin_omega():
    task = TinyTask()
    model = baseline_model("admin", task, 2, 3)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        _, _, ref_logits = REFERENCES["admin"](model, src, prev)
        for name, p in model.named_parameters():
            if name.endswith("_omega_delta"):
                p.zero_()
        for name, b in model.named_buffers():
            if name.endswith("_omega0"):
                b.fill_(1.0)
        logits = model(src, src_lengths, prev)[0]
    assert (logits - ref_logits).abs().max() > 100 * TOL
