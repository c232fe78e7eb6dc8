"""Dead FFN units of trained models: per layer, the share of the FFN's hidden units that no token of a split turns on.

Every scheme's layer computes its FFN as f(h) = fc2(relu(fc1(h))) (``fairseq_residual/schemes/base.py``). Hidden
unit j of a layer is dead on a split when its pre-activation is never positive there:

    dead[k] = |{ j : max_t fc1(h_t)_j <= 0 }| / ffn_dim        t over every real (non-padding) token of the split

for layer k = 1..N of each stack, dropout off. relu gives such a unit 0 on every token, so fc2's column j adds
nothing to the layer's output and the unit's fc1 row and bias get no gradient from these tokens: capacity the model
holds but does not use.

    python -m fairseq_residual_tools.analysis.dead_units --checkpoint RUN/average5-at-N.pt [...] --out DIR

Run again with the same settings on unchanged checkpoints, data and code (``CODE``), it does nothing and says so.
With ``--add`` the table keeps the earlier counts' rows of other checkpoints, whose files may be gone (a study's
machine does not keep its checkpoints): ``dead_units.json`` holds this count at its top level and those in
``earlier``, each with its own command and provenance.
"""

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path
from typing import Dict, List, Sequence

import torch
from torch import Tensor

from fairseq_residual.schemes.base import stack_layers

from ..dataprep.pipeline import made_from
from ..errors import ConfigError, DataError, exit_on_user_error
from ..files import write_text
from ..markdown import table
from ..provenance import code_sha256, describe, provenance
from .probes import load_batch, load_checkpoint, real_tokens, split_size
from .profiles import STACKS

#: the code a count depends on: the models, how a checkpoint and a split are read, and this definition
CODE = (
    "fairseq_residual",
    "fairseq_residual_tools/analysis/dead_units.py",
    "fairseq_residual_tools/analysis/probes.py",
)


def token_maxima(pre_activation: Tensor, keep: Tensor) -> Tensor:
    """Each hidden unit's largest pre-activation over the real tokens: ``pre_activation`` is fc1's time-first
    output (T x B x F), ``keep`` the batch's real tokens (B x T)."""
    return pre_activation.transpose(0, 1)[keep].amax(dim=0)


def dead_share(maxima: Tensor) -> float:
    """The share of units whose largest pre-activation is not positive."""
    return maxima.le(0).float().mean().item()


def check_relu(model) -> None:
    """Dead units are relu's: a unit of another activation (gelu, tanh) is not silenced by a negative input."""
    for side in (side for side in STACKS if hasattr(model, side)):
        for layer in stack_layers(getattr(model, side)):
            name = getattr(layer.activation_fn, "__name__", type(layer.activation_fn).__name__)
            if name != "relu":
                raise ConfigError(
                    f"the model's FFN activation is {name}: dead units are counted for relu only "
                    "(fairseq's default --activation-fn relu)"
                )


def _record(maxima: List, keep: Tensor, k: int, _module, _args, output: Tensor):
    """Forward hook of layer k's fc1: each unit's running largest pre-activation over real tokens."""
    top = token_maxima(output.detach(), keep)
    maxima[k] = top if maxima[k] is None else torch.maximum(maxima[k], top)


def unit_maxima(model, samples) -> Dict[str, List[Tensor]]:
    """Per stack, per layer, every hidden unit's largest pre-activation over all real tokens of ``samples``."""
    sides = [side for side in STACKS if hasattr(model, side)]
    layers = {side: stack_layers(getattr(model, side)) for side in sides}
    maxima: Dict[str, List] = {side: [None] * len(layers[side]) for side in sides}
    pad = model.decoder.padding_idx
    for sample in samples:
        net = sample["net_input"]
        keep = real_tokens(net, pad)
        hooks = [
            layer.fc1.register_forward_hook(partial(_record, maxima[side], keep[side], k))
            for side in sides
            for k, layer in enumerate(layers[side])
        ]
        try:
            with torch.no_grad():
                model(**net)
        finally:
            for hook in hooks:
                hook.remove()
    return maxima


def dead_units(model, samples) -> Dict[str, List[float]]:
    """Per stack, the dead share of each layer's FFN units (the module's definition) over ``samples``."""
    check_relu(model)
    return {side: [dead_share(m) for m in per_layer] for side, per_layer in unit_maxima(model, samples).items()}


def split_samples(task, split: str, chunk: int):
    """Every sentence pair of ``split``, ``chunk`` at a time, as fairseq samples."""
    total = split_size(task, split)
    return (load_batch(task, split, chunk, start) for start in range(0, total, chunk))


def split_files(task, split: str) -> List[Path]:
    """The data-bin files a count of ``split`` reads: its dictionaries and the split's binaries (a translation's
    ``valid.es-en.es.bin``, a language model's ``valid.bin``), in each of the task's data folders."""
    from fairseq.utils import split_paths

    folders = [Path(d) for d in split_paths(task.cfg.data)]
    binaries = [f for d in folders for f in d.glob(f"{split}.*") if f.suffix in (".bin", ".idx")]
    return sorted([*binaries, *(f for d in folders for f in d.glob("dict*.txt"))])


def made_of(settings: Dict, code: str, files: Sequence[Path]) -> Dict:
    """What a count was made from: its settings, the sha256 of its code (``CODE``), each file's path, size and time."""
    return dict(settings=settings, code_sha256=code, **made_from({}, files))


def done_before(out: Path, settings: Dict, add: bool) -> bool:
    """``out`` holds a count made from ``settings`` with today's code, checkpoints and data files; without ``add``,
    and no earlier count beside it."""
    record_file = out / "dead_units.json"
    if not (record_file.is_file() and (out / "README.md").is_file()):
        return False
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        made = record["made_from"]
        if made["settings"] != settings or not all(Path(f).is_file() for f in made["inputs"]):
            return False
    except (ValueError, KeyError, TypeError):  # not JSON, or a record from before made_from: count again
        return False
    return (add or not record.get("earlier")) and made_of(settings, code_sha256(CODE), list(made["inputs"])) == made


def same_table(settings: Dict) -> Dict:
    """What rows of one table share: every setting but the checkpoints."""
    return {k: v for k, v in settings.items() if k != "checkpoint"}


def earlier_counts(out: Path, settings: Dict) -> List[Dict]:
    """``--add``: the counts in ``out``'s record, each without its rows of ``settings``' checkpoints (counted now)
    and without the counts left with none; an error if they counted with other settings."""
    record_file = out / "dead_units.json"
    if not record_file.is_file():
        return []
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        counts = [{k: v for k, v in record.items() if k != "earlier"}, *record.get("earlier", [])]
        before = {json.dumps(same_table(c["settings"]), sort_keys=True) for c in counts}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise DataError(
            f"{record_file} is not a count dead_units wrote: move it away, or count into another --out"
        ) from None
    if before != {json.dumps(same_table(settings), sort_keys=True)}:
        raise ConfigError(
            f"--add: {record_file} counted with other settings ({', '.join(sorted(before))}): add with the same "
            "--data, --split and --chunk, or count into another --out"
        )
    now = {str(Path(c).resolve()) for c in settings["checkpoint"]}
    kept = [dict(c, runs=[r for r in c["runs"] if str(Path(r["checkpoint"]).resolve()) not in now]) for c in counts]
    return [c for c in kept if c["runs"]]


def run_name(checkpoint: Path) -> str:
    """A study's run folder names the run; a bare checkpoint is its own name."""
    return checkpoint.parent.name or checkpoint.name


def report(record: Dict) -> str:
    counts = [*record.get("earlier", []), record]
    runs, s = [r for c in counts for r in c["runs"]], record["settings"]
    width = max(len(r[side]) for r in runs for side in STACKS if side in r)
    sides = [side for side in STACKS if side in runs[0]]
    headers = ["run", "sentences", *(f"{side[:3]} {k}" for side in sides for k in range(1, width + 1))]
    rows = [
        [r["name"], r["sentences"], *(percent(v) for side in sides for v in pad(r.get(side, []), width))] for r in runs
    ]
    return f"""# Dead FFN units

Per layer k of each stack (enc/dec k, k = 1 at the bottom), the percentage of its FFN's hidden units whose
pre-activation fc1(h)_j is not positive on any real token of the `{s["split"]}` split (every sentence of it, the
count in the table): units that relu silences on every token and that get no gradient from them. Definition:
`fairseq_residual_tools/analysis/dead_units.py`.

{table(headers, rows)}

Checkpoints: {", ".join(f"`{r['checkpoint']}`" for r in runs)}.

{"".join(count_text(c, len(counts) > 1) for c in counts)}"""


def count_text(count: Dict, several: bool) -> str:
    """A count's command and provenance, naming its rows when the table holds several counts."""
    rows = f" (rows: {', '.join(r['name'] for r in count['runs'])})" if several else ""
    return (
        f"- Command{rows}: `{count['command']}` ({count['wall_seconds']:.0f} s wall), on a machine shared with "
        f"other jobs.\n- {describe(count['provenance'])}\n"
    )


def pad(values: Sequence[float], width: int) -> List:
    """A shallower run's row, blank where a deeper run has layers."""
    return list(values) + [None] * (width - len(values))


def percent(share) -> str:
    return "" if share is None else f"{100 * share:.1f}"


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="dead_units", description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", nargs="+", required=True, help="trained checkpoints (a run folder names each)")
    p.add_argument("--data", help="data-bin to read (default: the one each checkpoint recorded)")
    p.add_argument("--split", default="valid")
    p.add_argument("--chunk", type=int, default=128, help="sentence pairs per forward pass (memory, not results)")
    p.add_argument("--out", required=True, help="folder for dead_units.json and README.md")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared CPU)")
    p.add_argument(
        "--add", action="store_true", help="keep OUT's rows of other checkpoints (counted before; files may be gone)"
    )
    args = p.parse_args(argv)
    if args.chunk < 1:
        raise ConfigError(f"--chunk {args.chunk}: a forward pass reads at least 1 sentence pair")
    return args


def main(argv=None):
    args = parse_args(argv)
    out, settings = Path(args.out), {k: v for k, v in vars(args).items() if k not in ("out", "threads", "add")}
    if done_before(out, settings, args.add):
        print(f"{out / 'dead_units.json'}: counted before from these checkpoints, data and code; nothing to do")
        return json.loads((out / "dead_units.json").read_text(encoding="utf-8"))["runs"]
    earlier = earlier_counts(out, settings) if args.add else []  # before the count: a wrong --add stops at once
    torch.set_num_threads(args.threads)
    started, code, runs, files = time.time(), code_sha256(CODE), [], []  # the code before the count
    for path in map(Path, args.checkpoint):
        model, task = load_checkpoint(path, args.data)
        files += [path, *split_files(task, args.split)]
        samples = split_samples(task, args.split, args.chunk)
        run = dict(name=run_name(path), checkpoint=str(path), scheme=model.residual_scheme)
        run.update(sentences=split_size(task, args.split), **dead_units(model, samples))
        runs.append(run)
        shares = "; ".join(f"{side} " + " ".join(f"{100 * v:.0f}" for v in run[side]) for side in STACKS if side in run)
        print(f"{run['name']}: dead FFN units, % per layer: {shares}", flush=True)
    record = dict(
        command=" ".join(
            [
                ".venv/bin/python -m fairseq_residual_tools.analysis.dead_units",
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
        settings=settings,
        made_from=made_of(settings, code, files),
        provenance=provenance(),
        wall_seconds=round(time.time() - started, 1),
        runs=runs,
        **({"earlier": earlier} if earlier else {}),
    )
    write_text(out / "README.md", report(record))
    write_text(out / "dead_units.json", json.dumps(record, indent=1) + "\n")  # last: what done_before reads
    print(f"wrote {out / 'dead_units.json'} and README.md")
    return runs


if __name__ == "__main__":
    sys.exit(exit_on_user_error(main))
