"""Mix-LN: Post-LN in the first floor(alpha L) layers of each stack, Pre-LN above them, the final LN kept.

The identities at the ends of alpha's range are exact: alpha = 0 is fairseq's stock Pre-LN transformer,
alpha = 1 is the plugin's Post-LN followed by the final LayerNorm. In between, the model matches the
reference written from the paper's rule (reference_baselines.mix_ln) for several ratios and depths.
"""

import pytest
import torch
from helpers import (
    TinyTask,
    baseline_model,
    build_model,
    random_batch,
    randomise_learned_mixing,
    run_cli,
    stock_transformer,
    train_args,
)
from reference_baselines import mix_ln

from fairseq_residual.errors import ConfigError
from fairseq_residual.model import SCHEME_KEY
from fairseq_residual.schemes import mix_ln as mix_ln_scheme
from fairseq_residual.schemes.base import stack_layers

TOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def layer_wiring(stack):
    return ["pre" if layer.normalize_before else "post" for layer in stack_layers(stack)]


@pytest.mark.parametrize(
    "ratio,encoder,decoder",
    [
        (0.25, ["post", "pre", "pre", "pre", "pre", "pre"], ["post", "pre", "pre", "pre"]),  # floor(1.5), floor(1)
        (0.5, ["post", "post", "post", "pre", "pre", "pre"], ["post", "post", "pre", "pre"]),
        (0.3, ["post", "pre", "pre", "pre", "pre", "pre"], ["post", "pre", "pre", "pre"]),  # floor(1.8), floor(1.2)
    ],
)
def test_the_first_floor_alpha_L_layers_of_each_stack_are_post_ln(ratio, encoder, decoder):
    model = build_model(scheme="mix-ln", layers=6, decoder_layers=4, mix_ln_ratio=ratio)
    assert layer_wiring(model.encoder) == encoder
    assert layer_wiring(model.decoder) == decoder
    assert model.encoder.layer_norm is not None and model.decoder.layer_norm is not None


def test_the_default_ratio_is_the_papers_quarter():
    model = build_model(scheme="mix-ln", layers=8)
    assert layer_wiring(model.encoder) == ["post"] * 2 + ["pre"] * 6


@pytest.mark.parametrize("layers", [1, 4])
def test_ratio_zero_is_stock_fairseq_pre_ln_exactly(layers):
    torch.manual_seed(0)
    task = TinyTask()
    ours = build_model(task, scheme="mix-ln", layers=layers, mix_ln_ratio=0.0)
    stock = stock_transformer(task, normalize_before=True, layers=layers)
    stock.load_state_dict({k: v for k, v in ours.state_dict().items() if k != SCHEME_KEY}, strict=True)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        ours_out = ours(src, src_lengths, prev)[0]
        stock_out = stock(src, src_lengths, prev)[0]
    assert torch.equal(ours_out, stock_out)


def test_ratio_one_is_post_ln_followed_by_the_final_layer_norm_exactly():
    task = TinyTask()
    mixed = build_model(task, scheme="mix-ln", layers=3, mix_ln_ratio=1.0)
    randomise_learned_mixing(mixed, "mix-ln")  # the final LNs too: at init they are nearly the identity on LN output
    post = build_model(task, scheme="post", layers=3)
    state = dict(mixed.state_dict(), **{SCHEME_KEY: getattr(post, SCHEME_KEY)})
    loaded = post.load_state_dict(state, strict=False)
    assert sorted(loaded.unexpected_keys) == [
        f"{s}.layer_norm.{p}" for s in ("decoder", "encoder") for p in ("bias", "weight")
    ]
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        mixed_enc = mixed.encoder(src, src_lengths=src_lengths)
        post_enc = post.encoder(src, src_lengths=src_lengths)
        assert torch.equal(mixed_enc["encoder_out"][0], mixed.encoder.layer_norm(post_enc["encoder_out"][0]))
        features, _ = post.decoder.extract_features(prev, encoder_out=mixed_enc)
        expected = mixed.decoder.output_layer(mixed.decoder.layer_norm(features))
        assert torch.equal(mixed(src, src_lengths, prev)[0], expected)


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("enc_layers,dec_layers", [(2, 3), (6, 4)])
def test_mix_ln_matches_the_papers_rule(ratio, enc_layers, dec_layers):
    task = TinyTask()
    model = baseline_model("mix-ln", task, enc_layers, dec_layers, mix_ln_ratio=ratio)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        logits = model(src, src_lengths, prev)[0]
        ref_enc, pad, ref_logits = mix_ln(model, src, prev, ratio=ratio)
    keep = ~pad.t()
    torch.testing.assert_close(enc[keep], ref_enc[keep], atol=TOL, rtol=0)
    torch.testing.assert_close(logits, ref_logits, atol=TOL, rtol=0)


def test_the_rule_check_fails_when_the_post_ln_layers_are_on_top(monkeypatch):
    # the reverse order (Pre-LN at the bottom, Post-LN on top), which the paper finds worse
    def post_ln_on_top(self, model, cfg):
        for stack in (model.encoder, model.decoder):
            layers = stack_layers(stack)
            count = mix_ln_scheme.post_ln_layers(float(cfg.mix_ln_ratio), len(layers))
            for layer in layers[len(layers) - count :]:
                layer.normalize_before = False

    monkeypatch.setattr(mix_ln_scheme.MixLN, "initialize", post_ln_on_top)
    task = TinyTask()
    model = baseline_model("mix-ln", task, 4, 4, mix_ln_ratio=0.5)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        logits = model(src, src_lengths, prev)[0]
        _, _, ref_logits = mix_ln(model, src, prev, ratio=0.5)
    assert (logits - ref_logits).abs().max() > 100 * TOL


@pytest.mark.parametrize("ratio", [-0.1, 1.5, float("nan")])
def test_a_ratio_outside_the_unit_interval_is_a_config_error(ratio):
    with pytest.raises(ConfigError, match=r"--mix-ln-ratio must lie in \[0, 1\]"):
        build_model(scheme="mix-ln", mix_ln_ratio=ratio)


@pytest.mark.slow
def test_training_killed_and_resumed_ends_bit_identical_with_the_ratio_from_the_command_line(demo_databin, tmp_path):
    def train(save_dir, updates):
        args = train_args(demo_databin.databin, save_dir, max_update=updates, scheme="mix-ln")
        proc = run_cli([*args, "--mix-ln-ratio", "0.5"], cwd=tmp_path)
        return proc.stdout + proc.stderr

    train(tmp_path / "straight", 4)
    train(tmp_path / "resumed", 2)  # the kill: the run ends after update 2, its checkpoint_last is what is left
    assert "(epoch 1 @ 2 updates)" in train(tmp_path / "resumed", 4)
    straight, resumed = (torch.load(tmp_path / d / "checkpoint_last.pt") for d in ("straight", "resumed"))
    assert resumed["cfg"]["model"]["mix_ln_ratio"] == 0.5
    torch.testing.assert_close(resumed["model"], straight["model"], rtol=0, atol=0)
    torch.testing.assert_close(resumed["last_optimizer_state"], straight["last_optimizer_state"], rtol=0, atol=0)
