"""The schemes beyond the paper (Sandwich-LN, NormFormer, ResiDual-Sandwich) train through
``fairseq-hydra-train`` with configs/small.yaml, and their checkpoints hold the parameters their equations add."""

import pytest
import torch
from helpers import PLUGIN_DIR, ROOT, run_cli

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
}


@pytest.mark.parametrize("scheme", list(ADDED))
def test_hydra_train_trains_the_scheme_and_saves_its_parameters(scheme, demo_databin, tmp_path):
    overrides = [f"task.data={demo_databin.databin}", f"common.user_dir={PLUGIN_DIR}"]
    overrides += [f"checkpoint.save_dir={tmp_path}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    overrides += ["optimization.max_update=2", "model.encoder_layers=1", "model.decoder_layers=1"]
    overrides += [f"model.residual_scheme={scheme}", "dataset.num_workers=0"]
    command = ["fairseq_cli.hydra_train", "--config-dir", str(ROOT / "configs"), "--config-name", "small"]
    run_cli(command + overrides, cwd=tmp_path)
    state = torch.load(tmp_path / "checkpoint_last.pt", weights_only=True)
    assert state["cfg"]["model"]["residual_scheme"] == scheme
    assert state["optimizer_history"][-1]["num_updates"] == 2
    weights = state["model"]
    for side in ("encoder", "decoder"):
        for name in ADDED[scheme]:
            assert f"{side}.layers.0.{name}" in weights, (side, name)
    gamma = weights.get("encoder.layers.0.self_attn.out_proj.parametrizations.weight.0.gamma")
    if gamma is not None:  # NormFormer: one scale per head (the small model's 4), trained away from 1
        assert gamma.shape == (4,) and not torch.equal(gamma, torch.ones(4))
    # the decoder's cross-attention: an output LN for Sandwich-LN's schemes, plain Pre-LN for NormFormer
    cross = "decoder.layers.0.sublayer_output_norms.encoder_attn.weight"
    assert (cross in weights) == (scheme != "normformer")
