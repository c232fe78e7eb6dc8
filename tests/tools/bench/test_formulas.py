"""Each scheme's counted extra work equals its formula exactly (docs/performance.md, "Counted work"), on tiny
models of two shapes; and the check notices work beyond the formula."""

import dataclasses

import pytest

from fairseq_residual.schemes import SCHEMES, residual
from fairseq_residual_tools.bench import counts, formulas
from fairseq_residual_tools.bench.variants import TINY, Variant, variants

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: one sentence per batch and three layers: the embedding's time-first view is contiguous (no copies), and the
#: formulas' depth terms (DLCL's (l+1)(l+2)/2 mixed entries) differ from TINY's
SINGLE = dataclasses.replace(TINY, name="single", layers=3, batch=1, gen_batch=1)


@pytest.fixture(scope="module", params=[TINY, SINGLE], ids=lambda s: s.name)
def counted(request):
    size = request.param
    return size, {v.name: counts.step_counts(size, v) for v in variants()}


def test_residual_minus_pre_ln_is_the_formula_exactly():
    counted = {name: counts.step_counts(TINY, name) for name in ("pre", "residual")}
    (train, generate) = formulas.overhead_rows(TINY, counted)
    # TINY: 2 layers a stack, B = 4, S = 7, T = 6, d = 16; generation G = 2, K = 5, L = 5
    n_enc, n_dec = 7 * 4 * 16, 6 * 4 * 16
    # per stack: s dual adds and y = x^ln + LN(x^d); backward as many gradient sums; the embedding's copy
    adds = (4 + 1) * 2 * 3 * n_enc + (6 + 1) * 2 * 3 * n_dec
    assert train["measured"]["by_kind"] == {
        "add": {"ops": 24, "flops": 0, "bytes": 4 * adds},
        "clone": {"ops": 2, "flops": 0, "bytes": 4 * 2 * (n_enc + n_dec)},
    }
    # the encoder once (4 dual adds, the output's add, the copy), 6 decoder steps of 10 hypotheses x 1 position
    n_gen, n_step = 7 * 2 * 16, 10 * 16
    assert generate["measured"]["by_kind"] == {
        "add": {"ops": 5 + 6 * 7, "flops": 0, "bytes": 4 * (5 * 3 * n_gen + 6 * 7 * 3 * n_step)},
        "clone": {"ops": 1, "flops": 0, "bytes": 4 * 2 * n_gen},
    }
    for row in (train, generate):
        assert row["minus"] == {"ops": 0, "flops": 0, "bytes": 0, "by_kind": {}}


@pytest.mark.parametrize("scheme", list(formulas.FORMULAS))
def test_measured_extra_work_minus_the_formula_is_zero(counted, scheme):
    size, found = counted
    rows = [row for row in formulas.overhead_rows(size, found) if row["scheme"] == scheme]
    assert [row["phase"] for row in rows] == ["train", "generate"]
    for row in rows:
        assert row["minus"] == {"ops": 0, "flops": 0, "bytes": 0, "by_kind": {}}, (row["phase"], row["minus"])


def test_mix_ln_with_a_post_ln_first_layer_minus_pre_ln_is_the_formula_exactly():
    # TINY and SINGLE have floor(0.25 l) = 0 Post-LN layers (Mix-LN is Pre-LN there); at 4 layers each stack has one
    four = dataclasses.replace(TINY, name="four", layers=4)
    found = {name: counts.step_counts(four, name) for name in ("pre", "mix-ln")}
    train, generate = formulas.overhead_rows(four, found)
    # the first layer's q, k, v projections copy the strided input: encoder and decoder in training, the encoder
    # in generation (a decoding step's input is one position)
    assert train["measured"]["by_kind"]["clone"]["ops"] == 6 and generate["measured"]["by_kind"]["clone"]["ops"] == 3
    for row in (train, generate):
        assert row["minus"] == {"ops": 0, "flops": 0, "bytes": 0, "by_kind": {}}, (row["phase"], row["minus"])


def test_attention_residuals_reads_follow_the_paper_full_and_in_blocks():
    # an encoder of 4 layers (8 sub-layers): the number of sources of each read, the top's last
    call = formulas.StackCall(7, 4, 16, 4, decoder=False, backward=True)
    full, tensors, adds = formulas.depth_sources(call, block_layers=0)
    assert full == list(range(1, 10)) and adds == 0 and len(tensors) == 9  # v_0 .. v_l; v_0 .. v_8
    assert [taken for taken, _ in tensors] == list(range(9, 0, -1))  # v_i is read by the 9 - i reads after it
    # blocks of two layers: a block's first sub-layer reads b_0 .. b_{n-1}, the others b_n^{i-1} too (Eq. 6)
    blocks, tensors, adds = formulas.depth_sources(call, block_layers=2)
    assert blocks == [1, 2, 2, 2, 2, 3, 3, 3, 3] and adds == 6 and len(tensors) == 9
    assert [continued for _, continued in tensors] == [False, True, True, True, False, True, True, True, False]


@pytest.mark.parametrize("block_layers", [2, 4])
def test_block_attention_residuals_over_several_layers_minus_pre_ln_is_the_formula_exactly(block_layers):
    # the registered Block variant has blocks of one layer; here blocks span two layers, or the whole stack
    four = dataclasses.replace(TINY, name="four", layers=4)
    ours = counts.step_counts(four, Variant("blocks", "", "attn-res", block_layers=block_layers))
    pre = counts.step_counts(four, "pre")
    shapes = formulas.Shapes.of(four)
    for phase in ("train", "generate"):
        work = formulas.Work()
        for call, repeats in formulas.stack_calls(shapes, phase):
            work += formulas.attention_residuals(call, block_layers).times(repeats)
        if phase == "train":
            work += formulas.optimizer_attention_residuals(shapes)
        measured = formulas.difference(ours[phase], pre[phase])
        assert measured["by_kind"]["add"]["ops"] != 0  # the block sums, the gradient sums
        assert formulas.difference(measured, work.totals()) == {"ops": 0, "flops": 0, "bytes": 0, "by_kind": {}}


def test_every_registered_scheme_has_a_formula():
    assert set(SCHEMES) <= set(formulas.FORMULAS)


def test_the_check_sees_one_multiply_more_per_sublayer(monkeypatch):
    def with_a_multiply(self, sublayer, x, residual, block_input, x_dual):
        return residual + x, x_dual + self.dual_stream_scale * x  # s * x^f as its own tensor, then the add

    monkeypatch.setattr(residual.DualStreamLayer, "residual_sum", with_a_multiply)
    found = {name: counts.step_counts(TINY, name) for name in ("pre", "residual")}
    train = formulas.overhead_rows(TINY, found)[0]
    # forward: one multiply of x^f per sub-layer (4 + 6), backward: one more (its gradient times s)
    assert train["minus"]["by_kind"]["mul"]["ops"] == 2 * (4 + 6) and train["minus"]["ops"] == 20


def test_the_formulas_grow_with_the_shapes_as_written():
    deep = dataclasses.replace(TINY, layers=12)
    dlcl = formulas.formula("dlcl", deep, "generate")["by_kind"]
    # per stack call 13 mixes of 91 entries: 13 multiplies, 78 addcmuls; the encoder once, the decoder 6 steps
    assert dlcl["mul"]["ops"] == 7 * 13 and dlcl["addcmul"]["ops"] == 7 * 78
    assert formulas.formula("deepnet", deep, "generate")["ops"] == 0
    assert formulas.formula("b2t", deep, "train")["by_kind"]["add"]["ops"] == 2 * 2 * 12
