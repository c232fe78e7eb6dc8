"""Where training ends: Post-LN, Pre-LN, ResiDual and their successors trained to their plateau on real text.

    python -m fairseq_residual_tools.analysis.bible_study      # make bible-study-results (resumable; hours)

The corpus is the Spanish-English Bible of ``data-prep/prepare-bible.sh`` (``dataprep.bible``). For every scheme,
depth (E{L}D{L}), warmup setting and seed, ``fairseq-train`` trains a small ``residual_transformer`` one validation
interval at a time (each call resumes from ``checkpoint_last.pt``: bit for bit the run one call trains, dropout
included; ``tests/plugin/test_cli.py``) until the run has plateaued (``plateau.Plateau``) or reached
``--max-update-cap``; the last ``--average`` interval checkpoints up to that update are averaged,
``fairseq-generate`` translates the test set and it is scored as the paper's IWSLT table is
(``repro.scoring.score_iwslt``: fairseq's tokenised BLEU and sacrebleu on detokenised text). "fails" is
``training_log.divergence``, the project's one rule, judged where the run stopped.
The report and the README's table: ``bible_report``.

A run is named by its settings, the data-bin's bytes and the model's fingerprint (``fingerprint.py``: the loss and
gradient of the freshly initialised model on a fixed batch), so a change of code that changes what a scheme
computes trains it anew, and one that does not (a new scheme beside it) keeps its finished runs. A finished run's
record lies in ``OUT/runs/`` (committed, so a new checkout reuses it); an interrupted one resumes from its
``checkpoint_last.pt`` in ``--work``. A run being trained is locked (``training_lock``): a second invocation on
the same ``--work`` (on cores the first leaves idle) leaves it to the first and trains the rest of its own plan.
"""

import argparse
import hashlib
import itertools
import json
import shlex
import sys
import threading
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..average_checkpoints import fill_update_checkpoint, numbered_checkpoints, write_average
from ..commands import run_training
from ..dataprep import bible
from ..errors import ConfigError, DataError, exit_on_user_error
from ..files import write_json, write_lines
from ..folder_lock import held
from ..provenance import ROOT, describe_git, git_state, provenance
from ..runner import PLUGIN_DIR, RunError, fairseq_command
from ..training_log import TrainLog, divergence, outcome, read_log
from .bible_report import (
    CHAPTERS,
    PAGES,
    REFERENCES,
    cell_table,
    hypotheses_file,
    publish,
    published_folder,
    run_id,
    write_report,
)
from .bible_reuse import in_plan_order, reused_runs, run_and_record
from .fingerprint import model_fingerprint
from .plateau import Plateau
from .study import RunSpec, print_validation, run_in_pool
from .variants import check_variants, variant_flags

DEFAULT_OUT = ROOT / "results" / "bible-study"
MODULE = "fairseq_residual_tools.analysis.bible_study"


def plan(args) -> List[RunSpec]:
    """Every run, in the order they are trained. With ``--groups``, group by group as given (each a depth and a seed:
    its schemes with warmup, in ``--schemes-at``'s order for that depth, else ``--schemes``'), each group's runs
    without warmup after it; a cut then takes the last groups first. Otherwise the first study's order: the first
    seed of E6D6 (the first depth) with and without warmup, E6D6 with warmup for the other seeds (the issue's floor:
    two seeds there), the first seed of the deeper depths with and without warmup, then the other seeds of the rest.
    A study cut short (``--cut-after``) so loses seeds before cells, and the deeper no-warmup cells before the deeper
    warmup ones; ``--cut`` names runs to leave out anywhere in it."""
    if args.groups:
        return [
            RunSpec(scheme, depth, warmup, seed)
            for depth, seed in args.groups
            for warmup in (True, False)
            for scheme in schemes_at(args, depth)
            if warmup or scheme in args.nowarmup_schemes
        ]
    seeds_at = dict(args.seeds_at or {})
    main = args.depths[0]
    specs = [
        RunSpec(scheme, depth, warmup, seed)
        for depth in args.depths
        for warmup in (True, False)
        for seed in seeds_at.get(depth, args.seeds)
        for scheme in (args.schemes if warmup else [s for s in args.schemes if s in args.nowarmup_schemes])
    ]

    def priority(spec: RunSpec):
        later_seed = spec.seed != args.seeds[0]
        at_main = spec.layers == main
        return (later_seed and not (at_main and spec.warmup), not at_main, later_seed, not spec.warmup)

    return sorted(specs, key=priority)  # stable: seeds, then schemes, in their given order within a group


#: ``--criterion``: fairseq's label-smoothed cross-entropy, or the plugin's fused one (the same losses within fp32
#: reordering, without the logits: docs/performance.md); a run's key names the one it trained with
CRITERIA = {"stock": "label_smoothed_cross_entropy", "fused": "fused_label_smoothed_cross_entropy"}


def schemes_at(args, depth: int) -> List[str]:
    """The schemes trained at ``depth``: ``--schemes-at``'s for it, else ``--schemes``."""
    return dict(args.schemes_at or {}).get(depth, args.schemes)


def training_args(databin, save_dir, spec: RunSpec, args, max_update: int) -> List[str]:
    """fairseq-train's arguments: the paper's IWSLT-14 recipe (shared/paper/README.md) at width ``--dim``; without
    warmup inverse_sqrt starts at the peak (constant for ``--warmup`` updates, then the same decay)."""
    scheme, model_options = variant_flags(spec.scheme)
    d, save_dir = args.dim, Path(save_dir)
    arguments = [
        databin,
        *("--user-dir", PLUGIN_DIR, "--arch", "residual_transformer_iwslt_de_en", "--residual-scheme", scheme),
        *model_options,
        *("--source-lang", args.src, "--target-lang", args.tgt),
        *("--encoder-layers", spec.layers, "--decoder-layers", spec.layers),
        *("--encoder-embed-dim", d, "--decoder-embed-dim", d, "--encoder-ffn-embed-dim", 4 * d),
        *("--decoder-ffn-embed-dim", 4 * d, "--encoder-attention-heads", 4, "--decoder-attention-heads", 4),
        *("--share-all-embeddings", "--dropout", args.dropout),
        *("--attention-dropout", 0.1, "--activation-dropout", 0.1),
        *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--weight-decay", "0.0001", "--lr", args.lr),
        *("--lr-scheduler", "inverse_sqrt", "--warmup-updates", args.warmup),
        *("--warmup-init-lr", 1e-7 if spec.warmup else args.lr),
        *("--criterion", CRITERIA[args.criterion], "--label-smoothing", 0.1),
        *("--max-tokens", args.max_tokens, "--max-update", max_update, "--seed", spec.seed),
        *("--validate-interval-updates", args.validate_every, "--save-interval-updates", args.validate_every),
        *(
            "--validate-interval",
            10**6,
            "--save-interval",
            10**6,
        ),  # none at epoch ends: the curve's points are evenly spaced
        *("--keep-interval-updates", args.average, "--no-epoch-checkpoints"),
        *("--cpu", "--num-workers", 0, "--log-format", "json", "--log-interval", 50),
        *("--save-dir", save_dir, "--log-file", save_dir / "train.log", "--tensorboard-logdir", save_dir / "tb"),
    ]
    return [str(a) for a in arguments]


def run_key(spec: RunSpec, args, data_sha: str, fingerprint: str) -> str:
    """What makes a run this run: its fairseq-train arguments (folders, the checkout's path and the moving
    --max-update aside), its plateau rule, what is averaged, the data-bin's bytes and the model's fingerprint. Not the
    cap: training to update U is the same under any cap above U, so a raised cap trains a capped run on
    (``current_record``)."""
    train = ["PLUGIN" if a == str(PLUGIN_DIR) else a for a in training_args("DATA", "SAVE", spec, args, 0)]
    named = json.dumps([train, asdict(plateau_rule(args)), data_sha, fingerprint])
    return hashlib.sha256(named.encode()).hexdigest()[:12]


def plateau_rule(args) -> Plateau:
    return Plateau(fraction=args.plateau_fraction, min_updates=args.plateau_min_updates)


def judge(valid: Sequence, last_train: int, verdict: str, args, layers: Optional[int] = None) -> Optional[Dict]:
    """Why a run (of ``layers`` layers) with validation curve ``valid`` is over, or None: diverged by the rule's NaN /
    explosion tests (later updates cannot undo those); then, where ``--budget`` gives its depth a budget, failed by the
    rule where it plateaued (such a run does not spend the budget) or at the budget; else plateaued, or at the cap.
    Only the validations up to the budget or cap count. ``{"stop": ..., "end_update": U}``."""
    budget = budgets(args).get(layers) if layers is not None else None
    limit = args.max_update_cap if budget is None else budget
    valid = [(u, loss) for u, loss in valid if u <= limit]
    end = valid[-1][0] if valid else last_train
    if diverged(verdict):
        return {"stop": f"diverged: {verdict}", "end_update": end}
    plateaued = plateau_rule(args).reached(valid)
    if budget is not None:
        if plateaued is not None and verdict:
            return {"stop": f"failed by the rule at its plateau: {verdict}", "end_update": end}
        return {"stop": f"budget of {budget} updates", "end_update": end} if end >= budget else None
    if plateaued is not None:
        return {"stop": "plateau", "end_update": plateaued}
    if end >= args.max_update_cap:
        return {"stop": f"reached --max-update-cap {args.max_update_cap} before the plateau", "end_update": end}
    return None


def budgets(args) -> Dict[int, int]:
    """``--budget``: the updates every run of a depth trains (equal budgets), by depth."""
    return dict(getattr(args, "budget", None) or {})


def plateau_point(valid: Sequence, args) -> Dict:
    """Where the plateau rule would have stopped a run with validation curve ``valid`` (None: not by its end), and
    its best validation loss there: what a budgeted run's record holds beside its end at the budget."""
    update = plateau_rule(args).reached(valid)
    best = None if update is None else min(loss for u, loss in valid if u <= update)
    return {"plateau_update": update, "best_valid_loss_at_plateau": best}


def diverged(verdict: Optional[str]) -> bool:
    """Whether the rule's ``verdict`` is a NaN or an explosion, which no later update undoes (the others, no progress
    and stuck on a plateau, a run may leave given more updates)."""
    return verdict is not None and ("NaN" in verdict or "exploded" in verdict)


def stop_reason(log: TrainLog, args, layers: Optional[int] = None) -> Optional[Dict]:
    """``judge`` of the run's log so far (``read_log``)."""
    last_train = log.train[-1][0] if log.train else 0
    return judge(log.valid, last_train, divergence(log) or "", args, layers)


def current_record(path: Path, args) -> Optional[Dict]:
    """The record at ``path`` if its run ends there under ``args`` too; None if there is none, or if it stopped at
    another cap than today's (the study then trains it on from its checkpoints, or judges it again)."""
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    now = judge(record["valid_curve"], record["end_update"], record["fails"] or "", args, record["layers"])
    return record if now == {"stop": record["stop"], "end_update": record["end_update"]} else None


def train_to_end(spec: RunSpec, databin: Path, save_dir: Path, args, label: str) -> Dict:
    """Train one validation interval at a time until ``stop_reason``; returns it."""
    out_file = save_dir / "train.out"
    while True:
        log = read_log(out_file) if out_file.exists() else None
        curve = log.valid if log else []
        done = curve[-1][0] if curve else 0
        if done:  # fairseq saves no update checkpoint at an epoch's end: the average would skip this validation
            fill_update_checkpoint(save_dir, done)  # here, not after training: a run killed in between fills it too
            keep_average(save_dir, done, args.average)
        stop = stop_reason(log, args, spec.layers) if log else None
        if stop is not None:
            return stop
        target = (done // args.validate_every + 1) * args.validate_every
        best = min((loss for _, loss in curve), default=None)
        print(f"    [{label}] training to update {target} (best valid loss so far {best})", flush=True)
        cmd = fairseq_command("train", *training_args(databin, save_dir, spec, args, target))
        run_training(cmd, out_file, label, on_line=partial(print_validation, label))
        after = read_log(out_file)
        if not after.nan_error and (not after.valid or after.valid[-1][0] < target):
            raise RunError(f"{label}: fairseq-train", 0, f"stopped before validating at update {target}", out_file)


#: in a run's folder: the averaged model at each of its validations (``keep_average``)
AVERAGES = "averages"


def averaged_at(save_dir: Path, update: int) -> Path:
    return Path(save_dir) / AVERAGES / f"at-{update}.pt"


def keep_average(save_dir: Path, update: int, n: int) -> Optional[Path]:
    """The average of the run's last ``n`` interval checkpoints up to ``update`` (fewer before its ``n``-th
    validation), kept at every validation in ``AVERAGES`` (a model without optimizer state): what scores the run at
    any other run's end, both ways, once fairseq has deleted those checkpoints. None where the checkpoint at
    ``update`` is not there (a run trained before averages were kept)."""
    out = averaged_at(save_dir, update)
    if out.is_file():
        return out
    found = numbered_checkpoints(save_dir, "update", upper_bound=update)[:n]
    if not found or found[0][1] != update:
        return None
    out.parent.mkdir(exist_ok=True)
    return write_average([p for p, _ in found], out, quiet=True)


def average_and_score(databin: Path, save_dir: Path, end_update: int, args) -> Dict:
    """The last ``--average`` interval checkpoints up to ``end_update`` averaged, the test set decoded (beam 5) and
    scored: fairseq's tokenised BLEU, the paper's IWSLT measure, and sacreBLEU of the detokenised translations against
    the untouched test verses, lowercased as the recipe lowercases (``score_model``)."""
    found = numbered_checkpoints(save_dir, "update", upper_bound=end_update)[: args.average]
    if not found:
        raise DataError(f"{save_dir} holds no interval checkpoint up to update {end_update} to average")
    averaged = keep_average(save_dir, end_update, args.average) or write_average(
        [p for p, _ in found], save_dir / f"average{len(found)}-at-{end_update}.pt"
    )
    return {
        "averaged": [p.name for p, _ in found],
        **score_model(databin, averaged, save_dir / "generate-test.out", args),
    }


def score_model(databin: Path, model: Path, out_file: Path, args) -> Dict:
    """The test set decoded with ``model`` (beam 5; fairseq-generate's output in ``out_file``) and scored as the
    paper's IWSLT table: tokenised BLEU, and sacreBLEU against the untouched test verses (``score_iwslt``)."""
    from ..repro import evaluate, scoring  # fairseq: loaded only to score
    from ..repro.data_record import untouched_test_sets

    task_args = ["--source-lang", args.src, "--target-lang", args.tgt]
    gen = evaluate.generate(databin, model, True, "test", task_args, "@@ ", out_file)
    untouched = untouched_test_sets(databin, args.src, args.tgt)["test"]
    return {"generate_command": gen.command, **scoring.score_iwslt(gen, untouched, args.tgt)}


def test_text(databin) -> Dict:
    """The untouched test verses (``references``), the chapter of each (``documents``) and whether the recipe
    lowercased what the model learnt (``lowercase``): the data prep's ``test_text`` record beside the data-bin
    (``repro.data_record.untouched_test_sets``; one that lacks it stops in one line)."""
    from ..repro.data_record import untouched_test_sets

    summary = json.loads((Path(databin).parent / "summary.json").read_text(encoding="utf-8"))
    options = summary.get("options", {})
    test = untouched_test_sets(databin, options.get("src", "es"), options.get("tgt", "en"))["test"]
    entry = next(e for e in summary["test_text"]["sets"] if e["split"] == "test")
    if "documents" not in entry:
        raise DataError(f"{databin}: its test_text names no chapters file: run data-prep/prepare-bible.sh again")
    documents = (Path(databin).parent / entry["documents"]).read_text(encoding="utf-8").splitlines()
    return {"references": test.lines, "documents": documents, "lowercase": test.lowercase}


def run_one(spec: RunSpec, data: Dict, args, records: Path, runs_dir: Path) -> Dict:
    """Reuse the run's record if this very run finished before; else train to its end, judge, average, score and
    write the record (last: a run killed before it resumes)."""
    train = training_args("DATA", "SAVE", spec, args, 0)
    key, name = run_name(spec, data, args)
    record_file = records / f"{name}.json"
    record = current_record(record_file, args)
    if record is not None:
        return dict(record, reused=True)
    if record_file.exists():
        print(
            f"    [{spec.name}] its record ended at another cap: judged again at --max-update-cap "
            f"{args.max_update_cap}, trained on from its checkpoints if it needs more",
            flush=True,
        )
    save_dir = runs_dir / name
    with training_lock(save_dir):
        record = current_record(record_file, args)  # again, locked: another invocation may have ended it meanwhile
        if record is not None:
            return dict(record, reused=True)
        return train_and_record(spec, data, args, save_dir, record_file, key, train)


def training_lock(save_dir: Path, who: str = "bible_study"):
    """Held while a run trains, averages and scores: another invocation on the same ``--work`` leaves the run to
    this one (``FolderBusy``) and trains the rest of its plan. Beside the run's folder, not in it."""
    return held(save_dir, save_dir.with_name(f"{save_dir.name}.lock"), who)


def train_and_record(spec: RunSpec, data: Dict, args, save_dir: Path, record_file: Path, key: str, train) -> Dict:
    """``run_one``'s training to the end, judgement, scoring and record (written last)."""
    save_dir.mkdir(parents=True, exist_ok=True)
    git = describe_git(git_state())  # the code this attempt's training loads
    started = time.time()
    stop = train_to_end(spec, data["databin"], save_dir, args, spec.name)
    result = dict(asdict(spec), name=spec.name, key=key, train_command=" ".join(map(str, train[1:])), git=git)
    result.update(fingerprint=data["fingerprints"][spec], max_update_cap=args.max_update_cap, **stop)
    result.update(outcome(save_dir / "train.out"))
    result["best_valid_loss"] = min((loss for _, loss in result["valid_curve"]), default=None)
    if spec.layers in budgets(args):
        result.update(budget=budgets(args)[spec.layers], **plateau_point(result["valid_curve"], args))
    result.update(bleu=None, sacrebleu=None)
    if result["fails"] is None:
        result.update(average_and_score(data["databin"], save_dir, stop["end_update"], args))
        keep_test_output(save_dir / "generate-test.out", record_file.parent, result, args.tgt, data["databin"])
    result.update(provenance=provenance(), wall_seconds_this_attempt=round(time.time() - started, 1))
    write_json(record_file, result)
    return dict(result, reused=False)


def keep_test_output(generate_out: Path, records: Path, run: Dict, lang: str, databin) -> None:
    """The run's test translations beside its record, Moses-detokenised in the test set's order, and, once, the
    untouched test verses and their chapters (``bible_report.REFERENCES`` / ``CHAPTERS``): what the report's
    significance test compares."""
    from ..repro.scoring import detokenize, original_references, parse_generate

    gen = parse_generate(generate_out.read_text(encoding="utf-8"))
    test = test_text(databin)
    original_references(gen, test["references"])  # one translation for each test verse, or a one-line error
    for name, lines in ((REFERENCES, test["references"]), (CHAPTERS, test["documents"])):
        known = records / name
        if known.is_file() and known.read_text(encoding="utf-8").splitlines() != lines:
            raise DataError(f"{known} holds another test set than {databin}'s: one report, one test set")
        if not known.is_file():
            write_lines(known, lines)
    write_lines(hypotheses_file(records, run), detokenize(gen.hypotheses, lang))


def backfill_test_outputs(results: Sequence[Dict], args, databin) -> None:
    """``keep_test_output`` for scored records from before it: from the run's ``generate-test.out`` in ``--work``,
    when that decoding is the one the record scored (the same BLEU line)."""
    from ..repro.scoring import parse_generate

    records = Path(args.out) / "runs"
    for run in results:
        out_file = Path(args.work) / "runs" / run_id(run) / "generate-test.out"
        if run["bleu"] is None or hypotheses_file(records, run).is_file() or not out_file.is_file():
            continue
        if parse_generate(out_file.read_text(encoding="utf-8")).fairseq_bleu_line == run["bleu_detail"]:
            keep_test_output(out_file, records, run, args.tgt, databin)


def reused(specs: Sequence[RunSpec], data: Dict, args) -> Dict[str, Dict]:
    """``--reuse``'s records of planned runs from another study (``bible_reuse``), by run name, each judged by this
    plan's rule and budget and given where the plateau rule would have stopped it."""

    def judged(record):
        return judge(record["valid_curve"], record["end_update"], record["fails"] or "", args, record["layers"])

    def train(spec):
        return " ".join(training_args("DATA", "SAVE", spec, args, 0)[1:])

    records = Path(args.out) / "runs"
    found = reused_runs(specs, args.reuse, train, data["fingerprints"], judged, budgets(args), records)
    for record in found.values():
        if record["layers"] in budgets(args):
            record.update(budget=budgets(args)[record["layers"]], **plateau_point(record["valid_curve"], args))
    return found


def run_name(spec: RunSpec, data: Dict, args) -> Tuple[str, str]:
    """The run's key and its name ``<spec name>-<key>``: its record's file name in ``OUT/runs`` and its folder in
    ``--work``/runs."""
    key = run_key(spec, args, data["sha256"], data["fingerprints"][spec])
    return key, f"{spec.name}-{key}"


def record_file(spec: RunSpec, data: Dict, args) -> Path:
    """Where the run's record lies once it has finished: ``OUT/runs/<name>-<key>.json``."""
    return Path(args.out) / "runs" / f"{run_name(spec, data, args)[1]}.json"


def finished(specs: Sequence[RunSpec], data: Dict, args) -> List[Dict]:
    """The records of the planned runs that have finished, in the plan's order."""
    return [r for r in (current_record(record_file(s, data, args), args) for s in specs) if r is not None]


def recorded(specs: Sequence[RunSpec], data: Dict, args) -> List[Dict]:
    """What ``--report-only`` reports: ``finished``, and where a planned run has no record under today's key but one
    record of its name lies in ``OUT/runs`` (trained when the key was computed otherwise), that one, said so: a
    committed report is rewritten from its records, not from what today's code would train."""
    found = []
    for spec in specs:
        record = current_record(record_file(spec, data, args), args)
        older = sorted((Path(args.out) / "runs").glob(f"{spec.name}-*.json"))
        if record is None and len(older) == 1:
            record = json.loads(older[0].read_text(encoding="utf-8"))
            print(f"{older[0]}: recorded under another key than today's code gives its run: reported as recorded")
        if record is not None:
            found.append(record)
    return found


def under_way(specs: Sequence[RunSpec], data: Dict, args) -> List[Dict]:
    """The planned runs that have validated at least once and not finished: where each one is (``--work``'s logs).
    A snapshot for the report while the study runs; a finished run's record replaces it."""
    found = []
    for spec in specs:
        if current_record(record_file(spec, data, args), args) is not None:
            continue
        out_file = Path(args.work) / "runs" / run_name(spec, data, args)[1] / "train.out"
        curve = read_log(out_file).valid if out_file.exists() else []
        if curve:
            found.append(
                dict(
                    asdict(spec),
                    name=spec.name,
                    update=curve[-1][0],
                    best_valid_loss=min(v for _, v in curve),
                    valid_curve=curve,
                    fails=None,  # not judged before the end
                )
            )
    return found


def run_all(specs: List[RunSpec], data: Dict, args, started: float, report) -> List[Dict]:
    """The plan with ``args.jobs`` concurrent trainings, printing progress; ``report()`` after each finished run, so
    that the report, the README's table and the records in ``OUT/runs`` always hold every run finished so far. Runs
    under way come first, then the rest in the plan's order: a resumed study ends what it started before it starts
    another (what a replaced machine loses is then the fewest runs)."""
    runs_dir = Path(args.work) / "runs"
    number = {spec: n for n, spec in enumerate(specs, 1)}
    reused = [dict(record, reused=True) for record in finished(specs, data, args)]
    ended = {r["name"] for r in reused}
    if ended:  # one line for them all, not one a run (run_one still reuses a record that appears meanwhile)
        places = ", ".join(str(number[s]) for s in specs if s.name in ended)
        print(
            f"{len(ended)} of {len(specs)} runs finished earlier with these settings, data and model: "
            f"reused (runs {places})",
            flush=True,
        )
    done, resumed = itertools.count(len(ended) + 1), {u["name"] for u in under_way(specs, data, args)}
    lock = threading.Lock()

    def one(spec):
        result = run_one(spec, data, args, Path(args.out) / "runs", runs_dir)
        how = "finished earlier with these settings, data and model: reused" if result["reused"] else "trained"
        # runs end out of the plan's order: the count of ended runs, then this one's place in the plan
        print(
            f"[{next(done)}/{len(specs)} ended] run {number[spec]} {spec.name}: {result['stop']} at update "
            f"{result['end_update']}, fails={result['fails']}, BLEU {result['bleu']} ({how}) | "
            f"{(time.time() - started) / 60:.1f} min",
            flush=True,
        )
        if not result["reused"]:
            with lock:
                report()
        return result

    left = [spec for spec in specs if spec.name not in ended]
    # stable: the plan's order otherwise
    return reused + run_in_pool(sorted(left, key=lambda s: s.name not in resumed), one, args.jobs)


def prepare_data(args) -> Dict:
    """The Bible data-bin (``dataprep.bible``, resumable) under ``--work``, and its content's sha256."""
    out = Path(args.work).resolve() / "data"  # one recorded --out, however --work is written: no stage redone
    argv = ["--out", str(out), "--src", args.src, "--tgt", args.tgt, "--bpe-merges", str(args.bpe_merges)]
    argv += ["--workers", "2", "--quiet"]
    bible.prepare(bible.build_parser().parse_args(argv))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    return {"databin": out / "bin", "sha256": summary["data_bin_sha256"], "summary": summary}


def depth_updates(text: str):
    depth, _, updates = text.partition("=")
    try:
        return int(depth), int(updates)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write DEPTH=UPDATES, e.g. 6=8750") from None


def depth_schemes(text: str):
    depth, _, schemes = text.partition("=")
    try:
        return int(depth), [s for s in schemes.split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write DEPTH=SCHEME[,SCHEME...], e.g. 12=deepnet,admin") from None


def depth_seed(text: str):
    depth, _, seed = text.partition(":")
    try:
        return int(depth), int(seed)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write DEPTH:SEED, e.g. 18:1") from None


def seeds_at(text: str):
    depth, _, seeds = text.partition("=")
    try:
        return int(depth), [int(s) for s in seeds.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write DEPTH=SEED[,SEED...], e.g. 12=1") from None


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="fairseq-residual-bible-study",
        description=__doc__.splitlines()[0],
        fromfile_prefix_chars="@",  # @results/bible-study/cut.args: the study's cut, one argument a line
    )
    p.add_argument("--work", default=str(ROOT / "work" / "bible-study"), help="data and checkpoints")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="report folder (records in runs/)")
    p.add_argument(
        "--schemes", nargs="+", default=["post", "pre", "residual", "residual:scale=0.5", "hc", "siamese", "attn-res"]
    )
    p.add_argument("--nowarmup-schemes", nargs="*", default=["post", "pre", "residual"], help="also without warmup")
    p.add_argument("--depths", type=int, nargs="+", default=[6, 12], help="the first is the main depth")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--seeds-at", type=seeds_at, nargs="*", default=[(12, [1])], help="DEPTH=SEEDS: fewer seeds there")
    p.add_argument(
        "--schemes-at", type=depth_schemes, nargs="*", default=[], help="DEPTH=SCHEME,...: other schemes there"
    )
    p.add_argument(
        "--groups",
        type=depth_seed,
        nargs="*",
        default=[],
        metavar="DEPTH:SEED",
        help="train these groups in this order (the plan's order; a cut takes the last first)",
    )
    p.add_argument("--jobs", type=int, default=2, help="runs trained at the same time (one thread each)")
    p.add_argument("--src", default="es")
    p.add_argument("--tgt", default="en")
    p.add_argument("--bpe-merges", type=int, default=8000)
    p.add_argument("--dim", type=int, default=64, help="model width (FFN 4x)")
    p.add_argument(
        "--dropout", type=float, default=0.0, help="0: a run ends inside a session (results/bible-study/README)"
    )
    p.add_argument("--lr", type=float, default=4e-3, help="peak learning rate: the Noam peak at --dim and --warmup")
    p.add_argument("--warmup", type=int, default=1000, help="warmup updates")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument(
        "--criterion",
        choices=sorted(CRITERIA),
        default="stock",
        help="the loss: fairseq's (results/bible-study's runs) or the plugin's fused one (faster, the same losses)",
    )
    p.add_argument("--validate-every", type=int, default=250)
    p.add_argument("--plateau-fraction", type=float, default=0.01)
    p.add_argument("--plateau-min-updates", type=int, default=2000)
    p.add_argument("--max-update-cap", type=int, default=30000, help="a guard: raising it trains capped runs on")
    p.add_argument(
        "--budget",
        type=depth_updates,
        nargs="*",
        default=[],
        metavar="DEPTH=UPDATES",
        help="equal budgets: every run of DEPTH trains UPDATES (not to its plateau); one the rule fails at its plateau "
        "stops there",
    )
    p.add_argument("--average", type=int, default=5, help="interval checkpoints averaged for BLEU")
    p.add_argument(
        "--zoom-from", type=int, help="the zoomed curves start here (default: half the longest run, its end's part)"
    )
    p.add_argument("--cut-after", type=int, help="train the plan's first N runs only; the report names the rest as cut")
    p.add_argument(
        "--cut", nargs="+", metavar="RUN", help="planned runs not to train, by name (pre-e12d12-nowarmup-seed1 ...)"
    )
    p.add_argument("--cut-reason", help="why the plan was cut (--cut-after, --cut): written under the plan's table")
    p.add_argument(
        "--reuse",
        type=run_and_record,
        nargs="*",
        default=[],
        metavar="RUN=RECORD",
        help="report planned run RUN from another study's record instead of training it (its recipe under another "
        "criterion, ending at this plan's budget: analysis/bible_reuse.py)",
    )
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the finished runs' records")
    args = p.parse_args(argv)
    if args.validate_every <= 0 or args.plateau_min_updates % args.validate_every:
        raise ConfigError("--plateau-min-updates must be a multiple of --validate-every")
    if args.groups and args.budget and {d for d, _ in args.groups} - set(budgets(args)):
        missing = sorted({d for d, _ in args.groups} - set(budgets(args)))
        raise ConfigError(f"--budget has none for depth {', '.join(map(str, missing))}: every planned depth needs one")
    off = [f"{d}={u}" for d, u in args.budget if u <= 0 or u % args.validate_every or u > args.max_update_cap]
    if off:
        raise ConfigError(
            f"--budget {' '.join(off)}: give a multiple of --validate-every ({args.validate_every}) up to "
            f"--max-update-cap ({args.max_update_cap})"
        )
    if (args.cut_after is None and not args.cut) != (not args.cut_reason):
        raise ConfigError(
            "--cut-after or --cut and --cut-reason go together: the report says why the rest was not trained"
        )
    return args


def cut_plan(specs: List[RunSpec], data: Dict, args) -> Tuple[List[RunSpec], Dict]:
    """The runs to train under ``--cut-after N`` (the plan's first N) and ``--cut RUN ...`` (all but those), and
    ``meta["cut"]``: the runs left out that have not finished (a finished run stays a result), with
    ``--cut-reason``."""
    named = list(args.cut or [])
    if args.cut_after is None and not named:
        return specs, {}
    if args.cut_after is not None and not 0 < args.cut_after < len(specs):
        raise ConfigError(
            f"--cut-after {args.cut_after}: the plan has {len(specs)} runs; cut after 1 to {len(specs) - 1}"
        )
    names = [s.name for s in specs]
    unknown = [n for n in named if n not in names]
    if unknown:
        raise ConfigError(f"--cut {' '.join(unknown)}: not a run of the plan; its runs: {' '.join(names)}")
    after = len(specs) if args.cut_after is None else args.cut_after
    kept = [s for s in specs[:after] if s.name not in named]
    rest = [s for s in specs if s not in kept]
    done = {r["name"] for r in finished(rest, data, args)}
    left = [s.name for s in rest if s.name not in done]
    return kept, {"after": args.cut_after, "named": named, "runs": left, "reason": args.cut_reason}


#: what picks a plan's runs, how many train at once and how the curves are zoomed; every other setting is in the
#: runs' keys or their report
SELECTION = (
    "schemes",
    "schemes_at",
    "groups",
    "nowarmup_schemes",
    "depths",
    "seeds",
    "seeds_at",
    "cut_after",
    "cut",
    "cut_reason",
    "jobs",
    "zoom_from",
    "reuse",
)


def reported_plan(args, specs: Sequence[RunSpec], command: str) -> Tuple[argparse.Namespace, str]:
    """The plan the report in ``--out`` describes, and the command that trains it: this invocation's, or, where
    ``--out`` holds the report (results.json) of a larger plan with the same other settings, of which this invocation
    trains some runs, that plan: training a few of a study's runs on their own leaves its report whole."""
    stored = Path(args.out) / "results.json"
    if not stored.is_file():
        return args, command
    meta = json.loads(stored.read_text(encoding="utf-8"))
    settings = meta["settings"]
    ours = json.loads(json.dumps({k: v for k, v in vars(args).items() if k not in ("work", "out", "report_only")}))
    if any(ours.get(k) != settings.get(k) for k in set(ours) | set(settings) if k not in SELECTION):
        return args, command
    larger = argparse.Namespace(**{**vars(args), **{k: settings[k] for k in SELECTION if k in settings}})
    if set(specs) < set(plan(larger)):
        return larger, meta["command"]
    return args, command


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    check_variants(args.schemes + [s for _, schemes in args.schemes_at for s in schemes])
    unknown = [s for s in args.nowarmup_schemes if s not in args.schemes]
    if unknown:
        raise ConfigError(f"--nowarmup-schemes {' '.join(unknown)}: not in --schemes")
    started = time.time()
    data = prepare_data(args)
    specs = plan(args)
    invoked = " ".join(
        [f"nice -n 5 .venv/bin/python -m {MODULE}", *(shlex.quote(a) for a in argv if a != "--report-only")]
    )
    shown, command = reported_plan(args, specs, invoked)
    shown_specs = plan(shown)  # specs, or a larger plan holding them
    data["fingerprints"] = {
        spec: model_fingerprint(training_args(data["databin"], Path(args.work) / "fingerprint", spec, args, 0))
        for spec in shown_specs
    }
    from_elsewhere = reused(shown_specs, data, shown)
    trained, cut = cut_plan(specs, data, args)
    shown_trained, shown_cut = (trained, cut) if shown is args else cut_plan(shown_specs, data, shown)
    trained = [s for s in trained if s.name not in from_elsewhere]
    shown_trained = [s for s in shown_trained if s.name not in from_elsewhere]
    meta = dict(
        command=command,
        settings={k: v for k, v in vars(shown).items() if k not in ("work", "out", "report_only")},
        data={k: data["summary"][k] for k in ("pairs", "verses", "modules", "data_bin_sha256")},
        plan=[dict(asdict(s), name=s.name) for s in shown_specs],  # what the BLEU table's cells hold
        cut=shown_cut,
    )

    def report():
        results = (recorded if args.report_only else finished)(shown_specs, data, shown)
        backfill_test_outputs(results, args, data["databin"])
        results = in_plan_order(results + list(from_elsewhere.values()), shown_specs)
        running = under_way(shown_trained, data, shown)
        write_report(results, {**meta, "provenance": provenance()}, Path(args.out), running)
        folder = published_folder(args.out)
        if results and folder:
            publish({**meta, "provenance": provenance(), "runs": results}, PAGES, folder)
        return results

    if shown is not args:
        print(
            f"the report in {args.out} stays that of its plan of {len(shown_specs)} runs ({command}), which holds these"
        )
    if args.report_only:
        results = report()
        print(
            f"{len(results)} of the {len(shown_specs)} planned runs have finished; report rewritten from their records"
        )
    else:
        print(f"{len(specs)} runs planned: {', '.join(s.name for s in specs)}", flush=True)
        if cut:
            print(f"cut, not trained: {', '.join(cut['runs']) or 'none (every run cut has finished)'}")
        run_all(trained, data, args, started, report)
        results = report()
    print(cell_table(results, "bleu", 2, meta) if results else "no run has finished yet")
    return results


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error(main))
