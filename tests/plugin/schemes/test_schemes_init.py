"""Each baseline's initialisation rule, measured on built models.

Standard deviations are pooled over all layers of a stack (tens of thousands of draws, so
the sampling error is well under 2%) and compared with each paper's formula within 5%.
The formulas are written out here from the papers, with literal depth-derived numbers
where a wrong power would otherwise go unnoticed.
"""

import math

import pytest
import torch
from helpers import TinyTask, build_model, random_batch
from reference_baselines import admin_profiled_omegas
from torch import nn

pytestmark = pytest.mark.usefixtures("one_torch_thread")

D, FFN, HEADS = 64, 256, 4
N, M = 6, 4  # encoder and decoder depths: different, so that each formula's N and M are told apart


def wide_model(scheme, vocab=400, **kwargs):
    torch.manual_seed(0)
    return build_model(
        TinyTask(vocab), scheme=scheme, layers=N, decoder_layers=M, embed=D, heads=HEADS, ffn=FFN, **kwargs
    )


def pooled_std(stack, path):
    """std of the weight at ``path`` (e.g. 'self_attn.v_proj') over all layers of a stack."""
    weights = []
    for layer in stack.layers:
        module = layer
        for part in path.split("."):
            module = getattr(module, part)
        weights.append(module.weight.detach().flatten())
    return torch.cat(weights).std().item()


def xavier_std(fan_in, fan_out, gain=1.0):
    return gain * math.sqrt(2.0 / (fan_in + fan_out))


def assert_std(measured, expected, what):
    assert measured == pytest.approx(expected, rel=0.05), f"{what}: std {measured:.5f}, formula {expected:.5f}"


def projection_stds(side, value_output_gain, ffn_gain, query_key_gain):
    """(weight path, expected std) of one layer's projections, for Xavier inits with these gains."""
    expected = []
    for attn in ["self_attn"] + (["encoder_attn"] if side == "decoder" else []):
        expected += [
            (f"{attn}.v_proj", xavier_std(D, D, value_output_gain)),
            (f"{attn}.out_proj", xavier_std(D, D, value_output_gain)),
            (f"{attn}.q_proj", xavier_std(D, D, query_key_gain)),
            (f"{attn}.k_proj", xavier_std(D, D, query_key_gain)),
        ]
    return expected + [("fc1", xavier_std(D, FFN, ffn_gain)), ("fc2", xavier_std(FFN, D, ffn_gain))]


def assert_projection_stds(model, gains):
    """``gains``: side -> (value/output gain, FFN gain, query/key gain)."""
    for side, stack in (("encoder", model.encoder), ("decoder", model.decoder)):
        for path, std in projection_stds(side, *gains[side]):
            assert_std(pooled_std(stack, path), std, f"{side} {path}")


# --- DeepNet -----------------------------------------------------------------------------------


def test_deepnet_constants_follow_the_paper_for_encoder_decoder_models():
    from fairseq_residual.schemes.deepnet import deepnorm_constants

    # Wang et al. 2022, Figure 2, N = M = 6: 0.81 * 6^(5/16), 0.87 * 6^(-5/16), 18^(1/4), 72^(-1/4)
    encoder, decoder = deepnorm_constants(6, 6)
    assert encoder.alpha == pytest.approx(1.41794, abs=1e-4)
    assert encoder.beta == pytest.approx(0.49699, abs=1e-4)
    assert decoder.alpha == pytest.approx(2.05977, abs=1e-4)
    assert decoder.beta == pytest.approx(0.34329, abs=1e-4)
    # the constants the layers use come from the model's own depths
    model = wide_model("deepnet")
    enc, dec = deepnorm_constants(N, M)
    assert {layer.deepnorm_alpha for layer in model.encoder.layers} == {enc.alpha}
    assert {layer.deepnorm_alpha for layer in model.decoder.layers} == {dec.alpha}


def test_deepnet_init_scales_ffn_value_and_output_projections_by_beta():
    model = wide_model("deepnet")
    encoder_beta, decoder_beta = 0.87 * (N**4 * M) ** (-1 / 16), (12 * M) ** (-1 / 4)
    # Xavier-normal: gain beta for value, output and FFN; gain 1 (not scaled) for query and key
    assert_projection_stds(
        model, {"encoder": (encoder_beta, encoder_beta, 1.0), "decoder": (decoder_beta, decoder_beta, 1.0)}
    )


# --- T-Fixup -----------------------------------------------------------------------------------


def test_tfixup_has_no_layer_norm_anywhere():
    model = wide_model("tfixup")
    norms = [name for name, m in model.named_modules() if isinstance(m, nn.LayerNorm)]
    assert norms == []
    assert model.encoder.layer_norm is None and model.decoder.layer_norm is None
    assert not any("norm" in name for name in model.state_dict())


def test_tfixup_init_scales_layers_by_the_papers_depth_factors():
    model = wide_model("tfixup")
    # Huang et al. 2020: after Xavier, encoder times 0.67 N^(-1/4), decoder times (9M)^(-1/4);
    # query/key keep fairseq's Xavier gain 1/sqrt(2), unscaled, as in the authors' code
    encoder, decoder = 0.67 * N ** (-1 / 4), (9 * M) ** (-1 / 4)
    assert_projection_stds(model, {"encoder": (encoder, encoder, 2**-0.5), "decoder": (decoder, decoder, 2**-0.5)})
    for stack in (model.encoder, model.decoder):
        assert all(layer.fc1.bias.abs().max() == 0 == layer.fc2.bias.abs().max() for layer in stack.layers)


@pytest.mark.parametrize("shared", [True, False])
def test_tfixup_scales_the_embeddings_by_9n_to_the_minus_quarter(shared):
    model = wide_model("tfixup", share_all_embeddings=shared)
    source, target = model.encoder.embed_tokens.weight, model.decoder.embed_tokens.weight
    pad = model.encoder.padding_idx
    rows = torch.arange(source.size(0)) != pad
    # N(0, d^(-1/2)) then (9L)^(-1/4); shared embeddings are scaled once, with the encoder's depth
    assert_std(source[rows].std().item(), D**-0.5 * (9 * N) ** (-1 / 4), "source embeddings")
    expected_target = (9 * N) ** (-1 / 4) if shared else (9 * M) ** (-1 / 4)
    assert_std(target[rows].std().item(), D**-0.5 * expected_target, "target embeddings")
    assert (source is target) == shared


# --- Admin -------------------------------------------------------------------------------------


def omegas(model):
    """(encoder, decoder) lists of the omega of every sub-layer in order (omega is uniform per sub-layer)."""
    return [
        [layer.omega(name)[0].item() for layer in stack.layers for name in layer.admin_sublayers()]
        for stack in (model.encoder, model.decoder)
    ]


def profile(model, batch):
    src, src_lengths, prev = batch
    model.train()
    with torch.no_grad():
        model(src, src_lengths, prev)
    return model.eval()


def admin_model(task, seed=0):
    torch.manual_seed(seed)
    return build_model(task, scheme="admin", layers=3, decoder_layers=2)


def test_admin_omega_is_the_profiled_accumulated_variance():
    task = TinyTask()
    model, batch = admin_model(task), random_batch(task)
    assert omegas(model) == [[1.0] * 6, [1.0] * 6]  # nothing profiled yet
    profile(model, batch)
    with torch.no_grad():
        expected = admin_profiled_omegas(admin_model(task), batch[0], batch[2])  # same weights, fresh omega
    for found, wanted in zip(omegas(model), expected):
        assert found == pytest.approx(wanted, rel=1e-5)
    assert expected[0][0] == 1.0 and all(b > a for a, b in zip(expected[0], expected[0][1:]))
    assert int(model.encoder.admin_profiled) == 1 and int(model.decoder.admin_profiled) == 1


def test_admin_profiles_once_and_not_again_after_loading_a_checkpoint():
    task = TinyTask()
    model = profile(admin_model(task), random_batch(task, seed=0))
    profiled = omegas(model)
    profile(model, random_batch(task, seed=5))  # a second training batch changes nothing
    assert omegas(model) == profiled
    resumed = admin_model(task, seed=1)
    resumed.load_state_dict(model.state_dict())
    profile(resumed, random_batch(task, seed=7))  # loaded: omega and the "profiled" mark come along
    assert omegas(resumed) == profiled


def test_admin_profiled_omega_survives_master_weights_copied_before_training():
    # fairseq's --fp16 optimizer copies the parameters before the first batch and writes the
    # copies back after every step: the profiled values must not live in a parameter
    task = TinyTask()
    model = admin_model(task)
    master_weights = {name: p.detach().clone() for name, p in model.named_parameters()}
    profile(model, random_batch(task))
    profiled = omegas(model)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(master_weights[name])
    assert omegas(model) == profiled and profiled[0][1] > 1.0


def _profile_on_one_worker(rank, world, port, batches, results):
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = profile(admin_model(TinyTask()), batches[rank])
    results[rank] = omegas(model)
    torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_admin_profiles_distributed_workers_alike_on_their_pooled_batches():
    # two workers with different batches end with one omega: that of the two batches together
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    task = TinyTask()
    batches = [random_batch(task, seed=0), random_batch(task, seed=1)]
    results = mp.Manager().dict()
    mp.start_processes(_profile_on_one_worker, (2, port, batches, results), nprocs=2, start_method="fork")
    pooled = [torch.cat(parts) for parts in zip(*batches)]
    alone = omegas(profile(admin_model(task), pooled))
    assert results[0] == results[1]
    for found, wanted in zip(results[0], alone):
        assert found == pytest.approx(wanted, rel=1e-5)


def test_admin_does_not_profile_outside_training():
    task = TinyTask()
    model = admin_model(task)
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        model.eval()(src, src_lengths, prev)
    assert int(model.encoder.admin_profiled) == 0 and omegas(model)[0] == [1.0] * 6


def test_admin_ffn_init_is_xavier_uniform_with_zero_bias():
    model = wide_model("admin")
    for stack in (model.encoder, model.decoder):
        assert_std(pooled_std(stack, "fc1"), xavier_std(D, FFN), "fc1")
        assert_std(pooled_std(stack, "fc2"), xavier_std(FFN, D), "fc2")
        assert all(layer.fc1.bias.abs().max() == 0 for layer in stack.layers)


# --- DLCL and B2T -----------------------------------------------------------------------------


def test_dlcl_weights_start_as_the_uniform_average_of_all_earlier_layers():
    model = wide_model("dlcl")
    for stack, depth in ((model.encoder, N), (model.decoder, M)):
        rows = [layer.history_weight.detach() for layer in stack.layers] + [stack.layer_norm.history_weight.detach()]
        for index, row in enumerate(rows[:-1]):
            # layer l+1 (index l) reads y_0 .. y_l, each with weight 1/(l+1); the rest is unused
            expected = torch.zeros(depth + 1)
            expected[: index + 1] = 1.0 / (index + 1)
            torch.testing.assert_close(row, expected)
        torch.testing.assert_close(rows[-1], torch.full((depth + 1,), 1.0 / (depth + 1)))


def test_dlcl_and_b2t_leave_fairseqs_initialisation_as_it_is():
    # same seed: B2T has exactly Post-LN's parameters, DLCL Pre-LN's plus its own new ones
    post, b2t = wide_model("post").state_dict(), wide_model("b2t").state_dict()
    pre, dlcl = wide_model("pre").state_dict(), wide_model("dlcl").state_dict()
    tag = "residual_scheme_tag"
    assert set(post) == set(b2t)
    assert all(torch.equal(post[k], b2t[k]) for k in post if k != tag)
    assert all(torch.equal(pre[k], dlcl[k]) for k in pre if k != tag)
    assert {k for k in dlcl if k not in pre} == {k for k in dlcl if "history_" in k}
