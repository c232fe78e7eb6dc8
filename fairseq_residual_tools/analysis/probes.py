"""Probes of the paper's claims: per-block gradient norms and the diversity of block inputs.

For every registered scheme, depth and seed (at initialisation, or for trained checkpoints), one
forward and backward pass of the token-level cross-entropy (mean over target tokens, no label
smoothing, dropout off) on a fixed batch of real sentences measures, per encoder and decoder
block k = 1..N (a fairseq layer; with ``--task language_modeling``, per block of a
``residual_transformer_lm``'s decoder, on the first lines of an ``--only-source`` data-bin):

* ``grad_norm[k]`` = ||dL/dw_k||, the L2 norm of the gradient of all parameters of layer k
  (attention, FFN and the layer's own LayerNorms). Theorem 3.1 / Eq. 4-5: Post-LN's decays toward
  the bottom roughly like (1/2)^((N-k)/2); ResiDual's is bounded below by the dual path (about log(N-k)/N).
* ``rel_diff[k]`` = mean over (non-padding) tokens of ||x^ln_{k+1} - x^ln_k|| / ||x^ln_k|| and
  ``cosine[k]`` = mean cosine similarity of x^ln_{k+1} and x^ln_k, for k = 1..N-1. Theorem 3.3:
  Pre-LN's difference shrinks like O(1/k) (representation collapse); Theorem 3.6: Post-LN's and
  ResiDual's stay roughly constant with depth.
* ``median_abs_grad[k]``: the median |g| over layer k's gradient coordinates, to compare with Adam's
  epsilon (fairseq's default 1e-8). Theorem 3.2: Adam's first step is alpha * g / (|g| + eps), about
  alpha * sign(g) whatever |g| is, and its sensitivity to g, alpha * eps / (|g| + eps)^2, peaks at
  alpha / eps as g -> 0: a block whose typical |g| approaches eps is ill-conditioned.

x^ln_k is the input of the sub-layer, x^f_k = f_k(x^ln_k): a forward pre-hook records the query each
layer passes to its ``self_attn``, whatever the scheme does around it. For Post-LN-style layers that
is the layer's input LN(x^a_{k-1}) (the embedding for k = 1; ResiDual's layers receive x^ln
and, beside it, x^d, which no sub-layer reads); for Pre-LN it is LN(x^a_k), the output of the
layer's ``self_attn_layer_norm``, not the un-normalised stream; for DLCL the mixed, normalised input;
for T-Fixup (no LayerNorm) the raw stream.
"""

import argparse
import dataclasses
import itertools
import json
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from fairseq_residual.schemes.base import stack_layers

from ..errors import ConfigError, DataError, exit_on_user_error
from ..files import write_text
from ..markdown import table
from ..provenance import ROOT, describe, provenance
from .profiles import DIVERSITY_SHAPES, STACKS, fits, stacks_of

TASKS = ("translation", "language_modeling")
LM_DICTIONARY = "dict.txt"  # what fairseq-preprocess --only-source writes, and language_modeling reads


def fairseq_task(databin, task="translation", lm_samples: Sequence[str] = ("--sample-break-mode", "eos")):
    """fairseq's task on a data-bin, configured as ``fairseq-generate DATA_BIN`` would be; a language model's
    samples are single lines (``--sample-break-mode eos``), as the translation task's are sentence pairs, unless
    ``lm_samples`` says otherwise (the LM study's blocks: ``commands.LM_BLOCKS``)."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    argv = [str(databin)]
    if task == "language_modeling":
        if not (Path(databin) / LM_DICTIONARY).is_file():
            raise ConfigError(
                f"--data {databin} is not a language-modeling data-bin (no {LM_DICTIONARY}): binarise text with "
                "data-prep/prepare-monolingual.sh (fairseq-preprocess --only-source), or drop --task language_modeling"
            )
        argv += list(lm_samples)
    parser = options.get_generation_parser(default_task=task)
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, argv))
    return tasks.setup_task(cfg.task)


def load_batch(task, split="valid", sentences=64, start=0) -> Dict:
    """``sentences`` pairs of ``split`` from its ``start``-th (the first by default), collated as fairseq-train would
    (a fairseq sample)."""
    dataset = split_dataset(task, split)
    return dataset.collater([dataset[i] for i in range(start, min(start + sentences, len(dataset)))])


def real_tokens(net: Dict, pad: int) -> Dict[str, torch.Tensor]:
    """Per stack, the real (non-padding) tokens it reads in a sample's ``net_input`` (B x T): the encoder its
    src_tokens, the decoder its prev_output_tokens (a language model's decoder reads src_tokens)."""
    return {"encoder": net["src_tokens"].ne(pad), "decoder": net.get("prev_output_tokens", net["src_tokens"]).ne(pad)}


def split_dataset(task, split: str):
    """The task's dataset of ``split``, loaded once (fairseq keeps it in ``task.datasets``); a split the data-bin
    lacks is a one-line error."""
    if split not in task.datasets:
        try:
            task.load_dataset(split)
        except FileNotFoundError as e:
            raise DataError(f"--split {split}: {e}") from None
    return task.dataset(split)


def split_size(task, split: str) -> int:
    """How many sentence pairs (LM: samples) ``split`` of the task's data holds."""
    return len(split_dataset(task, split))


def build_at_init(task, scheme: str, layers: int, dim: int, heads: int, ffn: int, seed: int, **options):
    """A freshly initialised residual_transformer, or residual_transformer_lm for a language_modeling task
    (dropout off, shared embeddings if possible: the LM's input and output embeddings are always shared);
    ``options``: further model options (``residual_output_scale=0.5``)."""
    from fairseq.tasks.language_modeling import LanguageModelingTask

    from fairseq_residual.config import ResidualTransformerConfig
    from fairseq_residual.language_model import ResidualTransformerLanguageModel, ResidualTransformerLanguageModelConfig
    from fairseq_residual.model import ResidualTransformerModel

    overrides = dict(residual_scheme=scheme, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    sizes = {"layers": layers, "embed_dim": dim, "ffn_embed_dim": ffn, "attention_heads": heads}
    model: Any = ResidualTransformerModel
    config: Any = ResidualTransformerConfig()
    sides = list(STACKS)
    if isinstance(task, LanguageModelingTask):
        model, config, sides = ResidualTransformerLanguageModel, ResidualTransformerLanguageModelConfig(), ["decoder"]
        sizes.update(input_dim=dim, output_dim=dim)
        overrides.update(share_decoder_input_output_embed=True, tpu=False)
        read_from_task = ("add_bos_token", "tokens_per_sample", "max_target_positions")  # transformer_lm's II(...)
        overrides.update({key: getattr(task.args, key) for key in read_from_task})
    else:
        overrides["share_all_embeddings"] = task.source_dictionary == task.target_dictionary
    overrides.update({f"{side}_{key}": value for side in sides for key, value in sizes.items()}, **options)
    torch.manual_seed(seed)
    return model.build_model(dataclasses.replace(config, **overrides), task).eval()


def _capture_sublayer_inputs(layers, store: List):
    """Forward pre-hooks recording the query each layer gives its self-attention (T x B x C; fairseq's
    layers pass it by keyword)."""

    def record(index, module, args, kwargs):
        store[index] = kwargs["query"].detach()

    return [
        layer.self_attn.register_forward_pre_hook(partial(record, i), with_kwargs=True)
        for i, layer in enumerate(layers)
    ]


def block_gradients(layers) -> Dict[str, List[float]]:
    grads = [torch.cat([p.grad.flatten() for p in layer.parameters() if p.grad is not None]) for layer in layers]
    return {"grad_norm": [g.norm().item() for g in grads], "median_abs_grad": [g.abs().median().item() for g in grads]}


def adjacent_diversity(inputs: List[torch.Tensor]) -> Dict[str, List[float]]:
    """rel_diff and cosine of each adjacent pair (k, k+1) of per-token block inputs."""
    pairs = list(zip(inputs[:-1], inputs[1:]))
    return {
        "rel_diff": [((b - a).norm(dim=-1) / a.norm(dim=-1)).mean().item() for a, b in pairs],
        "cosine": [F.cosine_similarity(b, a, dim=-1).mean().item() for a, b in pairs],
    }


def probe(model, sample: Dict) -> Dict:
    """Gradient and diversity measurements of one model on one fairseq sample (see module docstring)."""
    net, pad = sample["net_input"], model.decoder.padding_idx
    stacks = {side: stack_layers(getattr(model, side)) for side in STACKS if hasattr(model, side)}
    captured: Dict[str, List[Any]] = {side: [None] * len(layers) for side, layers in stacks.items()}
    hooks = [h for side, layers in stacks.items() for h in _capture_sublayer_inputs(layers, captured[side])]
    model.zero_grad(set_to_none=True)
    logits, _ = model(**net)
    for h in hooks:
        h.remove()
    loss = F.cross_entropy(logits.flatten(0, 1).float(), sample["target"].flatten(), ignore_index=pad)
    loss.backward()
    keep = real_tokens(net, pad)
    out: Dict[str, Any] = {"loss": loss.item()}
    for side, layers in stacks.items():
        inputs = [x.transpose(0, 1)[keep[side]] for x in captured[side]]  # T x B x C -> tokens x C
        out[side] = {**block_gradients(layers), **adjacent_diversity(inputs)}
    return out


def aggregate(runs: List[Dict]) -> Dict:
    """summary[scheme][depth][stack][metric] = {"mean": [...], "std": [...]} over seeds, plus fits."""
    summary: Dict = {}
    for run in runs:
        summary.setdefault(run["scheme"], {}).setdefault(str(run["layers"]), []).append(run)
    for by_depth in summary.values():
        for depth, group in by_depth.items():
            cell: Dict[str, Any] = {
                "seeds": [r["seed"] for r in group],
                "loss": statistics.fmean(r["loss"] for r in group),
            }
            for side in stacks_of(group[0]):
                per_seed = {metric: np.array([r[side][metric] for r in group]) for metric in group[0][side]}
                stats: Dict[str, Any] = {
                    m: {"mean": v.mean(0).tolist(), "std": v.std(0).tolist()} for m, v in per_seed.items()
                }
                if len(stats["rel_diff"]["mean"]) >= 2:
                    stats["fits"] = fits({m: stats[m]["mean"] for m in ("rel_diff", "grad_norm")})
                cell[side] = stats
            by_depth[depth] = cell
    return summary


# ---------------------------------------------------------------- the README


def _depth_table(runs: List[Dict], value: Callable[[Dict], float], fmt: str) -> str:
    """Rows scheme, columns 'stack N' with mean ± std over seeds of value(run[stack])."""
    columns = [(side, d) for side in stacks_of(runs[0]) for d in sorted({r["layers"] for r in runs})]

    def cell(scheme: str, side: str, depth: int) -> str:
        values = [value(r[side]) for r in runs if (r["scheme"], r["layers"]) == (scheme, depth)]
        return f"{statistics.fmean(values):{fmt}} ± {statistics.pstdev(values):{fmt}}" if values else ""

    schemes = dict.fromkeys(r["scheme"] for r in runs)
    rows = [[scheme, *(cell(scheme, side, depth) for side, depth in columns)] for scheme in schemes]
    return table(["scheme", *(f"{side[:3]} N={d}" for side, d in columns)], rows)


def _fit_table(summary: Dict) -> str:
    """At each scheme's largest depth: RMS log residual of each diversity shape, the best one,
    and the fitted per-block gradient ratio r of g_k = c r^(N-k)."""
    headers = ["scheme", "N", "stack", *(f"rms log resid. {s}" for s in DIVERSITY_SHAPES)]
    headers += ["best shape", "gradient r per block", "rms log resid. (1/2)^((N-k)/2)"]
    rows = []
    for scheme, by_depth in summary.items():
        depth = max(by_depth, key=int)
        for side in stacks_of(by_depth[depth]):
            fit = by_depth[depth][side].get("fits")
            if not fit:
                continue
            residuals = [f"{fit['rel_diff'][s]['rms_log_residual']:.3f}" for s in DIVERSITY_SHAPES]
            r, post_ln = fit["grad_norm_geometric"]["r"], fit["grad_norm_post_ln_shape"]["rms_log_residual"]
            rows.append([scheme, depth, side, *residuals, fit["rel_diff_best_shape"], f"{r:.3f}", f"{post_ln:.2f}"])
    return table(headers, rows)


def probe_readme(record: Dict, out: Path) -> str:
    s, runs = record["settings"], record["runs"]
    summary_file = out / "summary.md"
    reading = summary_file.read_text().strip() if summary_file.exists() else ""
    fresh = f"fresh models (width {s['dim']}, FFN {s['ffn']}, {s['heads']} heads, dropout off, shared embeddings)"
    fresh += f", initialisation seeds {', '.join(map(str, s['seeds']))}"
    source = "checkpoints " + ", ".join(s["checkpoint"]) if s.get("checkpoint") else fresh
    # records written before --task existed are translation ones
    language_model = s.get("task") == "language_modeling"
    title = ", language model (residual_transformer_lm)" if language_model else ""
    sentences = "lines" if language_model else "sentence pairs"
    return f"""# Probes of the paper's claims at initialisation{title}

{reading}

## What is measured

{source}; one batch: the first {s["sentences"]} {sentences} of the `{s["split"]}` split of
`{record["data"]}`; loss: token-level cross-entropy (mean over target tokens). Per {"/".join(stacks_of(runs[0]))}
block k (a fairseq layer): the L2 norm of the gradient of all its parameters, and for adjacent
blocks the relative difference ||x^ln_(k+1) - x^ln_k|| / ||x^ln_k|| and the cosine similarity
of their inputs, per token (padding excluded) and averaged. x^ln_k is what block k hands its
first sub-layer (self-attention): LN(x^a_k) for Pre-LN, the block input for Post-LN, and
ResiDual's x^ln input (definition and per-scheme notes: `fairseq_residual_tools/analysis/probes.py`).
Numbers below: mean ± std over seeds.

## Gradient norm of the bottom block relative to the top block (Theorem 3.1)

{_depth_table(runs, lambda r: r["grad_norm"][0] / r["grad_norm"][-1], ".3g")}

## Median |g| over the bottom block's gradient coordinates (Theorem 3.2)

Adam's first step is alpha g / (|g| + eps): once a block's typical |g| nears eps (fairseq's default
1e-8), its update is no longer about alpha sign(g) and its sensitivity to gradient noise, alpha eps /
(|g| + eps)^2, approaches its peak alpha / eps.

{_depth_table(runs, lambda r: r["median_abs_grad"][0], ".2g")}

## Relative difference of the top pair of block inputs, k = N-1 (Theorems 3.3 and 3.6)

{_depth_table(runs, lambda r: r["rel_diff"][-1], ".3f")}

## The same for the bottom pair, k = 1

{_depth_table(runs, lambda r: r["rel_diff"][0], ".3f")}

## Fits of the predicted shapes (mean profile, largest depth)

One-parameter fits y = c s(k) of the relative difference by least squares on log y; the RMS of the
log residuals says how well each shape fits (0.1 is about 10 % scatter). The paper predicts c/k for
Pre-LN (Theorem 3.3 as stated) and a constant for Post-LN and ResiDual (Theorem 3.6); c/sqrt(k) is
what LN of a sum of k independent unit-variance terms gives. Gradient: r of a fitted g_k = c r^(N-k)
(the paper's Post-LN rate is (1/2)^(1/2) = 0.707 per block; r > 1 means the gradient grows toward
the bottom), and the RMS log residual of the paper's Post-LN shape with only c fitted.
The dashed lines in the plots are these fits.

{_fit_table(record["summary"])}

## Files

- [grad_norm.png](grad_norm.png), [rel_diff.png](rel_diff.png), [cosine.png](cosine.png): profiles
  over block k, one panel per stack and depth, one curve per scheme (shaded: ± std over seeds).
- [versus_depth.png](versus_depth.png): bottom/top gradient ratio and top-pair difference versus N.
- [probes.json](probes.json): every number of every run, the per-block means/stds and all fits.

## Provenance

- Command: `{record["command"]}` ({record["wall_seconds"]:.0f} s wall), on a machine shared with other jobs.
- {describe(record.get("provenance", record))}
"""


# ---------------------------------------------------------------- the command


def parse_args(argv=None):
    from fairseq_residual.schemes import SCHEMES

    p = argparse.ArgumentParser(prog="fairseq-residual-probe", description=__doc__.splitlines()[0])
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), help="default: every registered scheme")
    p.add_argument("--depths", type=int, nargs="+", default=[6, 12, 18, 48], help="layers per stack")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="initialisation seeds")
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=256)
    p.add_argument("--task", choices=TASKS, default="translation", help="language_modeling: residual_transformer_lm")
    p.add_argument("--checkpoint", nargs="+", help="probe these trained checkpoints instead of fresh models")
    p.add_argument(
        "--data",
        help="fairseq data-bin for the batch (default: the embedded corpus, prepared in --work; for "
        "language_modeling its target side, binarised with --only-source)",
    )
    p.add_argument("--split", default="valid")
    p.add_argument("--sentences", type=int, default=64, help="sentence pairs (LM: lines) in the probe batch")
    p.add_argument("--work", default=str(ROOT / "work" / "probes"))
    p.add_argument("--out", help="default: results/probes, results/probes-lm for language_modeling")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared CPU)")
    p.add_argument("--replot", action="store_true", help="only redraw the plots and README from --out/probes.json")
    args = p.parse_args(argv)
    args.out = args.out or str(ROOT / "results" / ("probes-lm" if args.task == "language_modeling" else "probes"))
    return args


def probe_fresh_models(data, args) -> List[Dict]:
    task = fairseq_task(data, args.task)
    batch = load_batch(task, args.split, args.sentences)
    runs = []
    for scheme, layers, seed in itertools.product(args.schemes, args.depths, args.seeds):
        model = build_at_init(task, scheme, layers, args.dim, args.heads, args.ffn, seed)
        runs.append(dict(scheme=scheme, layers=layers, seed=seed, **probe(model, batch)))
        grads = runs[-1]["decoder"]["grad_norm"]
        print(
            f"{scheme:>10} N={layers:<3} seed {seed}: loss {runs[-1]['loss']:.3f}, "
            f"decoder grad bottom/top {grads[0] / grads[-1]:.3g}"
        )
    return runs


def load_checkpoint(path, data=None):
    """A trained residual_transformer(_lm) checkpoint as (model in eval mode, its task); ``data``, if given, replaces
    the data-bin the checkpoint recorded. A missing file or another architecture's checkpoint is a one-line error."""
    from fairseq import checkpoint_utils

    if not Path(path).is_file():
        raise DataError(f"--checkpoint {path}: no such file (fairseq-train writes checkpoint_*.pt in its --save-dir)")
    overrides = {"data": str(data)} if data else None
    (model,), _cfg, task = checkpoint_utils.load_model_ensemble_and_task([str(path)], arg_overrides=overrides)
    if not hasattr(model, "residual_scheme"):
        raise ConfigError(
            f"--checkpoint {path}: a {type(model).__name__}, not a residual_transformer(_lm) of this plugin "
            "(train with --user-dir fairseq_residual --arch residual_transformer)"
        )
    return model.eval(), task


def probe_checkpoints(data, args) -> List[Dict]:
    """Each ``--checkpoint`` on a batch of its own task; ``data``, if given, replaces the data-bin it recorded."""
    runs = []
    for i, path in enumerate(args.checkpoint):
        model, task = load_checkpoint(path, data)
        layers = len(getattr(model, "encoder", model.decoder).layers)  # a language model has no encoder
        run = dict(scheme=model.residual_scheme, layers=layers, seed=i, checkpoint=str(path))
        runs.append({**run, **probe(model, load_batch(task, args.split, args.sentences))})
    return runs


def write_outputs(record: Dict, out: Path):
    """probes.json, the plots and README.md (with ``summary.md``, a person's reading, inlined)."""
    from .plotting import plot_probes

    out.mkdir(parents=True, exist_ok=True)
    # every float to 5 significant digits: a smaller file
    rounded = json.loads(json.dumps(record), parse_float=lambda text: float(f"{float(text):.5g}"))
    write_text(out / "probes.json", json.dumps(rounded) + "\n")
    plot_probes(record["summary"], record["runs"], out)
    write_text(out / "README.md", probe_readme(record, out))


def language_model_databin(demo) -> Path:
    """The target side of a prepared demo corpus (``demo.prepare.DemoData``, its BPE'd text) as a data-bin of
    fairseq's language_modeling task (``fairseq-preprocess --only-source``: ``dict.txt``, one ``.bin``/``.idx``
    pair a split), in ``lm-data-bin``."""
    from ..dataprep import pipeline
    from ..demo.prepare import TGT

    prefixes = {split: demo.root / "bpe" / f"{split}.{TGT}" for split in demo.raw_prefixes}
    databin = demo.root / "lm-data-bin"
    binarise = partial(pipeline.fairseq_preprocess_monolingual, {s: str(p) for s, p in prefixes.items()}, databin)
    stages = pipeline.Stages(demo.root / "stages.json")
    stages.run("binarise-lm", [databin / "preprocess.done"], binarise, inputs=list(prefixes.values()))
    return databin


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

        demo = prepare_demo_data(Path(args.work) / "data")
        data = language_model_databin(demo) if args.task == "language_modeling" else demo.databin
    runs = probe_checkpoints(data, args) if args.checkpoint else probe_fresh_models(data, args)
    summary = aggregate(runs)
    record = dict(
        command=" ".join([".venv/bin/python scripts/probe.py"] + (argv if argv is not None else sys.argv[1:])),
        settings={k: v for k, v in vars(args).items() if k not in ("work", "out", "replot")},
        data=str(data).removeprefix(f"{ROOT}/"),  # as the README shows it
        provenance=provenance(),
        wall_seconds=round(time.time() - started, 1),
        summary=summary,
        runs=runs,
    )
    write_outputs(record, out)
    print(f"wrote {out / 'probes.json'}, README.md and plots in {out} ({record['wall_seconds']:.0f} s)")
    return summary


if __name__ == "__main__":
    sys.exit(exit_on_user_error(main))
