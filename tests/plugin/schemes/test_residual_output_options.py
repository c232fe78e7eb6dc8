"""ResiDual's output options: --residual-output-alpha (the authors' y = alpha * x^ln + LN(x^d)) and
--residual-output-scale c (the gains of the two LayerNorms forming y start at c), for both ResiDual schemes."""

import pytest
import torch
import torch.nn.functional as F
from fairseq import checkpoint_utils
from helpers import TinyTask, baseline_model, build_model, lm_args, lm_batch, random_batch, run_cli, train_args
from reference import residual_decoder, residual_encoder
from reference_baselines import residual_sandwich

from fairseq_residual.errors import ConfigError
from fairseq_residual.language_model import ResidualTransformerLanguageModel
from fairseq_residual.schemes import SCHEMES
from fairseq_residual.schemes import residual as residual_scheme
from fairseq_residual.schemes.base import ResidualScheme

TOL = 1e-5
DUAL = ["residual", "residual-sandwich"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def residual_reference(model, src, prev, alpha):
    enc, pad = residual_encoder(model, src, alpha=alpha)
    return enc, pad, residual_decoder(model, src, prev, alpha=alpha)


def outputs_and_reference(scheme, alpha, seed=0, **options):
    task = TinyTask()
    batch = random_batch(task, seed=seed)
    src, src_lengths, prev = batch
    if scheme == "residual":
        torch.manual_seed(seed)
        model = build_model(task, scheme=scheme, layers=2, residual_output_alpha=alpha, **options)
        reference = residual_reference
    else:  # LN^out gains made random, as the Sandwich equation checks do
        model = baseline_model(scheme, task, 2, 3, seed, batch, residual_output_alpha=alpha, **options)
        reference = residual_sandwich
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        logits = model(src, src_lengths, prev)[0]
        ref_enc, pad, ref_logits = reference(model, src, prev, alpha=alpha)
    keep = ~pad.t()  # real tokens only
    return (enc[keep], logits), (ref_enc[keep], ref_logits)


@pytest.mark.parametrize("alpha", [0.5, 2.0, 0.0])
@pytest.mark.parametrize("scheme", DUAL)
def test_output_alpha_weights_the_post_ln_term_as_the_authors_release_does(scheme, alpha):
    (enc, logits), (ref_enc, ref_logits) = outputs_and_reference(scheme, alpha)
    torch.testing.assert_close(enc, ref_enc, atol=TOL, rtol=0)
    torch.testing.assert_close(logits, ref_logits, atol=TOL, rtol=0)
    # and alpha matters: the alpha = 1 reference differs
    (_, _), (_, ref_default) = outputs_and_reference(scheme, 1.0)
    assert (logits - ref_default).abs().max() > 100 * TOL


def test_the_alpha_check_fails_when_alpha_is_ignored(monkeypatch):
    def unweighted(self, x_ln, x_dual):
        return x_ln + torch.nn.LayerNorm.forward(self, x_dual)

    monkeypatch.setattr(residual_scheme.DualStreamOutput, "forward", unweighted)
    (enc, logits), (ref_enc, ref_logits) = outputs_and_reference("residual", 0.5)
    assert (logits - ref_logits).abs().max() > 100 * TOL


def todays_model(scheme, monkeypatch):
    """The model as the code before these options built and ran it: no initialize, y = x^ln + LN(x^d)."""

    def unweighted(self, x_ln, x_dual):
        return x_ln + torch.nn.LayerNorm.forward(self, x_dual)

    with monkeypatch.context() as patch:
        patch.setattr(type(SCHEMES[scheme]), "initialize", ResidualScheme.initialize)
        torch.manual_seed(0)
        model = build_model(scheme=scheme, layers=2)
        patch.setattr(residual_scheme.DualStreamOutput, "forward", unweighted)
        batch = random_batch(TinyTask())
        with torch.no_grad():
            return model.state_dict(), model(*batch)[0]


@pytest.mark.parametrize("scheme", DUAL)
def test_the_defaults_are_bit_identical_to_the_authors_output(scheme, monkeypatch):
    before, logits_before = todays_model(scheme, monkeypatch)
    torch.manual_seed(0)
    model = build_model(scheme=scheme, layers=2, residual_output_alpha=1.0, residual_output_scale=1.0)
    with torch.no_grad():
        logits = model(*random_batch(TinyTask()))[0]
    after = model.state_dict()
    assert list(after) == list(before)  # the same parameters and buffers
    assert all(torch.equal(after[k], before[k]) for k in before)
    assert torch.equal(logits, logits_before)


def stack_outputs(scheme, scale, seed=0):
    """Encoder output, and decoder features on the c = 1 model's encoder output, of a fresh model."""
    task = TinyTask()
    src, src_lengths, prev = random_batch(task, seed=seed)
    torch.manual_seed(seed)
    model = build_model(task, scheme=scheme, layers=2, residual_output_scale=scale)
    torch.manual_seed(seed)
    default = build_model(task, scheme=scheme, layers=2)
    with torch.no_grad():
        enc_default = default.encoder(src, src_lengths=src_lengths)
        enc = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        dec = model.decoder(prev, encoder_out=enc_default, features_only=True)[0]
        dec_default = default.decoder(prev, encoder_out=enc_default, features_only=True)[0]
    return (enc, dec), (enc_default["encoder_out"][0], dec_default), model


@pytest.mark.parametrize("scale", [0.5, 0.3])
@pytest.mark.parametrize("scheme", DUAL)
def test_output_scale_scales_each_stack_output_at_init_by_c(scheme, scale):
    (enc, dec), (enc_default, dec_default), model = stack_outputs(scheme, scale)
    # exact for c = 0.5 (a power of two), to rounding otherwise
    tol = dict(atol=0, rtol=0) if scale == 0.5 else dict(atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(enc, scale * enc_default, **tol)
    torch.testing.assert_close(dec, scale * dec_default, **tol)
    for stack in (model.encoder, model.decoder):  # the two gains start at c and stay learnable
        for norm in (stack.layers[-1].final_layer_norm, stack.layer_norm):
            assert torch.equal(norm.weight, torch.full_like(norm.weight, scale)) and norm.weight.requires_grad
        assert torch.equal(stack.layers[0].final_layer_norm.weight, torch.ones_like(stack.layer_norm.weight))


def fresh_lm(task, **options):
    """A residual_transformer_lm as built (``helpers.build_lm`` randomises the LayerNorms of Sandwich's schemes)."""
    torch.manual_seed(0)
    return ResidualTransformerLanguageModel.build_model(lm_args(**options), task).eval()


@pytest.mark.parametrize("scheme", DUAL)
def test_output_scale_scales_a_language_models_logits_at_init_by_c(scheme):
    task = TinyTask()
    tokens = lm_batch(task)
    with torch.no_grad():
        logits = fresh_lm(task, scheme=scheme, residual_output_scale=0.5)(tokens)[0]
        default = fresh_lm(task, scheme=scheme)(tokens)[0]
    torch.testing.assert_close(logits, 0.5 * default, atol=0, rtol=0)
    assert default.abs().max() > 0.1


def test_the_scaled_gains_learn():
    task = TinyTask()
    model = build_model(task, scheme="residual", layers=2, residual_output_scale=0.5).train()
    src, src_lengths, prev = random_batch(task)
    logits = model(src, src_lengths, prev)[0]
    F.cross_entropy(logits.flatten(0, 1), torch.roll(prev, -1, 1).flatten(), ignore_index=1).backward()
    for norm in (model.decoder.layers[-1].final_layer_norm, model.decoder.layer_norm):
        assert norm.weight.grad.abs().max() > 0


@pytest.mark.parametrize("scheme", [name for name, s in SCHEMES.items() if not s.dual_output])
@pytest.mark.parametrize("option", ["residual_output_alpha", "residual_output_scale"])
def test_schemes_without_residuals_output_reject_the_options_in_one_line(scheme, option):
    flag = "--" + option.replace("_", "-")
    with pytest.raises(ConfigError, match=f"^{flag} shapes ResiDual's output .* --residual-scheme {scheme} does not"):
        build_model(scheme=scheme, layers=1, **{option: 0.5})
    build_model(scheme=scheme, layers=1, residual_output_alpha=1.0, residual_output_scale=1.0)  # defaults: fine


@pytest.mark.parametrize(
    "option,value",
    [("alpha", float("nan")), ("alpha", float("inf")), ("scale", 0.0), ("scale", -0.5), ("scale", float("nan"))],
)
def test_bad_output_option_values_are_rejected_in_one_line(option, value):
    with pytest.raises(ConfigError, match=f"^--residual-output-{option} must be a"):
        build_model(scheme="residual", layers=1, **{f"residual_output_{option}": value})


@pytest.mark.slow  # fairseq-train
def test_fairseq_train_records_the_options_and_a_checkpoint_restores_them(demo_databin, tmp_path):
    options = ["--residual-output-alpha", "0.5", "--residual-output-scale", "0.5"]
    run_cli(train_args(demo_databin.databin, tmp_path, max_update=2) + options, cwd=tmp_path)
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    model_cfg = state["cfg"]["model"]
    assert (model_cfg["residual_output_alpha"], model_cfg["residual_output_scale"]) == (0.5, 0.5)
    gain = state["model"]["decoder.layer_norm.weight"]
    assert (gain - 0.5).abs().max() < 0.01 and not torch.equal(gain, torch.full_like(gain, 0.5))  # from c, trained
    (model,), _, _ = checkpoint_utils.load_model_ensemble_and_task([str(tmp_path / "checkpoint_last.pt")])
    assert model.encoder.layer_norm.output_alpha == model.decoder.layer_norm.output_alpha == 0.5
    assert torch.equal(model.decoder.layer_norm.weight, gain)  # the trained gains, not c again
