"""Attention Residuals (attn-res), Full and Block (--attn-res-blocks): the paper's equations, forward and gradients,
against ``reference_attention_residuals.py``; what a sub-layer reads at init; and for the Block variant what the
registry-wide tests check for the Full one (which they build at its default, 0 blocks): incremental decoding, threads,
torch.compile, the checkpoint round trip, the language model. A bad block count is a one-line error.

The equation checks run in float64 after every pseudo-query, RMSNorm gain and LayerNorm is made random: at init the
queries are 0 and every softmax is uniform, so a key normalised in the wrong place, or a source missing from a read,
would barely show.
"""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from helpers import TinyTask, baseline_model, build_lm, build_model, lm_batch, loss_of, random_batch
from reference import final_norm, target_embedding
from reference_attention_residuals import attention_residuals, block_stack, depth_read, full_stack
from reference_baselines import decoder_sublayers, run_stacks
from torch import nn

from fairseq_residual.errors import ConfigError
from fairseq_residual.schemes import attention_residuals as scheme_module

TOL = 1e-10
#: what a wrong variant must miss the reference by, at least
WRONG = 1e-3
pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: (encoder layers, decoder layers, blocks): Full; one block per stack; blocks of two encoder layers and of one
#: decoder layer (a block's running sum handed from layer to layer); one block per layer
LAYOUTS = [(3, 3, 0), (4, 2, 0), (4, 2, 1), (4, 2, 2), (3, 3, 3)]


def layout_id(layout):
    return "E{}D{}-{}".format(*layout[:2], f"blocks{layout[2]}" if layout[2] else "full")


def randomise(model, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "depth_attention" in name or "norm" in name:
                p.add_(0.5 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def random_model(task, enc, dec, blocks, seed=0):
    torch.manual_seed(seed)
    return randomise(build_model(task, scheme="attn-res", layers=enc, decoder_layers=dec, attn_res_blocks=blocks), seed)


def max_mismatch(enc, dec, blocks):
    task = TinyTask()
    model = random_model(task, enc, dec, blocks).double()
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        out = model.encoder(src, src_lengths=src_lengths)["encoder_out"][0]
        logits = model(src, src_lengths, prev)[0]
        ref_out, pad, ref_logits = attention_residuals(model, src, prev, blocks)
    keep = ~pad.t()
    assert pad.any() and logits.abs().max() > 0.1
    return max((out[keep] - ref_out[keep]).abs().max().item(), (logits - ref_logits).abs().max().item())


@pytest.mark.parametrize("layout", LAYOUTS, ids=layout_id)
def test_encoder_and_decoder_match_the_paper_equations(layout):
    assert max_mismatch(*layout) < TOL


@pytest.mark.parametrize("layout", [(4, 2, 0), (4, 2, 2)], ids=layout_id)
def test_gradients_match_the_gradients_of_the_paper_equations(layout):
    task = TinyTask()
    model = random_model(task, *layout).double()
    src, src_lengths, prev = random_batch(task)
    weights = torch.randn(prev.shape + (len(task.target_dictionary),), generator=torch.Generator().manual_seed(1))

    def gradients(logits):
        model.zero_grad(set_to_none=True)
        (weights.double() * logits).sum().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    ours = gradients(model(src, src_lengths, prev)[0])
    theirs = gradients(attention_residuals(model, src, prev, layout[2])[2])
    assert ours.keys() == theirs.keys()
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=TOL, msg=name)
    # every pseudo-query learns (the two stack tops' too) but that of each stack's first sub-layer, which reads one
    # source, of weight 1 whatever its logit
    learning = {name for name in ours if name.endswith("query") and ours[name].abs().max() > 1e-6}
    queries = {name for name, _ in model.named_parameters() if name.endswith("query")}
    first = {f"{side}.layers.0.depth_attention.self_attn.query" for side in ("encoder", "decoder")}
    assert len(queries) == 2 * layout[0] + 3 * layout[1] + 2 and learning == queries - first


def test_equation_check_fails_when_the_keys_are_not_rms_normalised(monkeypatch):
    monkeypatch.setattr(scheme_module, "inverse_rms", lambda v: torch.ones(v.shape[:-1], dtype=v.dtype))
    assert max_mismatch(4, 2, 0) > WRONG


def test_equation_check_fails_when_every_layer_closes_its_block(monkeypatch):
    start = scheme_module.AttentionResiduals.start
    monkeypatch.setattr(
        scheme_module.AttentionResiduals, "start", lambda self, stack, x: start(self, stack, x)._replace(block_layers=1)
    )
    assert max_mismatch(4, 2, 2) > WRONG  # the encoder's blocks are two layers long
    assert max_mismatch(3, 3, 3) < TOL  # where they are one layer long, nothing changes


def test_equation_check_fails_when_the_first_block_counts_the_embedding():
    """The README pseudo-code leaves the first layer's ``partial_block`` to the caller: started at the embedding,
    b_1 would hold it besides the outputs of its layers (Eq. 5 sums those only)."""

    def stack_with_embedding_in_the_first_block(stack, blocks, x):
        per_block, done, partial = len(blocks) // 2, [x], x
        for n in range(2):
            for index in range(n * per_block, (n + 1) * per_block):
                for name, f, ln in blocks[index]:
                    values = done if partial is None else done + [partial]
                    v = f(ln(depth_read(stack.layers[index].depth_attention[name], values)))
                    partial = v if partial is None else partial + v
            done, partial = done + [partial], None
        return final_norm(stack, depth_read(stack.layer_norm.depth_attention, done))

    task = TinyTask()
    model = random_model(task, 4, 2, 2).double()
    src, src_lengths, prev = random_batch(task)
    with torch.no_grad():
        logits = model(src, src_lengths, prev)[0]
        wrong = run_stacks(model, src, prev, stack_with_embedding_in_the_first_block, block_stack(2))[2]
        right = attention_residuals(model, src, prev, 2)[2]
    assert (logits - right).abs().max() < TOL and (logits - wrong).abs().max() > WRONG


@pytest.mark.parametrize("blocks", [0, 2])
def test_at_init_the_softmax_is_uniform_the_first_sub_layer_reads_the_embedding_the_second_their_mean(blocks):
    task = TinyTask()
    torch.manual_seed(0)
    model = build_model(task, scheme="attn-res", layers=2, attn_res_blocks=blocks)
    layer = model.encoder.layers[0]
    seen = {}

    def record(name, value):
        seen.setdefault(name, value)  # and return None: the hook changes nothing

    hooks = [
        layer.self_attn_layer_norm.register_forward_pre_hook(lambda m, args: record("h1", args[0])),
        layer.self_attn.register_forward_hook(lambda m, args, out: record("v1", out[0])),
        layer.final_layer_norm.register_forward_pre_hook(lambda m, args: record("h2", args[0])),
    ]
    src, src_lengths, _ = random_batch(task)
    with torch.no_grad():
        v0 = model.encoder(src, src_lengths=src_lengths, return_all_hiddens=True)["encoder_states"][0]
    for hook in hooks:
        hook.remove()
    assert torch.equal(seen["h1"], v0)  # one source: weight 1 (Full and Block alike)
    torch.testing.assert_close(seen["h2"], (v0 + seen["v1"]) / 2, atol=1e-6, rtol=0)


@pytest.mark.parametrize("blocks", [1, 3])
def test_block_variant_decodes_step_by_step_exactly_as_it_scores_a_whole_sequence(blocks):
    task = TinyTask()
    src, src_lengths, prev = random_batch(task, tgt_len=6)
    prev[-1, -2:] = prev[-1, 1]  # no target padding: step-wise decoding never sees pad
    model = baseline_model("attn-res", task, 3, 3, attn_res_blocks=blocks)
    with torch.no_grad():
        full = model(src, src_lengths, prev)[0]
        enc = model.encoder(src, src_lengths=src_lengths)
        state: dict = {}
        steps = [model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)[0] for t in range(6)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert full.abs().max() > 0.1


def test_block_variant_assigns_no_module_attribute_and_threads_get_the_single_thread_outputs(monkeypatch):
    task = TinyTask()
    model = baseline_model("attn-res", task, 4, 2, attn_res_blocks=2)
    batches = [random_batch(task, 2 + i % 3, 5 + i % 4, 4 + i % 3, seed=i) for i in range(16)]
    assigned = []
    original = nn.Module.__setattr__

    def spy(self, name, value):
        assigned.append((type(self).__name__, name))
        original(self, name, value)

    monkeypatch.setattr(nn.Module, "__setattr__", spy)

    def forward(batch):
        with torch.no_grad():
            return model(*batch)[0]

    alone = [forward(b) for b in batches]
    assert assigned == []
    model.train()
    assigned.clear()
    loss_of(model, batches[0]).backward()  # a training step's forward and backward
    assert assigned == []
    model.eval()
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(forward, batches))
    assert all(torch.equal(a, b) for a, b in zip(alone, together))


def test_block_variant_compiled_gives_eager_loss_and_gradients():
    torch._dynamo.reset()
    task = TinyTask()
    batch = random_batch(task)
    model = baseline_model("attn-res", task, 2, 1, attn_res_blocks=1)
    compiled = torch.compile(model, backend="aot_eager")
    try:
        for training in (True, False):
            model.train(training)
            results = []
            for run in (model, compiled):
                model.zero_grad(set_to_none=True)
                loss = loss_of(run, batch)
                loss.backward()
                results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
            (eager_loss, eager), (loss, grads) = results
            assert abs(float(loss) - float(eager_loss)) <= 1e-6
            assert max(float((grads[n] - eager[n]).abs().max()) for n in eager) <= 1e-6
    finally:
        torch._dynamo.reset()


def test_block_variant_checkpoint_round_trip_gives_the_same_outputs(tmp_path):
    task = TinyTask()
    batch = random_batch(task)
    model = baseline_model("attn-res", task, 4, 2, attn_res_blocks=2)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    fresh = build_model(task, scheme="attn-res", layers=4, decoder_layers=2, attn_res_blocks=2)
    fresh.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True))
    with torch.no_grad():
        assert torch.equal(fresh(*batch)[0], model(*batch)[0])
    added = {
        "encoder.layers.3.depth_attention.ffn.query",
        "decoder.layers.0.depth_attention.encoder_attn.key_gain",
        "encoder.layer_norm.depth_attention.query",
    }
    assert added <= set(model.state_dict())


@pytest.mark.parametrize("blocks", [0, 2])
def test_the_language_model_matches_the_paper_equations_and_decodes_incrementally(blocks):
    task = TinyTask()
    model = randomise(build_lm(task, scheme="attn-res", layers=4, attn_res_blocks=blocks)).double()
    decoder = model.decoder
    tokens = lm_batch(task)
    pad = tokens.eq(decoder.padding_idx)
    # an LM layer's sub-layers: self-attention and FFN
    layers = [
        [sub for sub in decoder_sublayers(layer, pad, None, None) if sub[0] != "encoder_attn"]
        for layer in decoder.layers
    ]
    stack = block_stack(blocks) if blocks else full_stack
    with torch.no_grad():
        features = model(tokens, features_only=True)[0]
        expected = stack(decoder, layers, target_embedding(decoder, tokens)).transpose(0, 1)
        state: dict = {}
        steps = torch.cat([model(tokens[:, : t + 1], incremental_state=state)[0] for t in range(tokens.size(1))], 1)
        full = model(tokens)[0]
    real = ~pad
    assert (features[real] - expected[real]).abs().max() < TOL
    # fairseq's attention takes its softmax in float32 whatever the model's dtype: steps and whole differ by that
    torch.testing.assert_close(steps[real], full[real], atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"attn_res_blocks": -1}, r"--attn-res-blocks must be a number of blocks, or 0 for Full Attention Residuals"),
        (
            {"attn_res_blocks": 2, "layers": 3},
            r"--attn-res-blocks 2 does not divide --decoder-layers 3 into equal blocks: choose one of 1, 3, or 0",
        ),
        (
            {"attn_res_blocks": 4, "layers": 6, "decoder_layers": 4},
            r"--attn-res-blocks 4 does not divide --encoder-layers 6 into equal blocks: choose one of 1, 2, 3, 6, or 0",
        ),
    ],
)
def test_a_bad_block_count_is_a_one_line_error_naming_the_fix(options, message):
    with pytest.raises(ConfigError, match=message) as error:
        build_model(TinyTask(), scheme="attn-res", **options)
    assert "\n" not in str(error.value)
