"""The work each scheme's equations add to the layer it is built from, as formulas (docs/performance.md).

Symbols (``Shapes``): B sentences of S source and T target positions in a training batch, width d, FFN width F,
H heads, N encoder and M decoder layers; G sentences in a generation batch, beam K, L tokens per hypothesis (the
decoder runs L + 1 incremental steps of one position for G·K hypotheses). A stack call has n = length · batch · d
elements per hidden state, r = length · batch rows, s sub-layers (2 per encoder layer, 3 per decoder layer).

A formula is the list of aten operations the scheme adds (or, negative, removes), each with the number of
fp32 elements it reads and writes (``counts``' rule: 0-dim tensors count 0); bytes = 4 x elements, FLOPs 0
(no scheme adds a matrix product; Mix-LN's first Post-LN layer runs three as ``mm`` instead of ``addmm``, the
same FLOPs under another kind). ``measured_minus_formula`` subtracts it from the counted difference of
the two variants: zero means the scheme runs nothing beyond its equations (and the named costs that go with
them, each with its reason in ``FORMULAS``' docstrings).
"""

from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Tuple

from fairseq_residual.config import _SCHEME_FIELDS
from fairseq_residual.schemes.manifold_hyper_connections import SINKHORN_ITERATIONS

from .variants import ATTN_RES_BLOCK, Size, model_args

FLOAT_BYTES = 4
#: ``--hc-streams``' default, which the bench's models use
HC_STREAMS = next(f.default for name, _, f in _SCHEME_FIELDS if name == "hc_streams")


@dataclass(frozen=True)
class Shapes:
    """The symbols of the formulas, from a ``Size`` and the bench's beam."""

    B: int
    S: int
    T: int
    d: int
    F: int
    H: int
    N: int
    M: int
    G: int
    K: int
    L: int
    #: Hyper-Connections' number of streams n (``--hc-streams``)
    n: int = 1

    @classmethod
    def of(cls, size: Size) -> "Shapes":
        from .steps import BEAM

        args = model_args(size)
        d, ffn, heads = (args[f"encoder_{key}"] for key in ("embed_dim", "ffn_embed_dim", "attention_heads"))
        return cls(
            size.batch,
            size.src_len,
            size.tgt_len,
            d,
            ffn,
            heads,
            size.layers,
            size.layers,
            size.gen_batch,
            BEAM,
            size.gen_len,
            args.get("hc_streams", HC_STREAMS),
        )


@dataclass(frozen=True)
class StackCall:
    """One run of a stack: ``length`` positions of ``batch`` sentences through ``layers`` layers."""

    length: int
    batch: int
    d: int
    layers: int
    decoder: bool
    backward: bool
    ffn: int = 0
    heads: int = 0
    #: Hyper-Connections' n
    streams: int = 1

    @property
    def rows(self) -> int:
        return self.length * self.batch

    @property
    def n(self) -> int:
        return self.rows * self.d

    @property
    def sublayers(self) -> int:
        return self.layers * (3 if self.decoder else 2)

    @property
    def strided(self) -> bool:
        """Whether the stack's input, fairseq's time-first view of a batch-first embedding, is not contiguous."""
        return self.length > 1 and self.batch > 1


class Work:
    """Operations by kind: ``ops[kind]`` and the elements they read and write, ``elements[kind]``."""

    def __init__(self):
        self.ops: Dict[str, int] = {}
        self.elements: Dict[str, int] = {}
        self.flops: Dict[str, int] = {}

    def add(self, kind: str, count: int, elements: int, flops: int = 0) -> "Work":
        """``count`` operations of ``kind`` (negative: removed), each reading and writing ``elements`` and doing
        ``flops`` (matrix products only, as ``torch.utils.flop_counter`` counts them)."""
        if count:
            self.ops[kind] = self.ops.get(kind, 0) + count
            self.elements[kind] = self.elements.get(kind, 0) + count * elements
            self.flops[kind] = self.flops.get(kind, 0) + count * flops
        return self

    def add_elements(self, kind: str, elements: int) -> "Work":
        """``elements`` more (negative: fewer) read or written by operations of ``kind`` counted elsewhere."""
        self.ops.setdefault(kind, 0)
        self.flops.setdefault(kind, 0)
        self.elements[kind] = self.elements.get(kind, 0) + elements
        return self

    def __iadd__(self, other: "Work") -> "Work":
        for kind in other.ops:
            self.ops[kind] = self.ops.get(kind, 0) + other.ops[kind]
            self.elements[kind] = self.elements.get(kind, 0) + other.elements[kind]
            self.flops[kind] = self.flops.get(kind, 0) + other.flops[kind]
        return self

    def times(self, k: int) -> "Work":
        out = Work()
        out.ops = {kind: k * count for kind, count in self.ops.items()}
        out.elements = {kind: k * count for kind, count in self.elements.items()}
        out.flops = {kind: k * count for kind, count in self.flops.items()}
        return out

    def totals(self) -> Dict:
        """The shape of ``counts.WorkCounter.totals`` (without ``free``)."""
        kinds = sorted(k for k in self.ops if self.ops[k] or self.elements[k] or self.flops[k])
        by_kind = {
            k: {"ops": self.ops[k], "flops": self.flops[k], "bytes": FLOAT_BYTES * self.elements[k]} for k in kinds
        }
        return {
            "ops": sum(c["ops"] for c in by_kind.values()),
            "flops": sum(c["flops"] for c in by_kind.values()),
            "bytes": sum(c["bytes"] for c in by_kind.values()),
            "by_kind": by_kind,
        }


# the elements an operation reads and writes
def layer_norm_forward(c: StackCall, width: int = 0) -> int:
    """native_layer_norm over rows of ``width`` (default d): x (n), weight and bias (d) in; y (n), mean and
    1/std (r) out."""
    d = width or c.d
    return 2 * c.rows * d + 2 * d + 2 * c.rows


def layer_norm_backward(c: StackCall, width: int = 0) -> int:
    """native_layer_norm_backward: grad, x (n), mean, 1/std (r), weight, bias (d) in; grads of x, weight, bias out."""
    d = width or c.d
    return 3 * c.rows * d + 2 * c.rows + 4 * d


def rms_norms(c: StackCall, count: int) -> Work:
    """``count`` gain-only RMS norms (``nn.RMSNorm``, elementwise kernels on the CPU) in each stack call: forward
    x^2, its mean over d, + eps, rsqrt, x times it, times gamma; backward the two products' gradients, gamma's
    reduction, the mean's (a broadcast division) and rsqrt's (its cube, two products) and x^2's (x^1 times 2 times
    the gradient), and the sum of x's two gradients."""
    n, r, d = c.n, c.rows, c.d
    work = Work().add("pow", count, 2 * n).add("mean", count, n + r).add("add_", count, 2 * r)
    work.add("rsqrt", count, 2 * r).add("mul", count, 2 * n + r).add("mul", count, 2 * n + d)
    if not c.backward:
        return work
    work.add("mul", count, 3 * n).add("mul", count, 2 * n + d).add("sum", count, n + d)  # gamma's and x_hat's
    work.add("mul", count, 3 * n).add("mul", count, 2 * n + r).add("sum", count, n + r)  # rsqrt's and x's
    work.add("pow", count, 2 * r).add("mul", count, 2 * r).add("mul", count, 3 * r).add("div", count, r + n)
    return work.add("pow", count, 2 * n).add("mul", count, 2 * n).add("mul", count, 3 * n).add("add", count, 3 * n)


def layer_norms(c: StackCall, count: int, width: int = 0) -> Work:
    """``count`` LayerNorms over rows of ``width`` in each stack call, with their backward in training."""
    work = Work().add("native_layer_norm", count, layer_norm_forward(c, width))
    return work.add("native_layer_norm_backward", count * c.backward, layer_norm_backward(c, width))


def adam(work: Work, parameters: int, numel: int) -> Work:
    """torch.optim.Adam's update (single-tensor path, no weight decay) of ``parameters`` parameters of ``numel``
    elements each: step += 1 and its .item() (0-dim), lerp_ of m, mul_ and addcmul_ of v, sqrt, div and add_ of
    the denominator, addcdiv_ of the parameter."""
    p, k = numel, parameters
    work.add("_local_scalar_dense", k, 0).add("add_", k, 0)
    work.add("lerp_", k, 3 * p).add("mul_", k, 2 * p).add("addcmul_", k, 4 * p)
    return work.add("sqrt", k, 2 * p).add("div", k, 2 * p).add("add_", k, 2 * p).add("addcdiv_", k, 4 * p)


# the schemes: per stack call, the operations added to the base; and the parameters' updates
def residual(c: StackCall) -> Work:
    """ResiDual over Pre-LN (the same LayerNorms: Pre-LN's final LN is ResiDual's LN of x^d).

    Forward: the dual adds x^d + x^f, one per sub-layer, and y = x^ln + LN(x^d). Backward: x^f feeds both paths
    (a gradient sum per sub-layer) and so does the embedding (x^d_1 = x^ln_1 = x: one sum). Named: a copy of
    the embedding where fairseq's time-first view of it is not contiguous (training, and the encoder in
    generation), so that the first layer's projections run as fused addmm; Pre-LN's first LayerNorm writes a
    contiguous x^ln_1 anyway, Post-LN copies it inside each of its first q/k/v projections instead."""
    work = Work().add("add", c.sublayers + 1, 3 * c.n).add("clone", int(c.strided), 2 * c.n)
    return work.add("add", c.sublayers + 1, 3 * c.n) if c.backward else work


def b2t(c: StackCall) -> Work:
    """B2T over Post-LN: per layer the block input added to the last residual sum, and its gradient's sum."""
    return Work().add("add", c.layers * (1 + c.backward), 3 * c.n)


def deepnet(c: StackCall) -> Work:
    """DeepNet over Post-LN: the residual sum x^f + alpha x is one add with alpha (as Post-LN's add); backward
    multiplies the residual's gradient by alpha, once per sub-layer."""
    return Work().add("mul", c.sublayers * c.backward, 2 * c.n)


def admin(c: StackCall) -> Work:
    """Admin over Post-LN: x_{i-1} * omega_i per sub-layer; backward its two products and omega's reduction.

    With autograd: a multiply beside Post-LN's add (addcmul's backward would multiply by its value, 1, twice
    more); without it (decoding) one addcmul in place of the add. Named: omega = omega0 + delta, an add of d
    elements per sub-layer per call, the cost of keeping the profiled value in a buffer (schemes/admin.py)."""
    s, n, d = c.sublayers, c.n, c.d
    work = Work().add("add", s, 2 * d)
    if not c.backward:
        return work.add("add", -s, 3 * n).add("addcmul", s, 3 * n + d)
    work.add("mul", s, 2 * n + d)  # forward: x_{i-1} * omega
    work.add("mul", s, 2 * n + d).add("mul", s, 3 * n)  # backward: grad * omega, grad * x_{i-1}
    return work.add("sum", s, n + d)


def tfixup(c: StackCall) -> Work:
    """T-Fixup over Post-LN: no LayerNorm after any sub-layer. Named: in training one copy of the decoder's
    gradient, which reaches the stack transposed (the output projection takes the batch-first view); the
    LayerNorm at the top of the other schemes' stacks makes that copy inside its backward."""
    work = Work().add("native_layer_norm", -c.sublayers, layer_norm_forward(c))
    if c.backward:
        work.add("native_layer_norm_backward", -c.sublayers, layer_norm_backward(c))
        work.add("clone", int(c.decoder and c.strided), 2 * c.n)
    return work


def dlcl(c: StackCall) -> Work:
    """DLCL over Pre-LN, with l layers in the stack and E = (l+1)(l+2)/2 entries mixed in all:

    forward: LN_k per layer; l + 1 mixes, a multiply for each mix's first entry and an addcmul for every other;
    backward: LN_k's backward; per entry w[k] * g and <g, h_k> (a dot product); per mix one stack of its
    weights' gradients and one slice_backward (a row of W has l + 1 entries, a layer uses the first l' + 1);
    the gradient sums of entries read by several mixes, l(l+1)/2. Named: one copy of the embedding where its
    time-first view is not contiguous, so that the dot products run on flat views."""
    layers, n = c.layers, c.n
    entries = (layers + 1) * (layers + 2) // 2
    work = Work().add("clone", int(c.strided), 2 * n).add("native_layer_norm", layers, layer_norm_forward(c))
    work.add("mul", layers + 1, 2 * n).add("addcmul", entries - (layers + 1), 3 * n)
    if not c.backward:
        return work
    work.add("native_layer_norm_backward", layers, layer_norm_backward(c))
    work.add("mul", entries, 2 * n).add("dot", entries, 2 * n)
    for m in range(1, layers + 2):  # a mix of m entries: stack writes m; slice_backward reads m, writes l + 1
        work.add("stack", 1, m).add("slice_backward", 1, m + layers + 1)
    return work.add("add", layers * (layers + 1) // 2, 3 * n)


def sandwich(c: StackCall) -> Work:
    """Sandwich-LN over Pre-LN (and ResiDual-Sandwich over ResiDual): LN^out on every sub-layer's output."""
    return layer_norms(c, c.sublayers)


def normformer(c: StackCall) -> Work:
    """NormFormer over Pre-LN, per layer: LN^attn (width d) and LN^fc (FFN width); the head scaling
    W^O diag(gamma) of the self-attention's d x d output projection, computed at every call (a multiply reading
    W^O and gamma), and in backward its two products (grad * gamma, grad * W^O) and the reduction to gamma."""
    d2, heads = c.d * c.d, c.heads
    work = layer_norms(c, c.layers)
    work += layer_norms(c, c.layers, c.ffn)
    work.add("mul", c.layers, 2 * d2 + heads)
    if c.backward:
        work.add("mul", c.layers, 2 * d2 + heads).add("mul", c.layers, 3 * d2).add("sum", c.layers, d2 + heads)
    return work


def mix_ln(c: StackCall) -> Work:
    """Mix-LN over Pre-LN, at the default ratio (the bench builds every scheme with its defaults): a Post-LN
    layer runs the same LayerNorms and adds as a Pre-LN one, in another order. Named: where the stack's first
    layer is Post-LN (floor(alpha l) >= 1) and its input, fairseq's time-first view of the embedding, is not
    contiguous, that layer's q, k and v projections copy it and run ``mm`` plus a bias add instead of one
    ``addmm``, as Post-LN's first layer does (Pre-LN's first LayerNorm writes a contiguous tensor)."""
    from fairseq_residual.schemes.mix_ln import DEFAULT_RATIO, post_ln_layers

    n, d = c.n, c.d
    copies = 3 * int(post_ln_layers(DEFAULT_RATIO, c.layers) >= 1 and c.strided)
    work = Work().add("clone", copies, 2 * n).add("add", copies, 2 * n + d)
    product = 2 * c.rows * d * d  # one projection's FLOPs, the same as mm or as addmm
    return work.add("mm", copies, 2 * n + d * d, product).add("addmm", -copies, 2 * n + d * d + d, product)


def ln_scaling(c: StackCall) -> Work:
    """LayerNorm Scaling over Pre-LN: in layers 2 ... l, every LayerNorm's gain and bias times 1/sqrt(l) at each
    call (two multiplies of d elements; layer 1's factor is 1 and costs nothing), and in backward their
    gradients times the same factor."""
    per_layer = c.sublayers // c.layers
    return Work().add("mul", 2 * per_layer * (c.layers - 1) * (1 + c.backward), 2 * c.d)


def keel(c: StackCall) -> Work:
    """Keel over Pre-LN: gain-only RMS norms in place of Pre-LN's s LayerNorms and its final one: N^in on every
    sub-layer's input, N^post after every sum but the first self-attention's (2s - 1); backward multiplies the
    residual's gradient by alpha in every sub-layer above the first layer (alpha x + f is one add with alpha, and
    the first layer's alpha is 1). Named: a contiguous copy of the embedding where its time-first view is strided
    (``Keel.start``), which Pre-LN's fused first LayerNorm makes as a by-product; in training, one copy of the
    decoder's gradient, which reaches the stack transposed (T-Fixup's: ``base.contiguous_gradient``), where Pre-LN's
    top LayerNorm copies it inside its backward."""
    s, per_layer = c.sublayers, c.sublayers // c.layers
    work = Work().add("clone", int(c.strided) * (1 + int(c.decoder and c.backward)), 2 * c.n)
    work += rms_norms(c, 2 * s - 1)
    work += layer_norms(c, s + 1).times(-1)
    return work.add("mul", (s - per_layer) * c.backward, 2 * c.n)


def siamese(c: StackCall) -> Work:
    """SiameseNorm over ResiDual: per sub-layer LN^y of x^d and LN^in of x^ln + LN^y(x^d) (that add too), per stack
    LN_0 of the embedding and LN^out at the top; backward the gradient of x^d summed from LN^y and the next sum,
    and 1/c times x^f's gradient on the Post-LN path (x^ln + x^f / c is one add with 1/c). ResiDual's copy of the
    strided embedding is gone: LN_0 writes x^ln_1 contiguous."""
    s = c.sublayers
    work = layer_norms(c, 2 * s + 2).add("add", s * (1 + c.backward), 3 * c.n)
    return work.add("clone", -int(c.strided), 2 * c.n).add("mul", s * c.backward, 2 * c.n)


def plugin(c: StackCall) -> Work:
    """The plugin's layer loops over fairseq's (its ``pre`` / ``post`` against stock): the decoder makes its
    causal mask on every training call (``full`` and ``triu_`` of T x T; stock caches it on the module, which
    the plugin's layers must not: docs/architecture.md), and the encoder reads its has-padding flag once
    (stock reads it in each layer: N - 1 host reads fewer)."""
    work = Work()
    if c.decoder and c.backward:
        work.add("full", 1, c.length**2).add("triu_", 1, 2 * c.length**2)
    return work if c.decoder else work.add("_local_scalar_dense", -(c.layers - 1), 0)


def hyper_connections(c: StackCall) -> Work:
    """Dynamic Hyper-Connections over Pre-LN, with n streams, E = n · r · d elements in the n streams:

    per stack: one contiguous copy of the embedding into the n streams (when n > 1 or its time-first view is
    strided), the sum of the streams at the top and of every layer's output (the hidden states fairseq records:
    always in the decoder, in training in the encoder too, whose model forward asks for them); backward: the
    streams' gradients summed into the embedding's, and the top sub-layer's output gradient read once where a
    bmm and a multiply read it (a broadcast of the sum's gradient over the streams).
    Per sub-layer, forward: norm(H) (rows n r); H_bar [W_m | W_r] (mm) and H_bar W_beta (mv), their tanh and
    scales; the static A_m, A_r, B added; h = A_m^T H and A_r^T H (bmm); B^T out (a broadcast multiply) and the
    sum of the two; Pre-LN's sum x + f removed. Backward: each product's two gradients, the reductions of the
    static matrices' and the scales' gradients over the tokens, select/slice backward of [A_m | A_r], the
    gradient sums of H (read by the norm and both bmm) and of norm(H) (read by mm and mv); Pre-LN's gradient
    sum of x (read by its LN and the residual) removed."""
    r, d, m, s = c.rows, c.d, c.streams, c.sublayers
    e, a = r * m * d, r * m * (m + 1)  # the streams; the dynamic [A_m | A_r]
    work = Work().add("clone", int(m > 1 or c.strided), r * d + e)
    work.add("sum", 1 + (c.layers if c.decoder or c.backward else 0), e + r * d)
    work.add("native_layer_norm", s, layer_norm_forward(c) + 2 * (m - 1) * r * (d + 1))
    work.add("mm", s, e + d * (m + 1) + a, 2 * e * (m + 1)).add("mv", s, e + d + r * m)
    work.add("tanh", s, 2 * a).add("mul", s, 2 * a).add("tanh", s, 2 * r * m).add("mul", s, 2 * r * m)
    work.add("add", 2 * s, 2 * r * m + m).add("add", s, 2 * r * m * m + m * m)  # + A_m, + B; + A_r
    work.add("add", s, 3 * m)  # the static A_m = a_m_start + a_m (its initial e_k kept in a buffer)
    work.add("bmm", s, r * m + e + r * d, 2 * e).add("bmm", s, r * m * m + 2 * e, 2 * e * m)
    work.add("mul", s, r * m + r * d + e).add("add", s, 3 * e).add("add", -s, 3 * r * d)
    if not c.backward:
        return work
    work.add("sum", 1, e + r * d)
    # the top sub-layer's output gradient is the sum's, broadcast over the streams: read once, not n times
    work.add_elements("bmm", -2 * (m - 1) * r * d).add_elements("mul", -2 * (m - 1) * r * d)
    work.add("mul", s, 2 * e + r * m).add("mul", s, 2 * e + r * d).add("sum", s, e + r * m).add("sum", s, e + r * d)
    work.add("bmm", 2 * s, r * m * m + 2 * e, 2 * e * m).add("bmm", 2 * s, r * m + r * d + e, 2 * e)
    work.add("sum", 2 * s, r * m + m).add("sum", s, r * m * m + m * m).add("add", 3 * s, 3 * e)
    work.add("slice_backward", s, r * m * m + a).add("select_backward", s, r * m + a).add("add", s, 3 * a)
    work.add("mul", s, 2 * r * m).add("mul", s, 3 * r * m).add("sum", s, r * m).add("tanh_backward", s, 3 * r * m)
    work.add("mul", s, r * m + d + e).add("mv", s, e + r * m + d)
    work.add("mul", s, 2 * a).add("mul", s, 3 * a).add("sum", s, a).add("tanh_backward", s, 3 * a)
    work.add("mm", 2 * s, e + a + d * (m + 1), 2 * e * (m + 1))
    work.add("native_layer_norm_backward", s, 3 * e + 2 * r * m + 4 * d)
    return work.add("add", -s, 3 * r * d)


def manifold_hyper_connections(c: StackCall) -> Work:
    """mHC over Pre-LN, with n streams, E = n · r · d, P = 2n + n^2 mapping entries per token, t = 20 rounds:

    per stack as ``hyper_connections``. Per sub-layer, forward: RMSNorm of vec(x) (pow, mean, + eps, rsqrt, a
    multiply); x' phi (mm); the three alpha (x' phi) + b; sigmoid twice and 2 sigma; Sinkhorn-Knopp: max, the
    shift, exp, then t rounds of a column and a row normalisation (a sum and a division each); the read, write
    and sum of ``hyper_connections``, Pre-LN's sum removed. Backward: the read's and write's products as in HC;
    per normalisation two divisions, a negation, a product, a division, a sum and the gradient sum; exp's
    product; 2 sigma and the sigmoids; per mapping b's and alpha's reductions, the slice of x' phi and the
    select of alpha; phi's two products; RMSNorm's backward; the gradient sums of H and of vec(x)."""
    r, d, m, s, t = c.rows, c.d, c.streams, c.sublayers, SINKHORN_ITERATIONS
    e, p, q = r * m * d, 2 * m + m * m, r * m * m  # the streams; mapping entries per token; H^res entries
    work = Work().add("clone", int(m > 1 or c.strided), r * d + e)
    work.add("sum", 1 + (c.layers if c.decoder or c.backward else 0), e + r * d)
    work.add("pow", s, 2 * e).add("mean", s, e + r).add("add", s, 2 * r).add("rsqrt", s, 2 * r)
    work.add("mul", s, 2 * e + r).add("mm", s, e + m * d * p + r * p, 2 * e * p)
    work.add("mul", 2 * s, 2 * r * m).add("add", 2 * s, 2 * r * m + m).add("mul", s, 2 * q).add("add", s, 2 * q + m * m)
    work.add("sigmoid", 2 * s, 2 * r * m).add("mul", s, 2 * r * m).add("add", s, 3 * m)  # b_pre_start + b_pre
    work.add("amax", s, q + r).add("sub", s, 2 * q + r).add("exp", s, 2 * q)
    work.add("sum", 2 * t * s, q + r * m).add("div", 2 * t * s, 2 * q + r * m)
    work.add("bmm", s, r * m + e + r * d, 2 * e).add("bmm", s, q + 2 * e, 2 * e * m)
    work.add("mul", s, r * m + r * d + e).add("add", s, 3 * e).add("add", -s, 3 * r * d)
    if not c.backward:
        return work
    work.add("sum", 1, e + r * d)
    work.add_elements("bmm", -2 * (m - 1) * r * d).add_elements("mul", -2 * (m - 1) * r * d)
    work.add("mul", s, 2 * e + r * m).add("mul", s, 2 * e + r * d).add("sum", s, e + r * m).add("sum", s, e + r * d)
    work.add("bmm", 2 * s, q + 2 * e, 2 * e * m).add("bmm", 2 * s, r * m + r * d + e, 2 * e).add("add", 3 * s, 3 * e)
    rounds = 2 * t * s  # each normalisation's backward
    work.add("div", 3 * rounds, 2 * q + r * m).add("neg", rounds, 2 * q).add("mul", rounds, 3 * q)
    work.add("sum", rounds, q + r * m).add("add", rounds, 2 * q + r * m)  # + the sum's gradient, broadcast
    work.add("mul", s, 3 * q).add("mul", s, 2 * r * m).add("sigmoid_backward", 2 * s, 3 * r * m)
    work.add("sum", s, q + m * m).add("mul", s, 2 * q).add("mul", s, 3 * q).add("sum", s, q)  # H~res's b, alpha
    work.add("sum", 2 * s, r * m + m).add("mul", 2 * s, 2 * r * m).add("mul", 2 * s, 3 * r * m).add("sum", 2 * s, r * m)
    work.add("slice_backward", s, q + r * p).add("slice_backward", 2 * s, r * m + r * p).add("add", 2 * s, 3 * r * p)
    work.add("select_backward", 3 * s, 3).add("add", 2 * s, 9)
    work.add("mm", 2 * s, e + r * p + m * d * p, 2 * e * p)
    work.add("mul", s, 3 * e).add("mul", s, 2 * e + r).add("sum", s, e + r).add("pow", s, 2 * r).add("mul", s, 2 * r)
    work.add("mul", s, 3 * r).add("div", s, e + r).add("pow", s, 2 * e).add("mul", s, 2 * e).add("mul", s, 3 * e)
    return work.add("add", -s, 3 * r * d)


def depth_sources(c: StackCall, block_layers: int) -> Tuple[List[int], List[Tuple[int, bool]], int]:
    """Attention Residuals' sources in one stack call, followed as the scheme makes them: the number of sources of
    every read (the sub-layers' in order, then the top's); per tensor that becomes a source (v_0 first), the reads
    that take it and whether a block continues it (Block: b_n^i + v); the block sums' adds."""
    reads: List[int] = []
    taken: List[int] = [0]  # reads of each tensor
    continued: List[bool] = [False]
    closed: List[int] = [0]  # v_0 / b_0, then the other closed sources
    opened: List[int] = []  # Block: the open block's running sum, if any
    adds = 0

    def read(sources: List[int]) -> None:
        reads.append(len(sources))
        for source in sources:
            taken[source] += 1

    per_layer = c.sublayers // c.layers
    for layer in range(c.layers):
        for _ in range(per_layer):
            read(closed + opened)
            new = len(taken)
            taken.append(0)
            continued.append(False)
            if not block_layers:  # Full: every output a source of its own
                closed.append(new)
                continue
            if opened:  # b_n^i = b_n^{i-1} + v
                continued[opened[0]] = True
                adds += 1
            opened = [new]
        if block_layers and (layer + 1) % block_layers == 0:
            closed, opened = closed + opened, []
    read(closed + opened)
    return reads, list(zip(taken, continued)), adds


def attention_residuals(c: StackCall, block_layers: int = 0) -> Work:
    """Attention Residuals over Pre-LN (Full, or Block with blocks of ``block_layers`` layers), as ``depth_sources``
    follows its reads of m sources and the tensors that become sources:

    per source tensor, rho = rsqrt(mean(v^2) + eps) (pow, mean, add, rsqrt); per read, u = w * g, per source one mv
    (u^T v over its rows) and a multiply by rho, the stack of the m logits, their softmax, the mix (a multiply, then
    m - 1 addcmul); Block: the adds of the block sums; Pre-LN's residual sums removed. Backward: per read the
    softmax's and the slice's backward (DLCL's ``mix`` slices the weights), per source the mix's two products (a bmm
    of the per-token dot products and a multiply), a stack of the weights' gradients, mv's two (an outer product and
    an mv), the two multiplies of the logit by rho, u's two products and the sum of its m gradients; per tensor
    rho's backward (mean's division, the powers and multiplies of rsqrt and of the square) and the sums of its
    gradients, one per use beyond the first (rho, each read's mv and mix, a block's continuation), and of rho's;
    Pre-LN's gradient sums of its stream removed. Named: one copy of the embedding where its time-first view is not
    contiguous, so that every read takes it as rows."""
    r, d, n, s = c.rows, c.d, c.n, c.sublayers
    reads, tensors, adds = depth_sources(c, block_layers)
    work = Work().add("clone", int(c.strided), 2 * n).add("add", adds - s, 3 * n)
    work.add("pow", len(tensors), 2 * n).add("mean", len(tensors), n + r)
    work.add("add", len(tensors), 2 * r).add("rsqrt", len(tensors), 2 * r)
    for m in reads:
        work.add("mul", 1, 3 * d).add("mv", m, n + d + r).add("mul", m, 3 * r)
        work.add("stack", 1, 2 * m * r).add("_softmax", 1, 2 * m * r)
        work.add("mul", 1, 2 * n + r).add("addcmul", m - 1, 3 * n + r)
    if not c.backward:
        return work
    for m in reads:
        work.add("_softmax_backward_data", 1, 3 * m * r).add("slice_backward", 1, 2 * m * r)
        work.add("bmm", m, 2 * n + r, 2 * n).add("mul", m, 2 * n + r).add("stack", 1, 2 * m * r)
        work.add("mul", m, n + d + r).add("mv", m, n + r + d).add("mul", 2 * m, 3 * r)
        work.add("mul", 2, 3 * d).add("add", m - 1, 3 * d)
    for taken, continued in tensors:
        work.add("div", 1, n + r).add("pow", 1, 2 * r).add("mul", 1, 2 * r).add("mul", 1, 3 * r)
        work.add("pow", 1, 2 * n).add("mul", 1, 2 * n).add("mul", 1, 3 * n)
        work.add("add", 2 * taken + continued, 3 * n).add("add", taken - 1, 3 * r)
    return work.add("add", -s, 3 * n)


def optimizer_attention_residuals(x: Shapes) -> Work:
    return adam(Work(), 2 * (2 * x.N + 3 * x.M + 2), x.d)  # w and RMSNorm's gain of every sub-layer and both tops


def optimizer_residual(x: Shapes) -> Work:
    return Work()


def optimizer_admin(x: Shapes) -> Work:
    return adam(Work(), 2 * x.N + 3 * x.M, x.d)  # omega_delta of every sub-layer


def optimizer_tfixup(x: Shapes) -> Work:
    return adam(Work(), -2 * (2 * x.N + 3 * x.M), x.d)  # the LayerNorms' weights and biases


def optimizer_sandwich(x: Shapes) -> Work:
    return adam(Work(), 2 * (2 * x.N + 3 * x.M), x.d)  # LN^out's weight and bias of every sub-layer


def optimizer_normformer(x: Shapes) -> Work:
    layers = x.N + x.M
    work = adam(Work(), layers, x.H)  # gamma
    return adam(adam(work, 2 * layers, x.d), 2 * layers, x.F)  # LN^attn, LN^fc


def optimizer_keel(x: Shapes) -> Work:
    """gamma of N^in and N^post (no biases), less the first self-attention's N^post in each stack, in place of
    Pre-LN's gains and biases and its two final LayerNorms': 6 parameters of d fewer."""
    return adam(Work(), -6, x.d)


def optimizer_siamese(x: Shapes) -> Work:
    return adam(Work(), 4 * (2 * x.N + 3 * x.M) + 8, x.d)  # LN^y, LN^in per sub-layer; LN_0, LN^out per stack


def optimizer_dlcl(x: Shapes) -> Work:
    work = adam(Work(), 2 * (x.N + x.M), x.d)  # LN_k of every layer
    for layers in (x.N, x.M):
        adam(work, layers + 1, layers + 1)  # W's rows: one per layer and the top's
    return work


def optimizer_hyper_connections(x: Shapes) -> Work:
    """Per sub-layer: A_m, B (n), A_r (n x n), norm's weight and bias (d), [W_m | W_r] (d x (n + 1)), W_beta (d),
    s_alpha and s_beta (0-dim: their updates move no counted bytes)."""
    s, n, d = 2 * x.N + 3 * x.M, x.n, x.d
    work = adam(Work(), 2 * s, n)
    adam(work, s, n * n)
    adam(work, 3 * s, d)
    adam(work, s, d * (n + 1))
    return adam(work, 2 * s, 0)


def optimizer_manifold_hyper_connections(x: Shapes) -> Work:
    """Per sub-layer: phi (n d x (2n + n^2)), alpha (3), b^pre, b^post (n), b^res (n x n)."""
    s, n, d = 2 * x.N + 3 * x.M, x.n, x.d
    work = adam(Work(), s, n * d * (2 * n + n * n))
    adam(work, s, 3)
    adam(work, 2 * s, n)
    return adam(work, s, n * n)


#: scheme -> (the variant it is compared with, its operations per stack call, its parameters' updates)
FORMULAS: Dict[str, Tuple[str, Callable[[StackCall], Work], Callable[[Shapes], Work]]] = {
    "residual": ("pre", residual, optimizer_residual),
    "b2t": ("post", b2t, optimizer_residual),
    "deepnet": ("post", deepnet, optimizer_residual),
    "admin": ("post", admin, optimizer_admin),
    "tfixup": ("post", tfixup, optimizer_tfixup),
    "dlcl": ("pre", dlcl, optimizer_dlcl),
    "sandwich": ("pre", sandwich, optimizer_sandwich),
    "normformer": ("pre", normformer, optimizer_normformer),
    "residual-sandwich": ("residual", sandwich, optimizer_sandwich),
    "mix-ln": ("pre", mix_ln, optimizer_residual),
    "ln-scaling": ("pre", ln_scaling, optimizer_residual),
    "keel": ("pre", keel, optimizer_keel),
    "hc": ("pre", hyper_connections, optimizer_hyper_connections),
    "mhc": ("pre", manifold_hyper_connections, optimizer_manifold_hyper_connections),
    "siamese": ("residual", siamese, optimizer_siamese),
    "attn-res": ("pre", attention_residuals, optimizer_attention_residuals),
    ATTN_RES_BLOCK: ("pre", lambda c: attention_residuals(c, block_layers=1), optimizer_attention_residuals),
    "pre": ("stock-pre", plugin, optimizer_residual),
    "post": ("stock-post", plugin, optimizer_residual),
}


def stack_calls(x: Shapes, phase: str) -> Iterator[Tuple[StackCall, int]]:
    """(stack call, how many times) of a training step (each stack once, with backward) or of a generation
    (the encoder once, then L + 1 decoder steps of one position for G·K hypotheses)."""
    if phase == "train":
        yield StackCall(x.S, x.B, x.d, x.N, False, True, x.F, x.H, x.n), 1
        yield StackCall(x.T, x.B, x.d, x.M, True, True, x.F, x.H, x.n), 1
    else:
        yield StackCall(x.S, x.G, x.d, x.N, False, False, x.F, x.H, x.n), 1
        yield StackCall(1, x.G * x.K, x.d, x.M, True, False, x.F, x.H, x.n), x.L + 1


def formula(scheme: str, size: Size, phase: str) -> Dict:
    """The extra work of ``scheme`` over its base (``FORMULAS``) in one training step (``phase`` "train") or
    one generation ("generate") at ``size``, in ``counts``' shape."""
    _, per_call, optimizer = FORMULAS[scheme]
    x = Shapes.of(size)
    work = Work()
    for call, repeats in stack_calls(x, phase):
        work += per_call(call).times(repeats)
    if phase == "train":
        work += optimizer(x)
    return work.totals()


def difference(a: Dict, b: Dict) -> Dict:
    """``a`` - ``b`` of two ``counts`` totals: ops, flops, bytes and, per kind present in either, the same."""
    kinds = sorted(set(a["by_kind"]) | set(b["by_kind"]))
    zero = {"ops": 0, "flops": 0, "bytes": 0}
    by_kind = {}
    for kind in kinds:
        x, y = a["by_kind"].get(kind, zero), b["by_kind"].get(kind, zero)
        diff = {key: x[key] - y[key] for key in zero}
        if any(diff.values()):
            by_kind[kind] = diff
    return {**{key: a[key] - b[key] for key in zero}, "by_kind": by_kind}


def overhead_rows(size: Size, counted: Dict[str, Dict]) -> List[Dict]:
    """Per scheme of ``FORMULAS`` counted at ``size`` (``counted[variant][phase]``, ``counts.step_counts``) and
    phase: the measured difference to its base, the formula, and measured minus formula."""
    rows = []
    for scheme, (base, _, _) in FORMULAS.items():
        if scheme not in counted or base not in counted:
            continue
        for phase in ("train", "generate"):
            measured = difference(counted[scheme][phase], counted[base][phase])
            expected = formula(scheme, size, phase)
            rows.append(
                dict(
                    scheme=scheme,
                    base=base,
                    phase=phase,
                    measured=measured,
                    formula=expected,
                    minus=difference(measured, expected),
                )
            )
    return rows
