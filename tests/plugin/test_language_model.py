"""residual_transformer_lm: Post-LN / Pre-LN are fairseq's stock transformer_lm, every scheme decodes
incrementally as it computes in one pass, and a forward keeps no state on the modules."""

import warnings
from argparse import Namespace
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from fairseq import models, options
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import ARCH_CONFIG_REGISTRY
from fairseq.models.transformer_lm import TransformerLanguageModel
from helpers import TinyTask, build_lm, lm_args, lm_batch
from omegaconf import OmegaConf
from torch import nn

from fairseq_residual.errors import CheckpointMismatchError, ConfigError
from fairseq_residual.language_model import (
    PRESETS,
    ResidualTransformerLanguageModel,
    ResidualTransformerLanguageModelConfig,
)
from fairseq_residual.model import SCHEME_KEY
from fairseq_residual.schemes import SCHEMES

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def stock_lm(task, normalize_before, layers, **overrides):
    args = vars(lm_args("post", layers=layers, **overrides))
    for key in ("residual_scheme", "dual_stream_scale"):
        args.pop(key)
    args["decoder_normalize_before"] = normalize_before
    return TransformerLanguageModel.build_model(Namespace(**args), task).eval()


@pytest.mark.parametrize("scheme,normalize_before", [("post", False), ("pre", True)])
@pytest.mark.parametrize("layers,shared", [(1, False), (3, True)])
def test_post_and_pre_equal_stock_fairseq_transformer_lm(scheme, normalize_before, layers, shared):
    task = TinyTask()
    ours = build_lm(task, scheme=scheme, layers=layers, share_decoder_input_output_embed=shared)
    torch.manual_seed(1)  # other weights than ours: the comparison is of the function, given ours
    stock = stock_lm(task, normalize_before, layers, share_decoder_input_output_embed=shared)
    state = {k: v for k, v in ours.state_dict().items() if k != SCHEME_KEY}
    stock.load_state_dict(state, strict=True)  # same parameter names, nothing left over
    tokens = lm_batch(task)
    with torch.no_grad():
        ours_out, stock_out = ours(tokens)[0], stock(tokens)[0]
    assert ours_out.shape == (3, 9, len(task.source_dictionary))
    torch.testing.assert_close(ours_out, stock_out, atol=1e-6, rtol=0)
    assert (ours.decoder.layer_norm is not None) == normalize_before
    assert all(layer.encoder_attn is None for layer in ours.decoder.layers)


def incremental(model, tokens):
    state: dict = {}
    return torch.cat([model(tokens[:, : t + 1], incremental_state=state)[0] for t in range(tokens.size(1))], dim=1)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_incremental_decoding_equals_the_full_forward(scheme):
    task = TinyTask()
    model = build_lm(task, scheme=scheme, layers=2)
    tokens = lm_batch(task)
    with torch.no_grad():
        full, steps = model(tokens)[0], incremental(model, tokens)
    # at padding positions (whose outputs no loss reads) fairseq's own transformer_lm differs too: one position
    # in a full forward, the next in an incremental step
    real = tokens.ne(task.source_dictionary.pad())
    torch.testing.assert_close(steps[real], full[real], atol=1e-5, rtol=0)
    assert full.abs().max() > 0.1  # a real output, not a zero stack


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_no_module_attribute_is_assigned_and_threads_get_the_single_thread_outputs(scheme, monkeypatch):
    task = TinyTask()
    model = build_lm(task, scheme=scheme, layers=2)
    batches = [lm_batch(task, batch=2 + i % 3, length=5 + i % 4, seed=i) for i in range(12)]
    assigned = []
    original = nn.Module.__setattr__

    def spy(self, name, value):
        assigned.append((type(self).__name__, name))
        original(self, name, value)

    monkeypatch.setattr(nn.Module, "__setattr__", spy)

    def forward(tokens):
        with torch.no_grad():
            return model(tokens)[0], incremental(model, tokens[:, :3])

    alone = [forward(b) for b in batches]
    assert assigned == []
    model.train()
    assigned.clear()
    model(batches[0])[0].sum().backward()  # a training step's forward and backward
    assert assigned == []
    model.eval()
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(forward, batches))
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(alone, together))


def test_every_scheme_builds_its_own_decoder_layers_and_stack_top():
    task = TinyTask()
    for name, scheme in SCHEMES.items():
        model = build_lm(task, scheme=name, layers=2)
        assert model.residual_scheme == name
        assert all(isinstance(layer, scheme.decoder_layer_cls) for layer in model.decoder.layers)
        assert model.decoder.scheme is scheme


def test_tfixup_scales_the_embedding_by_the_decoder_rule():
    task = TinyTask()
    layers = 4
    torch.manual_seed(0)
    plain = ResidualTransformerLanguageModel.build_model(lm_args("post", layers=layers), task)
    torch.manual_seed(0)
    tfixup = ResidualTransformerLanguageModel.build_model(lm_args("tfixup", layers=layers), task)
    ratio = tfixup.decoder.embed_tokens.weight / plain.decoder.embed_tokens.weight
    expected = (9 * layers) ** (-1 / 4)  # T-Fixup: target embeddings times (9 M)^(-1/4)
    torch.testing.assert_close(ratio[task.source_dictionary.nspecial :], torch.full_like(ratio[4:], expected))


def test_admin_profiles_the_decoder_on_its_first_training_batch():
    task = TinyTask()
    model = build_lm(task, scheme="admin", layers=2)
    assert int(model.decoder.admin_profiled) == 1
    torch.manual_seed(0)
    fresh = ResidualTransformerLanguageModel.build_model(lm_args("admin", layers=2), task)
    assert int(fresh.decoder.admin_profiled) == 0


def test_a_checkpoint_of_another_scheme_is_refused_in_one_line():
    task = TinyTask()
    state = build_lm(task, scheme="pre").state_dict()
    with pytest.raises(CheckpointMismatchError, match="trained with --residual-scheme pre.*pass --residual-scheme pre"):
        build_lm(task, scheme="residual").load_state_dict(state)


def test_normalize_before_contradicting_the_scheme_is_a_config_error():
    with pytest.raises(ConfigError, match="--decoder-normalize-before contradicts --residual-scheme post"):
        ResidualTransformerLanguageModel.build_model(lm_args("post", decoder_normalize_before=True), TinyTask())


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_take_fairseq_sizes_and_leave_layer_norm_placement_to_the_scheme(preset):
    ours, stock = Namespace(), Namespace()
    ARCH_CONFIG_REGISTRY[f"residual_{preset}"](ours)
    ARCH_CONFIG_REGISTRY[preset](stock)
    assert stock.decoder_normalize_before is True and ours.decoder_normalize_before is False
    assert vars(ours) == dict(vars(stock), decoder_normalize_before=False)
    given = Namespace(decoder_layers=3)
    ARCH_CONFIG_REGISTRY[f"residual_{preset}"](given)
    assert given.decoder_layers == 3  # the command line wins


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_input_and_output_dims_other_than_the_width_build_as_stock_does(scheme):
    """--decoder-input-dim / --decoder-output-dim given as 512 on a 16-wide stack: stock transformer_lm then
    projects the 512-wide embedding in and the 16-wide stack out, and its stack-top LayerNorm is at the stack's
    width. Every scheme builds and runs so, and Pre-LN is stock's function."""
    task = TinyTask()
    dims = dict(decoder_input_dim=512, decoder_output_dim=512)
    model = build_lm(task, scheme=scheme, layers=2, **dims)
    assert model.decoder.embed_tokens.embedding_dim == 512 and model.decoder.project_in_dim.out_features == 16
    assert model.decoder.project_out_dim.in_features == 16
    if model.decoder.layer_norm is not None:
        assert model.decoder.layer_norm.weight.shape == (16,)
    tokens = lm_batch(task)
    with torch.no_grad():
        out = model(tokens)[0]
    assert out.shape == (3, 9, len(task.source_dictionary)) and torch.isfinite(out).all()
    if scheme == "pre":
        stock = stock_lm(task, True, 2, **dims)
        stock.load_state_dict({k: v for k, v in model.state_dict().items() if k != SCHEME_KEY}, strict=True)
        with torch.no_grad():
            torch.testing.assert_close(out, stock(tokens)[0], atol=1e-6, rtol=0)


def parsed_lm(task, *flags):
    """The model ``fairseq-train DATA --task language_modeling FLAGS`` builds: fairseq's own parsing, its presets
    and its conversion of the command line to the config the model is built from."""
    parser = options.get_training_parser(default_task="language_modeling")
    args = options.parse_args_and_arch(parser, ["DATA", "--task", "language_modeling", "--dropout", "0", *flags])
    return models.build_model(convert_namespace_to_omegaconf(args).model, task).eval()


SMALL = ["--decoder-layers", "2", "--decoder-ffn-embed-dim", "32", "--decoder-attention-heads", "2"]


def test_decoder_embed_dim_alone_sets_the_width_of_the_embedding_and_the_output_too():
    """The issue's ``--arch residual_transformer_lm --decoder-embed-dim 64`` built a 512-wide embedding with
    projections to 64 and back (fairseq's --decoder-input-dim / --decoder-output-dim default to 512)."""
    task = TinyTask()
    model = parsed_lm(task, "--arch", "residual_transformer_lm", "--decoder-embed-dim", "64", *SMALL)
    decoder = model.decoder
    assert decoder.embed_tokens.embedding_dim == 64 and decoder.output_projection.in_features == 64
    assert decoder.project_in_dim is None and decoder.project_out_dim is None
    explicit = parsed_lm(
        task,
        "--arch",
        "residual_transformer_lm",
        "--decoder-embed-dim",
        "64",
        *SMALL,
        "--decoder-input-dim",
        "64",
        "--decoder-output-dim",
        "64",
    )
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in explicit.state_dict().items()}


def test_input_and_output_dims_given_explicitly_are_kept():
    task = TinyTask()
    flags = ["--arch", "residual_transformer_lm", "--decoder-embed-dim", "16", *SMALL, "--decoder-input-dim", "24"]
    decoder = parsed_lm(task, *flags, "--decoder-output-dim", "32").decoder
    assert decoder.embed_tokens.embedding_dim == 24 and decoder.project_in_dim.weight.shape == (16, 24)
    assert decoder.project_out_dim.weight.shape == (32, 16) and decoder.output_projection.in_features == 32


def test_a_presets_width_given_on_the_command_line_sets_the_embedding_and_output_width():
    decoder = parsed_lm(TinyTask(), "--arch", "residual_transformer_lm_gpt2_tiny", "--decoder-embed-dim", "32").decoder
    assert decoder.embed_tokens.embedding_dim == 32 and decoder.project_in_dim is None


def test_hydra_model_decoder_embed_dim_alone_sets_the_input_and_output_width():
    """hydra's ``model.decoder_embed_dim=64``: the config's interpolation, as the translation model's."""
    from fairseq.dataclass.configs import CommonConfig
    from fairseq.tasks.language_modeling import LanguageModelingConfig

    structured = {"model": ResidualTransformerLanguageModelConfig, "task": LanguageModelingConfig}
    structured["common"] = CommonConfig
    cfg = OmegaConf.create({key: OmegaConf.structured(config) for key, config in structured.items()})
    cfg.model.update(decoder_embed_dim=24, decoder_layers=1, decoder_attention_heads=2)
    decoder = ResidualTransformerLanguageModel.build_model(cfg.model, TinyTask()).decoder
    assert decoder.embed_tokens.embedding_dim == 24 and decoder.project_in_dim is None
    assert decoder.project_out_dim is None and decoder.output_projection.in_features == 24


@pytest.mark.parametrize("scheme,normalize_before", [("post", False), ("pre", True)])
def test_post_and_pre_with_only_the_width_given_equal_stock_transformer_lm_of_the_same_explicit_sizes(
    scheme, normalize_before
):
    """Stock transformer_lm keeps 512-wide input and output dims under --decoder-embed-dim alone: with them given
    as the width, it is our model's function, parameter for parameter."""
    task = TinyTask()
    width = ["--decoder-embed-dim", "16", *SMALL]
    ours = parsed_lm(task, "--arch", "residual_transformer_lm", "--residual-scheme", scheme, *width)
    stock_flags = ["--arch", "transformer_lm", *width, "--decoder-input-dim", "16", "--decoder-output-dim", "16"]
    stock = parsed_lm(task, *stock_flags, *(["--decoder-normalize-before"] if normalize_before else []))
    stock.load_state_dict({k: v for k, v in ours.state_dict().items() if k != SCHEME_KEY}, strict=True)
    tokens = lm_batch(task)
    with torch.no_grad():
        torch.testing.assert_close(ours(tokens)[0], stock(tokens)[0], atol=1e-6, rtol=0)
    assert len(ours.state_dict()) == len(stock.state_dict()) + 1  # the scheme's tag


def test_a_blank_line_overflows_only_in_the_past_target_which_a_language_model_never_reads_and_says_nothing():
    """A blank line under --sample-break-mode eos is a block of one token (its end of sentence) at offset 0: fairseq's
    ``e - 2`` on the block's unsigned end offset overflows (numpy's RuntimeWarning) into the past target only, which
    MonolingualDataset leaves out unless --past-target, which the task refuses for a model without that target."""
    from fairseq.data import MonolingualDataset, TokenBlockDataset

    from fairseq_residual import quiet

    d = TinyTask().source_dictionary
    lines = [torch.tensor([5, 6, d.eos()]), torch.tensor([d.eos()]), torch.tensor([7, d.eos()])]
    blocks = TokenBlockDataset(lines, [3, 1, 2], 64, d.pad(), d.eos(), break_mode="eos", include_targets=True)
    samples = MonolingualDataset(blocks, blocks.sizes, d, d, False, shuffle=False, targets=["future"])
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        source, target, past = blocks[1]
        read = [(s["source"].tolist(), s["target"].tolist()) for s in map(samples.__getitem__, range(3))]
    assert {str(w.message) for w in shown} == {"overflow encountered in scalar subtract"}
    assert (source.tolist(), target.tolist(), past.tolist()) == ([d.eos()], [d.eos()], [d.pad(), d.eos(), d.eos()])
    assert read == [
        ([d.eos(), 5, 6], [5, 6, d.eos()]),
        ([d.eos()], [d.eos()]),
        ([d.eos(), 7], [7, d.eos()]),
    ]
    assert build_lm().supported_targets == {"future"}  # language_modeling's build_model refuses --past-target
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        quiet.ignore_known_warnings()
        blocks[1]
    assert shown == []
