"""Evaluating one trained cell as the paper scores it, into ``results/cells/<cell>.json``: the last checkpoints
averaged, every test set decoded by ``fairseq-generate`` and scored by ``scoring`` (docs/reproduce.md).
"""

import functools
import re
import shlex
import time
from dataclasses import asdict
from pathlib import Path
from typing import List, Mapping, Optional

import torch

from fairseq_residual.checkpoint_reading import read_checkpoint, recorded_updates

from ..average_checkpoints import numbered_checkpoints, write_average
from ..errors import DataError, UserError
from ..files import write_json
from ..provenance import provenance
from ..runner import PLUGIN_DIR, fairseq_command, run_logged
from . import scoring
from .cells import DATASETS, DECODING, ROOT, Dataset, parse_cell
from .data_record import data_record, untouched_test_sets
from .status import FAILS, NOT_RUN, TRAINED, launch_records, training_state
from .tables import result_path


def last_checkpoints(folder, n: int, kind: str) -> List[Path]:
    """The newest ``n`` checkpoints of one kind (``average_checkpoints.PATTERNS``), oldest first, the newest being
    ``checkpoint_last.pt`` when it holds more updates than every numbered one (training stopped at max_update between
    two numbered saves, which only checkpoint_last.pt then holds); without any numbered one, ``checkpoint_last.pt``."""
    folder = Path(folder)
    paths = [path for path, _ in reversed(numbered_checkpoints(folder, kind))]
    last = folder / "checkpoint_last.pt"
    if not paths or (last.is_file() and _updates(last) > _updates(paths[-1])):
        paths.append(last)
    if not paths[-1].is_file():
        raise DataError(f"no checkpoint in {folder}: train the cell first (scripts/train.sh)")
    return paths[-n:]


def _updates(path: Path) -> int:
    """The update count recorded in a checkpoint (its tensors memory-mapped, not read)."""
    return recorded_updates(read_checkpoint(str(path)))


def averaging_deviation(paths: List[Path], asked: int) -> Optional[str]:
    """The note for the tables when fewer checkpoints than asked were averaged, else None."""
    if len(paths) >= asked:
        return None
    names = ", ".join(p.name for p in paths)
    return f"averaged {len(paths)} of the {asked} checkpoints asked: only these were saved ({names})"


def averaging_gap(paths: List[Path]) -> Optional[str]:
    """The note for the tables when the update checkpoints averaged skip one of their interval (fairseq-train saves
    none at an interval that ends an epoch), else None."""
    updates = sorted(int(m[1]) for p in paths if (m := re.fullmatch(r"checkpoint_\d+_(\d+)\.pt", p.name)))
    if len(updates) < 3:
        return None
    step = min(b - a for a, b in zip(updates, updates[1:]))
    missing = [u for u in range(updates[0], updates[-1], step) if u not in updates]
    if not missing:
        return None
    skipped = ", ".join(map(str, missing))
    return (
        f"the {len(updates)} update checkpoints averaged span {len(updates) + len(missing) - 1} intervals of {step} "
        f"updates: none was saved at update {skipped} (fairseq-train saves none at an interval that ends an epoch)"
    )


#: the trained model's options recorded with its scores
MODEL_FIELDS = [
    "arch",
    "residual_scheme",
    *(f"{side}_{option}" for side in ("encoder", "decoder") for option in ("layers", "embed_dim", "ffn_embed_dim")),
    "encoder_attention_heads",
    "decoder_attention_heads",
]

#: the text's case as the scoring description words it, by data prep's ``lowercase`` option
_CASE = {
    True: "lowercased text (data prep's summary.json: lowercase true)",
    False: "text in its original case (data prep's summary.json: lowercase false)",
    None: "text (case unknown: no data prep summary.json beside the data-bin)",
}


def what_ran(cfg, data: Path, dataset: str) -> dict:
    """The record's model and data fields: the trained model's options from its checkpoint's config (a cell trained
    with overrides is not what its name says), and the data named and judged (``data_record``)."""
    model = {key: cfg["model"].get(key) for key in MODEL_FIELDS if cfg["model"].get(key) is not None}
    top = {"scheme": model.get("residual_scheme"), **{k: model.get(k) for k in ("encoder_layers", "decoder_layers")}}
    return {**{k: v for k, v in top.items() if v is not None}, "model": model, "data": data_record(data, dataset)}


def scoring_description(dataset: Dataset, data: dict) -> str:
    return dataset.scoring.format(case=_CASE[data.get("lowercase")])


def training_record(cell_dir: Path) -> dict:
    """What the launches recorded (launch.json): commands, GPUs, batch, deviations, wall time."""
    launches = launch_records(cell_dir)
    if not launches:
        return {"launches": 0}
    last = launches[-1]
    return {
        "launches": len(launches),
        "command": last["shell"],
        **{key: last[key] for key in ("launcher", "nodes", "cpu", "deviations")},
        "gpus": last["gpus_per_node"] * last["nodes"],
        "effective_batch": last["batch"]["text"],
        "wall_seconds": round(sum(r.get("wall_seconds", 0) for r in launches), 1),
    }


def generate(
    data, checkpoint, cpu: bool, subset, task_args, remove_bpe, out_file, decoding: Mapping[str, object] = DECODING
) -> scoring.Generation:
    """fairseq-generate of ``subset`` with the options ``decoding`` (beam, length penalty ...), read."""
    command = fairseq_command(
        "generate",
        data,
        *("--user-dir", PLUGIN_DIR, "--path", checkpoint, "--gen-subset", subset),
        *(arg for key, value in decoding.items() for arg in (f"--{key.replace('_', '-')}", value)),
        *("--max-tokens", "4000" if cpu else "12000", "--remove-bpe", remove_bpe),
        *task_args,
        *(["--cpu"] if cpu else []),
    )
    out_file.unlink(missing_ok=True)  # the file holds this decoding only
    run_logged(command, out_file, label=f"fairseq-generate on {subset}")
    gen = scoring.parse_generate(out_file.read_text(encoding="utf-8"))
    gen.command = shlex.join(command)
    return gen


def evaluate(args) -> dict:
    cell = parse_cell(args.cell)
    dataset = DATASETS[cell.dataset]
    cell_dir = Path(args.work).resolve() / cell.name
    out_path = result_path(args.results, cell)
    started = time.time()
    # the cell's fields, what its launches recorded, and the date, versions, git state and machine
    record = {"cell": cell.name, **asdict(cell), "training": training_record(cell_dir), **provenance()}
    state = training_state(cell_dir)
    record["training"].update(state=state.name, state_detail=state.detail)
    if state.name == NOT_RUN:
        raise DataError(
            f"{cell_dir / 'train.log'} not found: train the cell first (scripts/train.sh --cell {cell.name})"
        )
    if state.name == FAILS:
        if args.dry_run:
            print(f"{cell.name}: training diverged ({state.detail}): would record it as fails in {out_path}")
            return record
        launches = launch_records(cell_dir)
        data = Path(args.data or launches[-1].get("data") or ROOT / dataset.data)  # what the last launch trained on
        record.update(status="fails", divergence=state.detail, scores={}, data=data_record(data, cell.dataset))
        return _write(out_path, record)
    if state.name != TRAINED:
        if not args.allow_unfinished:
            raise UserError(
                f"{cell.name} is not trained: {state.describe()} ({state.detail}); "
                f"finish it with scripts/train.sh --cell {cell.name} (the same command resumes it), "
                "or pass --allow-unfinished to score its checkpoints as they are (recorded, and marked in the tables)"
            )
        deviation = f"evaluated unfinished training: {state.describe()} ({state.detail})"
        record["training"]["deviations"] = [*record["training"].get("deviations", []), deviation]
        record["unfinished"] = deviation

    asked = args.average or dataset.average
    checkpoints = last_checkpoints(cell_dir, asked, dataset.checkpoints)
    for note in (averaging_deviation(checkpoints, asked), averaging_gap(checkpoints)):
        if note:
            record["training"]["deviations"] = [*record["training"].get("deviations", []), note]
    if args.dry_run:
        print(f"{cell.name}: {state.name} ({state.detail}); would average {', '.join(p.name for p in checkpoints)}")
        named = what_ran({"model": {}}, Path(args.data or ROOT / dataset.data), cell.dataset)["data"]
        scoring_text = scoring_description(dataset, named)
        exceptions = [f"{name}: {_options(o)}" for name, o in dataset.decoding_by_test_set.items()]
        options = "; ".join([_options(dataset.decoding), *exceptions])
        print(f"then decode the test sets (fairseq-generate: {options}) and score them as: {scoring_text}")
        print(f"and write {out_path}")
        return record
    averaged = write_average(checkpoints, cell_dir / f"checkpoint.average{len(checkpoints)}.pt")
    cfg = torch.load(averaged, map_location="cpu", weights_only=True)["cfg"]
    task = cfg["task"]
    data = Path(args.data or task["data"])
    record.update(what_ran(cfg, data, cell.dataset))
    eval_dir = cell_dir / "evaluation"  # made by run_logged
    # decode(subset, task arguments, the --remove-bpe value, output file, decoding options)
    decode = functools.partial(generate, data, averaged, args.cpu or not torch.cuda.is_available())
    src, tgt = str(task.get("source_lang")), str(task.get("target_lang"))
    langs = ["--source-lang", src, "--target-lang", tgt]

    decoding: dict = {}  # test set -> fairseq-generate's options
    if cell.dataset == "iwslt14":
        untouched = untouched_test_sets(data, src, tgt)["test"]  # before decoding: a data-bin without it stops here
        decoding["test"] = dataset.decoding_for("test")
        generations = {"test": decode("test", langs, "@@ ", eval_dir / "generate-test.txt", decoding["test"])}
        scores = scoring.score_iwslt(generations["test"], untouched, tgt)
    elif cell.dataset == "wmt14":
        test_sets = {u.name: u for u in untouched_test_sets(data, src, tgt).values()}  # newstest2010-2016
        generations = {}
        for name, test in sorted(test_sets.items()):
            decoding[name] = dataset.decoding_for(name)
            generations[name] = decode(test.split, langs, "@@ ", eval_dir / f"generate-{name}.txt", decoding[name])
        scores = scoring.score_wmt(generations, test_sets, tgt)
    else:
        pairs = [p for p in str(task["lang_pairs"]).split(",") if p]
        base = ["--task", "translation_multi_simple_epoch", "--lang-pairs", ",".join(pairs)]
        base += ["--langs", str(task["langs"]), "--encoder-langtok", str(task.get("encoder_langtok") or "tgt")]
        base += ["--decoder-langtok"] if task.get("decoder_langtok") else []
        untouched_by_pair = {pair: untouched_test_sets(data, *pair.split("-"))["test"] for pair in pairs}
        generations, directions = {}, {}
        for pair in pairs:
            src, tgt = pair.split("-")
            pair_args = [*base, "--source-lang", src, "--target-lang", tgt]
            decoding[pair] = dataset.decoding_for(pair)
            out_file = eval_dir / f"generate-{pair}.txt"
            gen = generations[pair] = decode("test", pair_args, "sentencepiece", out_file, decoding[pair])
            directions[pair] = scoring.untouched_sacrebleu(gen, gen.hypotheses, untouched_by_pair[pair], tgt)
        scores = scoring.score_opus(directions)

    record.update(
        status="measured",
        scores=scores,
        scoring=scoring_description(dataset, record["data"]),
        decoding=decoding,
        checkpoints=[str(p) for p in checkpoints],
        averaged_checkpoint=str(averaged),
        evaluation={
            "commands": [gen.command for gen in generations.values()],
            "wall_seconds": round(time.time() - started, 1),
        },
    )
    return _write(out_path, record)


def _options(decoding: Mapping[str, object]) -> str:
    return ", ".join(f"{key} {value}" for key, value in decoding.items())


def _write(path: Path, record: dict) -> dict:
    write_json(path, record)
    headline = {k: v for k, v in record["scores"].items() if k in ("bleu", "sacrebleu", "EX", "XE", "ALL")}
    print(f"{record['cell']}: {record['status']} {headline or record.get('divergence', '')}")
    if record["status"] == "measured":
        print(f"scored as: {record['scoring']}")
        if "sacrebleu_signature" in record["scores"]:
            print(f"sacrebleu signature: {record['scores']['sacrebleu_signature']}")
    print(f"wrote {path}")
    return record
