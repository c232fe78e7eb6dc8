"""Output-scale probe: each stack's output size, the logits' spread and the first loss, at initialisation.

Why ResiDual starts slower than Post-LN and Pre-LN in short trainings. For every scheme (and ResiDual's output
options, ``--variants residual:scale=0.5``), depth and seed, a fresh model (dropout off) at the sizes of the
project's CPU comparisons -- translation: the demo's (configs/demo.yaml: E3D3 and E12D12, width 64, FFN 256,
4 heads, shared embeddings, its corpus); language model: the LM study's (6 and 12 layers, width 64, its
pydoc text cut in 128-token blocks) -- reads one batch, the first ``--samples`` samples of ``--split``:

* ``rms``, per stack: sqrt(mean y^2) of the stack's output y (``encoder_out``; the decoder's features before the
  output projection) over real tokens and channels. A LayerNorm output with gain 1 and bias 0 has RMS 1.
* ``logit_std``: the standard deviation of the logits over the vocabulary (population), mean over target tokens.
* ``loss``: the batch's cross-entropy in nats, mean over target tokens (``ln_vocab``: what uniform predictions
  give).
* for a scheme whose output is y = alpha x^ln_{N+1} + LN(x^d_{N+1}) (``dual_output``), per stack: ``cos_paths``,
  the cosine of x^ln_{N+1} and LN(x^d_{N+1}) per token, averaged; ``cos_ln_embedding`` and
  ``cos_dual_embedding``, the cosine of each with the stack's input embedding x^ln_1; ``rms_ln`` and
  ``rms_dual``, their RMS. Two unit-RMS terms give RMS(y)^2 = alpha^2 + 1 + 2 alpha cos_paths.

    python -m fairseq_residual_tools.analysis.output_probe [--tasks translation] [--seeds 1 2 3] [--out DIR]
"""

import argparse
import json
import math
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..errors import exit_on_user_error
from ..files import write_text
from ..markdown import table
from ..provenance import ROOT, describe, provenance
from .probes import STACKS, build_at_init, fairseq_task, load_batch, real_tokens
from .variants import check_variants, parse_variant

#: the depths of the comparisons this probe explains: the demo's E3D3 / E12D12, the LM study's 6 / 12 layers
STUDY_DEPTHS = {"translation": [3, 12], "language_modeling": [6, 12]}
DUAL_METRICS = ("cos_paths", "cos_ln_embedding", "cos_dual_embedding", "rms_ln", "rms_dual")


def tokens(x: Tensor, keep: Tensor) -> Tensor:
    """The real tokens of a time-first (T x B x C) tensor, as tokens x C."""
    return x.transpose(0, 1)[keep]


def rms(x: Tensor) -> float:
    return x.float().pow(2).mean().sqrt().item()


def mean_cosine(a: Tensor, b: Tensor) -> float:
    return F.cosine_similarity(a.float(), b.float(), dim=-1).mean().item()


def _record_dual_paths(store: List, module, args, output):
    """Forward hook of a ResiDual stack top (``DualStreamOutput``): its inputs as (x^ln_{N+1}, LN(x^d_{N+1}))."""
    x_ln, x_dual = args
    store.append((x_ln.detach(), nn.LayerNorm.forward(module, x_dual).detach()))


def output_probe(model, sample: Dict) -> Dict[str, Any]:
    """The module docstring's figures for one model (in eval mode) on one fairseq sample."""
    from fairseq_residual.schemes import get_scheme

    net, pad = sample["net_input"], model.decoder.padding_idx
    sides = [side for side in STACKS if hasattr(model, side)]
    dual = get_scheme(model.residual_scheme).dual_output
    paths: Dict[str, List] = {side: [] for side in sides}
    hooks = [
        getattr(model, side).layer_norm.register_forward_hook(partial(_record_dual_paths, paths[side]))
        for side in (sides if dual else [])
    ]
    outputs, embeddings = {}, {}
    with torch.no_grad():
        if "encoder" in sides:
            enc = model.encoder(net["src_tokens"], src_lengths=net["src_lengths"], return_all_hiddens=True)
            outputs["encoder"], embeddings["encoder"] = enc["encoder_out"][0], enc["encoder_states"][0]
            features, extra = model.decoder(net["prev_output_tokens"], encoder_out=enc, features_only=True)
        else:  # a language model: its decoder reads src_tokens
            features, extra = model.decoder(net["src_tokens"], features_only=True)
        outputs["decoder"], embeddings["decoder"] = features.transpose(0, 1), extra["inner_states"][0]
        logits = model.decoder.output_layer(features).float()
    for hook in hooks:
        hook.remove()
    target = sample["target"]
    loss = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=pad)
    result: Dict[str, Any] = {
        "loss": loss.item(),
        "ln_vocab": math.log(logits.size(-1)),
        "logit_std": logits[target.ne(pad)].std(dim=-1, correction=0).mean().item(),
    }
    keep = real_tokens(net, pad)
    for side in sides:
        stats = {"rms": rms(tokens(outputs[side], keep[side]))}
        if dual:
            (x_ln, ln_dual), embedding = (
                [tokens(x, keep[side]) for x in paths[side][0]],
                tokens(embeddings[side], keep[side]),
            )
            stats.update(
                cos_paths=mean_cosine(x_ln, ln_dual),
                cos_ln_embedding=mean_cosine(x_ln, embedding),
                cos_dual_embedding=mean_cosine(ln_dual, embedding),
                rms_ln=rms(x_ln),
                rms_dual=rms(ln_dual),
            )
        result[side] = stats
    return result


# ---------------------------------------------------------------- data and models of the studies


def translation_data(work: Path) -> Path:
    """The demo's corpus (configs/demo.yaml's settings), prepared in ``work`` as ``make demo`` prepares it."""
    from ..demo.prepare import prepare_demo_data
    from ..demo.run import digest, load_settings

    settings = load_settings()
    folder = work / f"data-{digest(settings['seed'], settings['corpus'])}"
    return prepare_demo_data(folder, seed=settings["seed"], **settings["corpus"]).databin


def language_model_data(work: Path) -> Path:
    """The LM study's text (its default BPE merges), prepared in ``work``."""
    from ..dataprep import pydoc_text
    from .lm_study import parse_args as lm_study_defaults

    return Path(pydoc_text.prepare(work / "lm-data", lm_study_defaults([]).bpe_merges)["databin"])


def probe_task(task_name: str, args) -> List[Dict]:
    from ..commands import LM_BLOCKS

    work = Path(args.work)
    if task_name == "translation":
        task = fairseq_task(translation_data(work))
    else:
        task = fairseq_task(language_model_data(work), task_name, lm_samples=LM_BLOCKS)
    batch = load_batch(task, args.split, args.samples)
    runs = []
    for variant in args.variants:
        scheme, options = parse_variant(variant, "--variants")
        for layers in args.depths or STUDY_DEPTHS[task_name]:
            for seed in args.seeds:
                model = build_at_init(task, scheme, layers, args.dim, 4, 4 * args.dim, seed, **options)
                run = dict(task=task_name, variant=variant, layers=layers, seed=seed, **output_probe(model, batch))
                runs.append(run)
                sizes = ", ".join(f"{side} RMS {run[side]['rms']:.3f}" for side in STACKS if side in run)
                print(f"{task_name} {variant:>24} N={layers:<3} seed {seed}: {sizes}, loss {run['loss']:.3f}")
    return runs


# ---------------------------------------------------------------- the report


def mean_std(values: Sequence[float]) -> str:
    return f"{statistics.fmean(values):.3f} ± {statistics.pstdev(values):.3f}"


def groups(runs: List[Dict]) -> Dict[Tuple[str, int], List[Dict]]:
    """Runs by (variant, depth), in the order they ran."""
    out: Dict[Tuple[str, int], List[Dict]] = {}
    for run in runs:
        out.setdefault((run["variant"], run["layers"]), []).append(run)
    return out


def scale_table(runs: List[Dict]) -> str:
    sides = [side for side in STACKS if side in runs[0]]
    headers = ["scheme", "N", *(f"RMS of the {side}'s output" for side in sides), "logit std", "loss (nats)"]
    rows = [
        [variant, layers, *(mean_std([r[side]["rms"] for r in group]) for side in sides)]
        + [mean_std([r["logit_std"] for r in group]), mean_std([r["loss"] for r in group])]
        for (variant, layers), group in groups(runs).items()
    ]
    return table(headers, rows)


def dual_table(runs: List[Dict]) -> str:
    sides = [side for side in STACKS if side in runs[0]]
    headers = ["scheme", "N", "stack", "cos(x^ln, LN(x^d))", "cos(x^ln, e)", "cos(LN(x^d), e)"]
    headers += ["RMS x^ln", "RMS LN(x^d)"]
    rows = [
        [variant, layers, side, *(mean_std([r[side][m] for r in group]) for m in DUAL_METRICS)]
        for (variant, layers), group in groups(runs).items()
        for side in sides
        if "cos_paths" in group[0][side]
    ]
    return table(headers, rows)


def report(record: Dict) -> str:
    s = record["settings"]
    sections = []
    for task_name in s["tasks"]:
        runs = [r for r in record["runs"] if r["task"] == task_name]
        title = "Translation (the demo's corpus and sizes)" if task_name == "translation" else "Language model"
        title += "" if task_name == "translation" else " (the LM study's text and sizes, 128-token blocks)"
        sections.append(
            f"## {title}\n\nln V = {runs[0]['ln_vocab']:.3f} (uniform predictions).\n\n{scale_table(runs)}\n\n"
            f"ResiDual's two output terms, y = alpha x^ln + LN(x^d) (e: the stack's input embedding):\n\n"
            f"{dual_table(runs)}"
        )
    summary = Path(record["out"]) / "summary.md"
    reading = summary.read_text().strip() + "\n\n" if summary.exists() else ""
    body, seeds = "\n\n".join(sections), ", ".join(map(str, s["seeds"]))
    return f"""# Output scale at initialisation

{reading}Fresh models (dropout off), width {s["dim"]}, FFN {4 * s["dim"]}, 4 heads, seeds {seeds}
(mean ± std over seeds); one batch: the first {s["samples"]} samples of the `{s["split"]}` split. What each
figure is: `fairseq_residual_tools/analysis/output_probe.py`. `residual:scale=C` is ResiDual with
`--residual-output-scale C`.

{body}

## Provenance

- Command: `{record["command"]}` ({record["wall_seconds"]:.0f} s wall, on a machine shared with other jobs).
- {describe(record["provenance"])}
"""


def parse_args(argv=None):
    from fairseq_residual.schemes import SCHEMES

    dual = [name for name, scheme in SCHEMES.items() if scheme.dual_output]
    p = argparse.ArgumentParser(
        prog="python -m fairseq_residual_tools.analysis.output_probe", description=__doc__.splitlines()[0]
    )
    p.add_argument("--tasks", nargs="+", choices=list(STUDY_DEPTHS), default=list(STUDY_DEPTHS))
    p.add_argument(
        "--variants",
        nargs="+",
        default=list(SCHEMES) + [f"{name}:scale=0.5" for name in dual],
        help="SCHEME or SCHEME:scale=C,alpha=A (ResiDual's output options); default: every scheme, and ResiDual's "
        "with scale 0.5",
    )
    p.add_argument("--depths", type=int, nargs="+", help="layers per stack (default: the studies' depths per task)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--dim", type=int, default=64, help="width (FFN 4x, 4 heads): the demo's and the LM study's")
    p.add_argument("--split", default="valid")
    p.add_argument("--samples", type=int, default=64, help="sentence pairs (LM: 128-token blocks) in the batch")
    p.add_argument("--work", default=str(ROOT / "work" / "output-probe"), help="prepared data")
    p.add_argument("--out", default=str(ROOT / "results" / "output-scale"))
    return p.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    check_variants(args.variants, "--variants")  # before any data is prepared
    torch.set_num_threads(1)
    started = time.time()
    runs = [run for task_name in args.tasks for run in probe_task(task_name, args)]
    out = Path(args.out)
    record = dict(
        command=" ".join(["python -m fairseq_residual_tools.analysis.output_probe", *argv]),
        settings={k: v for k, v in vars(args).items() if k not in ("work", "out")},
        out=str(out),
        provenance=provenance(),
        wall_seconds=round(time.time() - started, 1),
        runs=runs,
    )
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "output_probe.json", json.dumps(record, indent=1) + "\n")
    write_text(out / "README.md", report(record))
    print(f"wrote {out / 'README.md'} and output_probe.json ({record['wall_seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(exit_on_user_error(main))
