"""The schemes beyond the paper (Sandwich-LN, NormFormer, ResiDual-Sandwich, Keel, SiameseNorm, Mix-LN) train through
``fairseq-hydra-train`` with configs/small.yaml; their checkpoints hold the parameters their equations add, and
Mix-LN's ratio arrives from the hydra override."""

from argparse import Namespace

import pytest
import torch
from helpers import PLUGIN_DIR, ROOT, TinyTask, run_cli

from fairseq_residual.model import ResidualTransformerModel

pytestmark = pytest.mark.slow  # fairseq-hydra-train in a fresh process

#: scheme -> parameters of encoder layer 0 / decoder layer 0 that only its equations have
ADDED = {
    "sandwich": ["sublayer_output_norms.self_attn.weight", "sublayer_output_norms.ffn.bias"],
    "normformer": [
        "self_attn.out_proj.parametrizations.weight.original",
        "self_attn.out_proj.parametrizations.weight.0.gamma",
        "attn_ln.weight",
        "ffn_layernorm.weight",
    ],
    "residual-sandwich": ["sublayer_output_norms.self_attn.weight", "sublayer_output_norms.ffn.weight"],
    "keel": ["post_norms.ffn.weight"],  # a first layer: no post-norm after its self-attention
    "siamese": ["stream_norms.self_attn.weight", "input_norms.ffn.bias"],
}
#: scheme -> the parameter its equations add to the decoder's cross-attention (NormFormer: none, plain Pre-LN)
CROSS = {
    "sandwich": "sublayer_output_norms.encoder_attn.weight",
    "residual-sandwich": "sublayer_output_norms.encoder_attn.weight",
    "keel": "post_norms.encoder_attn.weight",
    "siamese": "input_norms.encoder_attn.weight",
}


def hydra_train(databin, tmp_path, scheme, *extra):
    overrides = [f"task.data={databin}", f"common.user_dir={PLUGIN_DIR}"]
    overrides += [f"checkpoint.save_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    overrides += ["optimization.max_update=2", "model.encoder_layers=1", "model.decoder_layers=1"]
    overrides += [f"model.residual_scheme={scheme}", "dataset.num_workers=0", *extra]
    command = ["fairseq_cli.hydra_train", "--config-dir", str(ROOT / "configs"), "--config-name", "small"]
    run_cli(command + overrides, cwd=tmp_path)
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["model"]["residual_scheme"] == scheme
    assert state["optimizer_history"][-1]["num_updates"] == 2
    return state


@pytest.mark.parametrize("scheme", list(ADDED))
def test_hydra_train_trains_the_scheme_and_saves_its_parameters(scheme, demo_databin, tmp_path):
    weights = hydra_train(demo_databin.databin, tmp_path, scheme)["model"]
    for side in ("encoder", "decoder"):
        for name in ADDED[scheme]:
            assert f"{side}.layers.0.{name}" in weights, (side, name)
    gamma = weights.get("encoder.layers.0.self_attn.out_proj.parametrizations.weight.0.gamma")
    if gamma is not None:  # NormFormer: one scale per head (the small model's 4), trained away from 1
        assert gamma.shape == (4,) and not torch.equal(gamma, torch.ones(4))
    added_to_cross_attention = {name for name in CROSS.values() if f"decoder.layers.0.{name}" in weights}
    assert added_to_cross_attention == ({CROSS[scheme]} if scheme in CROSS else set())


def test_hydra_train_gives_mix_ln_its_ratio(demo_databin, tmp_path):
    state = hydra_train(demo_databin.databin, tmp_path, "mix-ln", "model.encoder_layers=2", "+model.mix_ln_ratio=0.5")
    cfg = state["cfg"]["model"]
    assert cfg["mix_ln_ratio"] == 0.5
    model = ResidualTransformerModel.build_model(
        Namespace(**cfg), TinyTask()
    )  # the checkpoint's options build its wiring
    assert [layer.normalize_before for layer in model.encoder.layers] == [False, True]
    assert [layer.normalize_before for layer in model.decoder.layers] == [True]  # floor(0.5 * 1) = 0 Post-LN
