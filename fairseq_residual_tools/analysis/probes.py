"""Probes of the paper's claims: per-block gradient norms and the diversity of block inputs.

For every registered scheme (``schemes.SCHEMES``; new ones appear automatically),
depth and seed -- at initialisation, or for trained checkpoints -- one forward and
backward pass of the token-level cross-entropy (mean over target tokens, no label
smoothing, dropout off) on a fixed batch of real sentences measures, per encoder
and decoder block k = 1..N (a fairseq layer):

* ``grad_norm[k]`` = ||dL/dw_k||, the L2 norm of the gradient of all parameters of
  layer k (attention, FFN and the layer's own LayerNorms). Theorem 3.1 / Eq. 4-5:
  Post-LN's decays toward the bottom roughly like (1/2)^((N-k)/2); ResiDual's is
  bounded below by the dual path (about log(N-k)/N).
* ``rel_diff[k]`` = mean over tokens of ||x^ln_{k+1} - x^ln_k|| / ||x^ln_k|| and
  ``cosine[k]`` = mean cosine similarity of x^ln_{k+1} and x^ln_k, for k = 1..N-1.
  Theorem 3.3: Pre-LN's difference shrinks like O(1/k) (representation collapse);
  Theorem 3.6: Post-LN's and ResiDual's stay roughly constant with depth.
* ``median_abs_grad[k]``: the median |g| over layer k's gradient coordinates, to
  compare with Adam's epsilon (fairseq's default 1e-8). Theorem 3.2: Adam's first
  step is alpha * g / (|g| + eps), about alpha * sign(g) whatever |g| is, and its
  sensitivity to the gradient, alpha * eps / (|g| + eps)^2, peaks at alpha / eps as
  g -> 0; a block whose typical |g| approaches eps is in that ill-conditioned regime.

Which tensor is x^ln_k. The paper defines it as the input of the sub-layer:
x^f_k = f_k(x^ln_k). The probe therefore records, with a forward pre-hook, the
query that each layer passes to its first sub-layer (``self_attn``), whatever the
scheme does around it: for Post-LN-style layers (Post-LN, ResiDual, DeepNet, ...)
that is the layer's input LN(x^a_{k-1}) (the embedding for k = 1; ResiDual's
layers receive ``[x^ln ; x^d]`` and hand only x^ln to the sub-layer); for Pre-LN
it is LN(x^a_k), the output of the layer's own ``self_attn_layer_norm``, not the
un-normalised stream x^a_k the layer receives; for schemes that mix earlier
outputs (DLCL) it is the mixed, normalised input; for schemes without LayerNorm
(T-Fixup) it is the raw stream. Pairs are compared per token (padding excluded)
and averaged.
"""

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F

from fairseq_residual.schemes.base import stack_layers

from ..provenance import provenance

ROOT = Path(__file__).resolve().parents[2]
STACKS = ("encoder", "decoder")
BLOCK_METRICS = ("grad_norm", "median_abs_grad")
PAIR_METRICS = ("rel_diff", "cosine")


@dataclasses.dataclass
class Batch:
    src_tokens: torch.Tensor  # B x S, left-padded as fairseq's translation task does
    src_lengths: torch.Tensor
    prev_output_tokens: torch.Tensor  # B x T
    target: torch.Tensor  # B x T
    pad: int


def translation_task(databin):
    """fairseq's translation task on a data-bin, configured as ``fairseq-generate DATA_BIN`` would be."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    parser = options.get_generation_parser(default_task="translation")
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, [str(databin)]))
    return tasks.setup_task(cfg.task)


def load_batch(task, split="valid", sentences=64) -> Batch:
    """The first ``sentences`` pairs of ``split``, collated as fairseq-train would."""
    task.load_dataset(split)
    dataset = task.dataset(split)
    sample = dataset.collater([dataset[i] for i in range(min(sentences, len(dataset)))])
    net = sample["net_input"]
    return Batch(
        net["src_tokens"], net["src_lengths"], net["prev_output_tokens"], sample["target"], task.target_dictionary.pad()
    )


def build_at_init(task, scheme: str, layers: int, dim: int, heads: int, ffn: int, seed: int):
    """A freshly initialised residual_transformer (dropout off, shared embeddings if possible)."""
    from fairseq_residual.config import ResidualTransformerConfig
    from fairseq_residual.model import ResidualTransformerModel

    overrides = dict(residual_scheme=scheme, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    overrides["share_all_embeddings"] = task.source_dictionary == task.target_dictionary
    sizes = {"layers": layers, "embed_dim": dim, "ffn_embed_dim": ffn, "attention_heads": heads}
    overrides.update({f"{side}_{key}": value for side in STACKS for key, value in sizes.items()})
    torch.manual_seed(seed)
    cfg = dataclasses.replace(ResidualTransformerConfig(), **overrides)
    return ResidualTransformerModel.build_model(cfg, task).eval()


def load_checkpoint(path, databin=None):
    """(model, task) of a fairseq checkpoint; ``databin`` replaces the data path it recorded."""
    from fairseq import checkpoint_utils

    overrides = {"data": str(databin)} if databin else None
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides=overrides)
    return models[0].eval(), task


def _capture_sublayer_inputs(layers, store: List):
    """Forward pre-hooks recording the query each layer gives its self-attention (T x B x C)."""

    def record(index, module, args, kwargs):
        store[index] = (kwargs["query"] if "query" in kwargs else args[0]).detach()

    hooks = [partial(record, i) for i in range(len(layers))]
    return [layer.self_attn.register_forward_pre_hook(hook, with_kwargs=True) for layer, hook in zip(layers, hooks)]


def adjacent_diversity(inputs: List[torch.Tensor]) -> Dict[str, List[float]]:
    """rel_diff and cosine of each adjacent pair (k, k+1) of per-token block inputs."""
    rel, cos = [], []
    for a, b in zip(inputs[:-1], inputs[1:]):
        rel.append(((b - a).norm(dim=-1) / a.norm(dim=-1)).mean().item())
        cos.append(F.cosine_similarity(b, a, dim=-1).mean().item())
    return {"rel_diff": rel, "cosine": cos}


def block_gradients(layer) -> Dict[str, float]:
    grads = torch.cat([p.grad.reshape(-1) for p in layer.parameters() if p.grad is not None])
    return {"grad_norm": grads.norm().item(), "median_abs_grad": grads.abs().median().item()}


def probe(model, batch: Batch) -> Dict:
    """Gradient and diversity measurements of one model on one batch (see module docstring)."""
    stacks = {side: stack_layers(getattr(model, side)) for side in STACKS}
    captured = {side: [None] * len(layers) for side, layers in stacks.items()}
    hooks = [h for side, layers in stacks.items() for h in _capture_sublayer_inputs(layers, captured[side])]
    model.zero_grad(set_to_none=True)
    try:
        logits, _ = model(batch.src_tokens, batch.src_lengths, batch.prev_output_tokens)
    finally:
        for h in hooks:
            h.remove()
    loss = F.cross_entropy(
        logits.reshape(-1, logits.size(-1)).float(), batch.target.reshape(-1), ignore_index=batch.pad
    )
    loss.backward()
    keep = {"encoder": batch.src_tokens.ne(batch.pad), "decoder": batch.prev_output_tokens.ne(batch.pad)}
    out = {"loss": loss.item()}
    with torch.no_grad():
        for side, layers in stacks.items():
            grads = [block_gradients(layer) for layer in layers]
            inputs = [x.transpose(0, 1)[keep[side]] for x in captured[side]]  # T x B x C -> tokens x C
            out[side] = {m: [g[m] for g in grads] for m in BLOCK_METRICS}
            out[side].update(adjacent_diversity(inputs))
    model.zero_grad(set_to_none=True)
    return out


# ---------------------------------------------------------------- fits of the predicted shapes

#: one-parameter shapes y = c * s(k) fitted to a profile; k is the 1-based block index
DIVERSITY_SHAPES = {
    "c/k": lambda k, n: 1.0 / k,  # Theorem 3.3 as the paper states it (Pre-LN)
    "c/sqrt(k)": lambda k, n: 1.0 / math.sqrt(k),  # LN of a sum of k independent terms
    "c": lambda k, n: 1.0,  # Theorem 3.6 (Post-LN, ResiDual): independent of k
}
#: the paper's prediction for each scheme it analyses, drawn as the reference line
PREDICTED_DIVERSITY = {"pre": "c/k", "post": "c", "residual": "c"}
PREDICTED_POST_LN_DECAY = math.sqrt(0.5)  # Theorem 3.1: (1/2)^((N-k)/2), per block


def post_ln_gradient_shape(k, n):
    return PREDICTED_POST_LN_DECAY ** (n - k)


def fit_shape(values: Sequence[float], shape) -> Dict[str, float]:
    """Least squares of log y = log c + log s(k): c and the RMS log residual (0 = exact shape)."""
    logs = [math.log(v) - math.log(shape(k, len(values))) for k, v in enumerate(values, 1)]
    return {"c": math.exp(statistics.fmean(logs)), "rms_log_residual": statistics.pstdev(logs)}


def fit_geometric_decay(values: Sequence[float]) -> Dict[str, float]:
    """Fit g_k = c * r^(N-k) (log-linear least squares); r < 1 means decay toward the bottom."""
    xs = [len(values) - k for k in range(1, len(values) + 1)]
    ys = [math.log(v) for v in values]
    slope, log_c = statistics.linear_regression(xs, ys) if len(values) > 1 else (0.0, ys[0])
    rms = math.sqrt(statistics.fmean((y - (log_c + slope * x)) ** 2 for x, y in zip(xs, ys)))
    return {"r": math.exp(slope), "c": math.exp(log_c), "rms_log_residual": rms}


def fits(profile: Dict[str, List[float]]) -> Optional[Dict]:
    """All fits of one (scheme, depth, stack) mean profile; None if a value is not positive."""
    if min(profile["rel_diff"] + profile["grad_norm"]) <= 0:
        return None
    shapes = {name: fit_shape(profile["rel_diff"], s) for name, s in DIVERSITY_SHAPES.items()}
    return {
        "rel_diff": shapes,
        "rel_diff_best_shape": min(shapes, key=lambda name: shapes[name]["rms_log_residual"]),
        "grad_norm_geometric": fit_geometric_decay(profile["grad_norm"]),
        "grad_norm_post_ln_shape": fit_shape(profile["grad_norm"], post_ln_gradient_shape),
        "grad_norm_bottom_over_top": profile["grad_norm"][0] / profile["grad_norm"][-1],
    }


# ---------------------------------------------------------------- aggregation and the command


def mean_std(rows: List[List[float]]):
    """Per column: the mean and the population standard deviation."""
    cols = list(zip(*rows))
    return [statistics.fmean(c) for c in cols], [statistics.pstdev(c) for c in cols]


def aggregate(runs: List[Dict]) -> Dict:
    """summary[scheme][depth][stack][metric] = {"mean": [...], "std": [...]} over seeds, plus fits."""
    summary: Dict = {}
    for run in runs:
        summary.setdefault(run["scheme"], {}).setdefault(str(run["layers"]), []).append(run)
    for by_depth in summary.values():
        for depth, group in by_depth.items():
            cell = {"seeds": [r["seed"] for r in group], "loss": statistics.fmean(r["loss"] for r in group)}
            for side in STACKS:
                stats = {}
                for metric in BLOCK_METRICS + PAIR_METRICS:
                    mean, std = mean_std([r[side][metric] for r in group])
                    stats[metric] = {"mean": mean, "std": std}
                if len(stats["rel_diff"]["mean"]) >= 2:
                    stats["fits"] = fits({m: stats[m]["mean"] for m in ("rel_diff", "grad_norm")})
                cell[side] = stats
            by_depth[depth] = cell
    return summary


def run_probes(task, batch, schemes, depths, seeds, dim, heads, ffn, log=print):
    runs = []
    for scheme in schemes:
        for layers in depths:
            for seed in seeds:
                model = build_at_init(task, scheme, layers, dim, heads, ffn, seed)
                runs.append(dict(scheme=scheme, layers=layers, seed=seed, **probe(model, batch)))
                grads = runs[-1]["decoder"]["grad_norm"]
                log(
                    f"{scheme:>10} N={layers:<3} seed {seed}: loss {runs[-1]['loss']:.3f}, "
                    f"decoder grad bottom/top {grads[0] / grads[-1]:.3g}"
                )
    return runs


def _display_path(path) -> str:
    """A path relative to the repository when it lies inside it (as the README shows it)."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def parse_args(argv=None):
    from fairseq_residual.schemes import SCHEMES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), help="default: every registered scheme")
    p.add_argument("--depths", type=int, nargs="+", default=[6, 12, 18, 48], help="layers per stack")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="initialisation seeds")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--checkpoint", nargs="+", help="probe these trained checkpoints instead of fresh models")
    p.add_argument("--data", help="fairseq data-bin for the batch (default: the embedded corpus, prepared in --work)")
    p.add_argument("--split", default="valid")
    p.add_argument("--sentences", type=int, default=64, help="sentence pairs in the probe batch")
    p.add_argument("--work", default=str(ROOT / "work" / "probes"))
    p.add_argument("--out", default=str(ROOT / "results" / "probes"))
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared CPU)")
    p.add_argument("--replot", action="store_true", help="only redraw the plots and README from --out/probes.json")
    return p.parse_args(argv)


def write_outputs(record: Dict, out: Path):
    """probes.json, the plots and README.md (with ``summary.md``, a person's reading, inlined)."""
    from .plotting import plot_probes
    from .report import probe_readme

    out.mkdir(parents=True, exist_ok=True)
    # every float to 5 significant digits: a smaller file
    rounded = json.loads(json.dumps(record), parse_float=lambda text: float(f"{float(text):.5g}"))
    (out / "probes.json").write_text(json.dumps(rounded) + "\n")
    plot_probes(record["summary"], record["runs"], out)
    (out / "README.md").write_text(probe_readme(record["summary"], record["runs"], record, out))


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out)
    if args.replot:
        write_outputs(json.loads((out / "probes.json").read_text()), out)
        return None
    torch.set_num_threads(args.threads)
    started = time.time()
    data = args.data
    if data is None and not args.checkpoint:
        from ..demo.prepare import prepare_demo_data

        data = prepare_demo_data(Path(args.work) / "data").databin
    if args.checkpoint:
        runs = []
        for i, path in enumerate(args.checkpoint):
            model, task = load_checkpoint(path, data)
            run = dict(scheme=model.residual_scheme, layers=len(model.encoder.layers), seed=i, checkpoint=str(path))
            runs.append({**run, **probe(model, load_batch(task, args.split, args.sentences))})
    else:
        task = translation_task(data)
        batch = load_batch(task, args.split, args.sentences)
        runs = run_probes(task, batch, args.schemes, args.depths, args.seeds, args.dim, args.heads, args.ffn)
    summary = aggregate(runs)
    record = dict(
        command=" ".join([".venv/bin/python scripts/probe.py"] + (argv if argv is not None else sys.argv[1:])),
        settings={k: v for k, v in vars(args).items() if k not in ("work", "out", "replot")},
        data=_display_path(data),
        provenance=provenance(),
        wall_seconds=round(time.time() - started, 1),
        summary=summary,
        runs=runs,
    )
    write_outputs(record, out)
    print(f"wrote {out / 'probes.json'}, README.md and plots in {out} ({record['wall_seconds']:.0f} s)")
    return summary


if __name__ == "__main__":
    from ..errors import exit_on_user_error

    sys.exit(exit_on_user_error(main))
