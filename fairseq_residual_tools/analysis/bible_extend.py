"""A finished run of the Bible study trained on past its plateau to a given update: the check that a scheme's lead
at the end is not only the longer training its later plateau gave it.

    python -m fairseq_residual_tools.analysis.bible_extend --run pre-e6d6-warmup-seed1 --to 8500

The plateau rule (``plateau.Plateau``) ends each run where its own curve flattens, so the runs of one cell end at
different updates. This copies the finished run's folder (``--work``/runs/NAME-KEY) to
``--work``/extended/NAME-KEY-to-U, trains it on to update U as the study trains (one validation interval at a
time, resumable, no plateau stop; a divergence still ends it), averages and scores it as the study does, and tests
its test translations against the cell's other finished runs, and against itself at its plateau, by sacreBLEU's
paired bootstrap. The record and translations go to ``OUT``/extended/ with a README; a finished extension is reused,
and compared with the runs of its cell that finished since it was made.
The remaining options are the study's (``bible_study``), so the run is the study's run under the same settings.

Given an update before the run's end (``--to U`` below it), it trains nothing: the run is scored there from the
averaged model the study kept at that validation (``bible_study.keep_average``) and compared with its cell, the other
direction of "trained as long" (a run that trained longer, seen where a shorter one ended).

A run the rule failed without diverging (no progress, stuck on a plateau: Post-LN at depth) is trained on the same
way, to see whether more updates get it out; it is scored if the rule no longer fails it.

Where the run's checkpoints are gone with the machine that trained them, ``--anew`` trains it again from update 0
under the same settings (the record's key) and says whether its validation curve up to the record's end is the
record's: the same run, or another one of the same recipe and seed.
"""

import argparse
import json
import shutil
import sys
from argparse import Namespace
from dataclasses import asdict
from pathlib import Path
from typing import Dict, Iterator, List, Sequence

from ..errors import ConfigError, exit_on_user_error
from ..files import write_json, write_text
from ..markdown import table
from ..provenance import describe_git, git_state, provenance
from ..training_log import outcome
from . import bible_study
from .bible_report import CHAPTERS, REFERENCES, TestSet, extended_rows, run_id
from .fingerprint import model_fingerprint
from .plateau import best_until
from .study import RunSpec

EXTENDED = "extended"


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="fairseq-residual-bible-extend", description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="a planned run's name, e.g. pre-e6d6-warmup-seed1")
    p.add_argument("--to", type=int, required=True, help="the update to train it on to (a validation update)")
    p.add_argument("--anew", action="store_true", help="checkpoints gone: train the run again from update 0")
    ours, rest = p.parse_known_args(argv)
    study = bible_study.parse_args(rest)
    if ours.to <= 0 or ours.to % study.validate_every:
        raise ConfigError(f"--to {ours.to}: give a multiple of --validate-every ({study.validate_every})")
    return ours, study


def planned(name: str, args) -> RunSpec:
    specs = {s.name: s for s in bible_study.plan(args)}
    if name not in specs:
        raise ConfigError(f"--run {name}: not a run of the study's plan (one is {next(iter(specs))})")
    return specs[name]


def cell(spec: RunSpec, args) -> List[RunSpec]:
    """The planned runs of ``spec``'s depth, warmup and seed: what its extension is compared with."""
    return [s for s in bible_study.plan(args) if (s.layers, s.warmup, s.seed) == (spec.layers, spec.warmup, spec.seed)]


def finished_run(spec: RunSpec, data: Dict, args) -> Dict:
    """The study's record of the planned run ``spec``, which must have finished without diverging: one that failed
    by the rule's other tests (no progress, stuck on a plateau) is trained on to see whether time gets it out."""
    name = spec.name
    record = bible_study.current_record(bible_study.record_file(spec, data, args), args)
    if record is None:
        raise ConfigError(f"--run {name}: it has not finished under these settings; train it with bible_study first")
    if bible_study.diverged(record["fails"]):
        raise ConfigError(f"--run {name}: it diverged ({record['fails']}); no later update undoes that")
    return record


#: in an extension's folder: it was trained from update 0, not copied from the study's run
ANEW = "trained-anew"


def check_source(source: Path, anew: bool, to: int) -> None:
    """The run's checkpoints must be in --work unless it is trained ``anew``."""
    if not source.is_dir() and not anew:
        raise ConfigError(
            f"{source}: the run's checkpoints are not in --work (gone with the machine that trained them?); "
            f"--anew trains it again from update 0 to {to}"
        )


def copy_run(source: Path, dest: Path) -> None:
    """The run's checkpoints and logs, not its averaged checkpoint or decoding; renamed into place when complete, so a
    copy killed half-way is made again. Where ``source`` is gone (``--anew``), an empty folder marked ``ANEW``."""
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    if not source.is_dir():
        partial.mkdir(parents=True)
        write_text(partial / ANEW, "trained from update 0: the study's run was not in --work\n")
        partial.rename(dest)
        return
    shutil.copytree(source, partial, ignore=shutil.ignore_patterns("average*.pt", "generate-*.out"))
    partial.rename(dest)


def compare(extended: Dict, out: Path, others: Sequence[Dict], runs: Path) -> List[Dict]:
    """Each scored run of ``others`` (the cell's finished runs, the extended one at its plateau among them; a failed
    run has no translations) tested against the extension (its translations in ``out``): its sacreBLEU, difference
    (other minus extension), 95 % interval and two-sided p, chapters resampled (``bible_report.TestSet``)."""
    test_set = TestSet.beside(runs)
    if test_set is None:
        raise ConfigError(f"{runs} holds no {REFERENCES} and {CHAPTERS}: score the study's runs first")
    rows = []
    for r in (r for r in others if r["bleu"] is not None):
        rows.append(dict(test_set.test(r, extended, out), name=r["name"], end_update=r["end_update"]))
    return [dict(row, test=test_set.describe()) for row in rows]


def compare_again(result: Dict, done: Path, spec: RunSpec, data: Dict, args) -> List[str]:
    """The runs of the cell that finished after the extension ``result`` was made, now compared with it too (the
    same bootstrap draws: the earlier rows stay as they were); its record ``done`` rewritten when there are any."""
    if result["fails"] is not None:
        return []
    others = bible_study.finished(cell(spec, args), data, args)
    since = [r["name"] for r in others if r["name"] not in {c["name"] for c in result["compared"]}]
    if since:
        result["compared"] = compare(result, done.parent, others, Path(args.out) / "runs")
        write_json(done, result)
    return since


def same_run(record: Dict, curve: Sequence) -> Dict:
    """An extension trained anew against the study's ``record``: whether its validation curve up to the record's end
    is the record's, and the largest difference of a loss at one update."""
    ours = dict((u, loss) for u, loss in curve if u <= record["end_update"])
    theirs = dict((u, loss) for u, loss in record["valid_curve"])
    differences = [abs(ours[u] - theirs[u]) for u in theirs if u in ours]
    same = ours.keys() == theirs.keys() and not any(differences)
    return {"same_curve": same, "largest_difference": max(differences, default=None)}


def extend(spec: RunSpec, to: int, data: Dict, args, anew: bool = False) -> Dict:
    """Train the finished run ``spec`` on to update ``to``, score it and compare it; its record (reused if made).
    ``data``: the study's, with the fingerprints of ``cell(spec)``. ``anew``: train it from update 0 where its
    checkpoints are gone."""
    name, record = spec.name, finished_run(spec, data, args)
    if to == record["end_update"]:
        raise ConfigError(f"--to {to}: {name} ended there; give an earlier or a later update")
    if to < record["end_update"]:
        return score_at(spec, to, record, data, args)
    out = Path(args.out) / EXTENDED
    stem = run_id({"name": f"{name}-to-{to}", "key": record["key"]})  # its record's and translations' stem
    done = out / f"{stem}.json"
    if done.exists():
        return made_before(done, spec, to, data, args)
    save_dir, source = Path(args.work) / EXTENDED / stem, Path(args.work) / "runs" / run_id(record)
    if not save_dir.exists():
        check_source(source, anew, to)
    with bible_study.training_lock(save_dir, "bible_extend"):  # a second extension of it refuses in one line
        if done.exists():  # again, locked: another extension may have ended it meanwhile
            return made_before(done, spec, to, data, args)
        if not save_dir.exists():
            copy_run(source, save_dir)
        # no plateau stop (a fall below 0 never happens), the cap at ``to``
        on = Namespace(**{**vars(args), "max_update_cap": to, "plateau_fraction": 0.0, "budget": []})
        git = describe_git(git_state())
        stop = bible_study.train_to_end(spec, data["databin"], save_dir, on, f"{name} to {to}")
        result = dict(asdict(spec), name=f"{name}-to-{to}", key=record["key"], extends=run_id(record))
        result.update(from_update=record["end_update"], to_update=to, source_fails=record["fails"], git=git)
        result.update(stop=stop["stop"] if "diverged" in stop["stop"] else f"trained on to update {to}")
        result.update(end_update=stop["end_update"], **outcome(save_dir / "train.out"))
        result.update(best_valid_loss=min((loss for _, loss in result["valid_curve"]), default=None))
        if (save_dir / ANEW).is_file():
            result["trained_anew"] = same_run(record, result["valid_curve"])
        result.update(bleu=None, sacrebleu=None, compared=[])
        if result["fails"] is None:
            result.update(bible_study.average_and_score(data["databin"], save_dir, to, args))
            bible_study.keep_test_output(save_dir / "generate-test.out", out, result, args.tgt, data["databin"])
            others = bible_study.finished(cell(spec, args), data, args)
            result["compared"] = compare(result, out, others, Path(args.out) / "runs")
        result.update(provenance=provenance())
        write_json(done, result)
        write_readme(out)
        return result


def score_at(spec: RunSpec, at: int, record: Dict, data: Dict, args) -> Dict:
    """The finished run ``spec`` scored at an earlier update ``at``, from the averaged model the study kept there
    (``bible_study.keep_average``), and compared with its cell's runs: the other direction of "trained as long" (a run
    that trained longer, seen where a shorter one ended). Its record and translations lie beside the extensions'."""
    name, out = spec.name, Path(args.out) / EXTENDED
    done = out / f"{run_id({'name': f'{name}-at-{at}', 'key': record['key']})}.json"
    if done.exists():
        return made_before(done, spec, at, data, args)
    source = Path(args.work) / "runs" / run_id(record)
    average = bible_study.averaged_at(source, at)
    if not average.is_file():
        raise ConfigError(
            f"{average}: no average kept at update {at} (the run trained before the study kept one at every "
            "validation, or its folder is gone with the machine that trained it)"
        )
    result = dict(asdict(spec), name=f"{name}-at-{at}", key=record["key"], extends=run_id(record))
    result.update(scored_at=at, run_end=record["end_update"], git=describe_git(git_state()), fails=None)
    result.update(stop=f"scored at update {at}", end_update=at, to_update=at)
    result["valid_curve"] = [[u, loss] for u, loss in record["valid_curve"] if u <= at]
    result["best_valid_loss"] = min(loss for _, loss in result["valid_curve"])
    out_file = source / f"generate-test-at-{at}.out"
    result.update(bible_study.score_model(data["databin"], average, out_file, args))
    bible_study.keep_test_output(out_file, out, result, args.tgt, data["databin"])
    result["compared"] = compare(
        result, out, bible_study.finished(cell(spec, args), data, args), Path(args.out) / "runs"
    )
    result.update(provenance=provenance())
    write_json(done, result)
    write_readme(out)
    return result


def made_before(done: Path, spec: RunSpec, to: int, data: Dict, args) -> Dict:
    """The extension's record ``done``, compared with its cell's runs finished since (``compare_again``)."""
    result = json.loads(done.read_text(encoding="utf-8"))
    since = compare_again(result, done, spec, data, args)
    said = f"compared with {', '.join(since)}, finished since" if since else "nothing to do"
    how = "scored at" if "scored_at" in result else "trained on to"
    print(f"{spec.name} was {how} update {to} before: {done} ({said})")
    write_readme(done.parent)
    return result


def write_readme(out: Path) -> None:
    """``OUT``/extended/README.md: every extension's end and comparisons, from its record."""
    parts = [
        "# Runs trained on past their plateau\n",
        "Each is a finished run of the study trained on, from its last checkpoint, to a later update (usually where",
        "another run of its cell ended), then averaged and scored as the study does (`bible_extend`). Not a run of",
        "the plan: its table keeps each run where the plateau rule ended it. Differences are other run minus the",
        "extension (a two-sided paired bootstrap resampling the test set's chapters). Where the run's checkpoints",
        "were gone, it was trained again from update 0 (`--anew`), and its section says whether that is the same",
        "run. A run that failed by the rule without diverging (no progress, stuck on a plateau) is trained on the",
        "same way, to see whether more updates get it out; it is scored only if the rule no longer fails it.\n",
    ]
    records = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(out.glob("*.json"))]
    adjusted = iter(c["p_holm"] for c in extended_rows(out))  # the page's comparisons: one family
    for r in records:
        if "scored_at" in r:
            parts.append(f"## {r['name']}\n")
            parts.append(
                f"Scored at update {r['scored_at']:,} from the averaged model the study kept there (the run ended at "
                f"{r['run_end']:,}); best validation loss {r['best_valid_loss']:.3f} by then; BLEU {r['bleu']:.2f}, "
                f"sacreBLEU {r['sacrebleu']:.2f}.\n"
            )
            parts += comparison_table(r, adjusted)
            parts.append(f"Command: `{command_of(r)}` at {r['git']}.\n")
            continue
        at_plateau = best_until(r["valid_curve"], r["from_update"])
        where = f"where the rule failed it ({r['source_fails']})" if r.get("source_fails") else "at its plateau"
        parts.append(f"## {r['name']}\n")
        parts.append(
            (
                anew_text(r)
                if "trained_anew" in r
                else f"Trained on from update {r['from_update']:,} to {r['to_update']:,}"
            )
            + (f" ({r['stop']})" if r["stop"] != f"trained on to update {r['to_update']}" else "")
            + f"; best validation loss "
            f"{at_plateau:.3f} {where}, {r['best_valid_loss']:.3f} by update {r['end_update']:,}; "
            + (f"BLEU {r['bleu']:.2f}, sacreBLEU {r['sacrebleu']:.2f}.\n" if r["bleu"] is not None else not_scored(r))
        )
        parts += comparison_table(r, adjusted)
        parts.append(f"Command: `{command_of(r)}` at {r['git']}.\n")
    write_text(out / "README.md", "\n".join(parts))


def comparison_table(r: Dict, adjusted: Iterator) -> List[str]:
    """The README's lines of record ``r``'s comparisons (none where it has none), Holm's p taken from ``adjusted``
    (the page's, in its order)."""
    if not r["compared"]:
        return []
    rows = []
    for c in r["compared"]:
        p_holm = next(adjusted)
        rows.append(
            [c["name"], f"{c['end_update']:,}", f"{c['sacrebleu']:.2f}", f"{c['delta']:+.2f}"]
            + [f"[{c['ci95'][0]:+.2f}, {c['ci95'][1]:+.2f}]"]
            + ["-" if c["p"] is None else f"{c['p']:.4f}", "-" if p_holm is None else f"{p_holm:.4f}"]
        )
    headers = ["run", "ended at", "sacreBLEU", "difference", "95 % interval", "p", "Holm p"]
    return [
        f"Against it (sacreBLEU {r['sacrebleu']:.2f}):\n\n{table(headers, rows)}\n",
        f"Test: {r['compared'][0]['test']}; Holm's correction over every comparison on this page.\n",
        f"sacreBLEU signature: `{r['sacrebleu_signature']}`.\n",
    ]


def not_scored(r: Dict) -> str:
    if r["fails"]:
        return f"not scored: the rule still fails it by update {r['end_update']:,} ({r['fails']}).\n"
    return "not scored.\n"


def anew_text(r: Dict) -> str:
    same = r["trained_anew"]
    if same["same_curve"]:
        how = "the record's to the last digit"
    elif same["largest_difference"] is None:
        how = "not the record's (no update in common)"
    else:
        how = f"not the record's (losses up to {same['largest_difference']:.3f} apart): another run of its settings"
    return (
        f"Trained again from update 0 to {r['to_update']:,}, its checkpoints gone (its validation curve up to its "
        f"plateau at {r['from_update']:,} is {how})"
    )


def command_of(r: Dict) -> str:
    run = r["name"].rsplit("-at-" if "scored_at" in r else "-to-", 1)[0]
    anew = " --anew" if "trained_anew" in r else ""
    return f"python -m fairseq_residual_tools.analysis.bible_extend --run {run} --to {r['to_update']}{anew}"


def main(argv=None):
    ours, args = parse_args(sys.argv[1:] if argv is None else argv)
    spec = planned(ours.run, args)
    data = bible_study.prepare_data(args)
    fingerprint_dir = Path(args.work) / "fingerprint"
    data["fingerprints"] = {
        s: model_fingerprint(bible_study.training_args(data["databin"], fingerprint_dir, s, args, 0))
        for s in cell(spec, args)
    }
    extend(spec, ours.to, data, args, ours.anew)
    return 0


if __name__ == "__main__":
    raise SystemExit(exit_on_user_error(main))
