"""A study's planned run reported from another study's record instead of trained: ``bible_study --reuse
RUN=RECORD``.

The paper-table study (results/paper-table) reports Post-LN, Pre-LN and ResiDual at E6D6 beside the five baselines;
the first Bible study trained those already, with fairseq's criterion where the new runs use the fused one (the same
losses within fp32 reordering). A record stands for a planned run only when it is that run under another criterion:

- the same scheme, depth, warmup and seed;
- the same fairseq-train arguments, the checkout's path and ``--criterion`` aside;
- the same model fingerprint (``fingerprint.py``: today's code computes the model it trained);
- judged by today's plateau rule and budget, it ends where it ended: a record that stops short of the depth's
  budget (or past it) is refused in one line that names the ``bible_extend`` command giving it that end.

An extension's record (``bible_extend``, OUT/extended) names the run it extends (``extends``): the recipe and
fingerprint are read from that run's record in ../runs. The reused record keeps its key, is named as the planned run,
says where it came from (``reused_from``) and with which criterion it trained; its test translations are copied
beside this study's records under that name, so the significance test reads them as any other run's.
"""

import json
import re
import shutil
from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

from ..errors import ConfigError, DataError
from ..provenance import ROOT
from .bible_report import CHAPTERS, HYPOTHESES, REFERENCES, hypotheses_file
from .study import RunSpec

#: the arguments a reused run may differ in: where the plugin was, and the loss it trained with
NOT_THE_RECIPE = (re.compile(r"--user-dir \S+"), re.compile(r"--criterion \S+"))


def run_and_record(text: str) -> Tuple[str, str]:
    """``--reuse``'s argument ``RUN=RECORD``."""
    from argparse import ArgumentTypeError

    run, _, record = text.partition("=")
    if not run or not record:
        raise ArgumentTypeError(f"{text!r}: write RUN=RECORD, e.g. pre-e6d6-warmup-seed1=results/bible-study/runs/...")
    return run, record


def recipe(train_command: str) -> str:
    """A run's fairseq-train arguments without its plugin's path and criterion."""
    for pattern in NOT_THE_RECIPE:
        train_command = pattern.sub(pattern.pattern.split(" ")[0], train_command)
    return train_command


def trained_run(record: Dict, path: Path) -> Dict:
    """The record of the run ``record`` is: itself, or for an extension the record of the run it extends."""
    if "extends" not in record:
        return record
    source = path.parent.parent / "runs" / f"{record['extends']}.json"
    if not source.is_file():
        raise DataError(f"{path} extends {record['extends']}, whose record {source} is not there")
    return json.loads(source.read_text(encoding="utf-8"))


def shown(path: Path) -> str:
    """``path`` as the report writes it: from the checkout's root where it lies inside."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def reused_record(spec: RunSpec, path: Path, train: str, fingerprint: str, judge, budgets: Dict[int, int]) -> Dict:
    """The record at ``path`` as planned run ``spec``'s, or a one-line error saying why it is not that run: ``train``
    is the plan's fairseq-train arguments for it, ``fingerprint`` today's model's, ``judge(record)`` the stop
    today's rule and ``budgets`` (by depth) give the record's curve (``bible_study.judge``)."""
    if not path.is_file():
        raise ConfigError(f"--reuse {spec.name}={path}: no such record")
    fields = ("scheme", "layers", "warmup", "seed")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        source = trained_run(record, path)
        missing = [k for k in (*fields, "end_update", "valid_curve") if k not in record]
        missing += [k for k in ("train_command", "fingerprint") if k not in source]
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataError(f"--reuse {spec.name}={path}: not a readable record ({error})") from None
    if missing:
        raise DataError(f"--reuse {spec.name}={path}: not a study's run record (no {', '.join(missing)})")
    if tuple(record[k] for k in fields) != tuple(getattr(spec, k) for k in fields):
        theirs = ", ".join(f"{k} {record[k]}" for k in fields)
        raise ConfigError(f"--reuse {spec.name}={path}: that record is another run ({theirs})")
    if recipe(source["train_command"]) != recipe(train):
        raise ConfigError(
            f"--reuse {spec.name}={path}: it trained with other fairseq-train arguments than the plan's (criterion "
            "and plugin path aside): train it in the plan instead"
        )
    if source["fingerprint"] != fingerprint:
        raise ConfigError(
            f"--reuse {spec.name}={path}: today's code builds another model for it (fingerprint {fingerprint} "
            f"against {source['fingerprint']}): train it in the plan instead"
        )
    stop = judge(record)
    if stop is None or stop["end_update"] != record["end_update"]:
        to = budgets.get(spec.layers, "UPDATE")
        raise ConfigError(
            f"--reuse {spec.name}={path}: it ends at update {record['end_update']}, not where this plan's budget "
            f"ends it; train it on (or score it there) first: python -m fairseq_residual_tools.analysis.bible_extend "
            f"--run {spec.name} --to {to}"
        )
    criterion = re.search(r"--criterion (\S+)", source["train_command"])
    assert criterion is not None  # its recipe is the plan's, which names one
    return dict(
        record,
        name=spec.name,
        **stop,
        stop_where_trained=record["stop"],
        reused_from=shown(path),
        criterion=criterion[1],
    )


def place_translations(record: Dict, path: Path, records: Path) -> None:
    """The reused run's test translations copied beside this study's ``records`` under its planned name, and the
    test verses and chapters once; another test set than the records' stops in one line."""
    source_dir = path.parent
    stem = path.name[: -len(".json")]
    translations = source_dir / f"{stem}{HYPOTHESES}"
    if record.get("fails") is None and not translations.is_file():
        raise DataError(f"--reuse {record['name']}={path}: its test translations {translations} are not there")
    records.mkdir(parents=True, exist_ok=True)
    for name in (REFERENCES, CHAPTERS):
        theirs, ours = source_dir / name, records / name
        if not theirs.is_file():
            raise DataError(f"--reuse {record['name']}={path}: {theirs} is not there to say which test set it scored")
        if ours.is_file() and ours.read_bytes() != theirs.read_bytes():
            raise DataError(f"--reuse {record['name']}={path}: scored on another test set than {records}'s runs")
        if not ours.is_file():
            shutil.copyfile(theirs, ours)
    if translations.is_file():
        lines, verses = (len(p.read_text(encoding="utf-8").splitlines()) for p in (translations, records / REFERENCES))
        if lines != verses:
            raise DataError(f"--reuse {record['name']}={path}: {translations} holds {lines} lines for {verses} verses")
        shutil.copyfile(translations, hypotheses_file(records, record))


#: a run's name (``RunSpec.name``): its depth is the number after "-e"
RUN_NAME = re.compile(r"^.+-e(\d+)d\1-(?:no)?warmup-seed\d+$")


def relevant(reuse: Sequence[Tuple[str, str]], depths: Set[int]) -> List[Tuple[str, str]]:
    """``--reuse``'s entries but those of a depth the command does not plan (one cell of another depth from
    ``@plan.args``, whose list names the shallow runs), said in a line; a name at a planned depth, or no run's name,
    stays: ``reused_runs`` refuses it if it is not a planned run."""
    aside = [(n, int(m.group(1))) for n, _ in reuse if (m := RUN_NAME.match(n)) and int(m.group(1)) not in depths]
    if aside:
        names, their = ", ".join(n for n, _ in aside), ", ".join(str(d) for d in sorted({d for _, d in aside}))
        print(f"--reuse {names}: runs of depth {their}, which this command does not plan: left aside", flush=True)
    left = {n for n, _ in aside}
    return [(n, path) for n, path in reuse if n not in left]


def reused_runs(
    specs: Sequence[RunSpec], reuse: Sequence[Tuple[str, str]], train, fingerprints, judge, budgets, records
):
    """``--reuse``'s records by planned run name (``reused_record``), their translations placed in ``records``;
    ``train(spec)`` gives the plan's fairseq-train arguments as a record writes them, ``fingerprints`` today's by
    spec."""
    planned = {s.name: s for s in specs}
    reuse = relevant(reuse, {s.layers for s in specs})
    found: Dict[str, Dict] = {}
    for name, path in reuse:
        if name not in planned:
            raise ConfigError(f"--reuse {name}: not a run of the plan; its runs: {' '.join(planned)}")
        spec = planned[name]
        record = reused_record(spec, Path(path), train(spec), fingerprints[spec], judge, budgets)
        place_translations(record, Path(path), Path(records))
        found[name] = record
    return found


def in_plan_order(results: List[Dict], specs: Sequence[RunSpec]) -> List[Dict]:
    order = {s.name: n for n, s in enumerate(specs)}
    return sorted(results, key=lambda r: order.get(r["name"], len(order)))
