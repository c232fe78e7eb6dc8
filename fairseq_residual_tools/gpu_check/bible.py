"""The paper's IWSLT model on real text in one GPU window: the check's opt-in part ``bible``.

    python -m fairseq_residual_tools.gpu_check.bible pack                  # here: gpu-bible/ from the Bible recipe
    bash scripts/gpu_check.sh --bundle gpu-bundle --only bible --out $OUT   # on the GPU node (carry gpu-bible)

``pack`` copies the Spanish-English Bible data-bin of ``data-prep/prepare-bible.sh`` and the untouched English test
verses (the references sacreBLEU scores against) into one folder with a manifest (each file's sha256), which travels
to the node as the bundle does. There the part trains the groups of ``GROUPS`` in order of value (Post-LN, Pre-LN and
ResiDual at E6D6 with warmup; the same at E12D12; Pre-LN and ResiDual at E6D6 without warmup), every run of the
groups that fit the window at once on the GPU, each to the same budget of ``EPOCHS`` epochs; a group that does not
fit is named as not run. Each run's last ``recipe.average`` epoch checkpoints are averaged, the test set decoded
(beam 5) and scored: fairseq's tokenised BLEU, and sacreBLEU of the detokenised output against the untouched
references (``-lc``: the recipe lowercases). A run the project's rule (``training_log.divergence``) fails is not
scored. The recipe is configs/'s IWSLT-14 one (``Recipe.from_configs``), adapted to the window (``adapted``).
Not resumable: the lent machine starts bare at every call, and a run's checkpoints cannot come back in $OUT.
"""

import argparse
import json
import shutil
import sys
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import DataError, exit_on_user_error
from ..files import write_json, write_lines
from ..gpu_bundle import sha256
from ..provenance import git_state
from ..runner import PLUGIN_DIR, fairseq_command
from .estimate import Estimator, Workload

ROOT = PLUGIN_DIR.parent
DEFAULT_PACK = ROOT / "gpu-bible"
DEFAULT_RECIPE_DATA = ROOT / "work" / "bible-study" / "data"
MANIFEST = "manifest.json"
REFERENCES = "test-references.txt"
DOCUMENTS = "test-documents.txt"
#: the budget of every run, in epochs of the training set (equal for all, fixed before any GPU ran it)
EPOCHS = 30
#: the window needs fewer, larger updates (an update's ~3,000-6,000 launches cost the same at any batch): 4 x the
#: recipe's 4,096 tokens, as four GPUs would give, and the warmup in updates divided by 4, so that the learning rate
#: at every count of tokens trained is the recipe's
BATCH_FACTOR = 4
#: the window needs tensor cores: fp32 (the recipe's) fits no group at the fp32 rate the H200 gave (--dry-run says so)
PRECISION = "amp"
#: the groups, in order of value: (scheme, depth index into the scale's two depths, warmup)
GROUPS: Dict[str, Tuple[Tuple[str, int, bool], ...]] = {
    "shallow": (("post", 0, True), ("pre", 0, True), ("residual", 0, True)),
    "deep": (("post", 1, True), ("pre", 1, True), ("residual", 1, True)),
    "no-warmup": (("pre", 0, False), ("residual", 0, False)),
}
#: validation (808 sentences) and one checkpoint save at each epoch's end (assumed; report.md gives the measured)
EPOCH_OVERHEAD_S = 1.0
#: decoding the 814 test verses with beam 5 on the GPU, and averaging five checkpoints (assumed)
DECODE_S = 20.0
#: the CPU path: the GPU's recipe and batch at the tiny width and depths, 2 epochs of the validation split (the
#: Bible's 808 verses: the real dictionary and test set, in minutes; its 28,286 training pairs take hours on 2 cores),
#: validated on the test split (fairseq shares one iterator between two uses of a split, which numbers epochs wrongly)
CPU_EPOCHS, CPU_TRAIN_SUBSET, CPU_VALID_SUBSET = 2, "valid", "test"


@dataclass(frozen=True)
class Recipe:
    """The paper's IWSLT-14 settings as configs/iwslt14.yaml and configs/model/residual_transformer_iwslt.yaml hold
    them."""

    embed_dim: int
    ffn_embed_dim: int
    heads: int
    dropout: float
    attention_dropout: float
    activation_dropout: float
    lr: float
    warmup_updates: int
    warmup_init_lr: float
    max_tokens: int
    label_smoothing: float
    weight_decay: float
    clip_norm: float
    average: int  # the last epoch checkpoints averaged for BLEU

    @classmethod
    def from_configs(cls, root: Path = ROOT) -> "Recipe":
        import yaml

        run = yaml.safe_load((root / "configs" / "iwslt14.yaml").read_text())
        model = yaml.safe_load((root / "configs" / "model" / "residual_transformer_iwslt.yaml").read_text())
        return cls(
            model["encoder_embed_dim"],
            model["encoder_ffn_embed_dim"],
            model["encoder_attention_heads"],
            model["dropout"],
            model["attention_dropout"],
            model["activation_dropout"],
            float(run["optimization"]["lr"][0]),
            run["lr_scheduler"]["warmup_updates"],
            float(run["lr_scheduler"]["warmup_init_lr"]),
            run["dataset"]["max_tokens"],
            run["criterion"]["label_smoothing"],
            run["optimizer"]["weight_decay"],
            run["optimization"]["clip_norm"],
            run["checkpoint"]["keep_last_epochs"],
        )

    def adapted(self, factor: int) -> "Recipe":
        """``factor`` x the tokens of an update, the warmup in updates divided by it (the same tokens before the
        peak; inverse_sqrt's decay, lr x sqrt(warmup / update), is then the same function of tokens too)."""
        return replace(self, max_tokens=self.max_tokens * factor, warmup_updates=self.warmup_updates // factor)


# ---- the data, packed here and checked on the node ----------------------------------------------------------


def pack(
    databin: Path,
    references: Path,
    src: str,
    tgt: str,
    lowercase: bool,
    out: Path,
    source: Dict,
    line_of_sample: Optional[List[int]] = None,
    documents: Optional[Path] = None,
) -> Dict:
    """``out``: the data-bin's files of the pair, the untouched test references (line ``line_of_sample[i]`` for
    sample id i, where the recipe drops or reorders test lines), the test verses' chapters (``documents``: what a
    paired bootstrap resamples) if given, and a manifest written last."""
    from fairseq.data.indexed_dataset import MMapIndexedDataset

    databin, out = Path(databin), Path(out)
    names = [f"dict.{lang}.txt" for lang in (src, tgt)]
    names += [f"{split}.{src}-{tgt}.{lang}.{ext}" for split in ("train", "valid", "test") for lang in (src, tgt)
              for ext in ("bin", "idx")]  # fmt: skip
    missing = [n for n in names if not (databin / n).is_file()]
    if missing:
        raise DataError(
            f"{databin} lacks {', '.join(missing)}: not a data-bin of {src}-{tgt} (bash data-prep/prepare-bible.sh)"
        )
    if not Path(references).is_file():
        raise DataError(f"no test references at {references}: name the untouched test text with --references")
    lines = Path(references).read_text(encoding="utf-8").splitlines()
    sentences = len(MMapIndexedDataset(str(databin / f"test.{src}-{tgt}.{tgt}")))
    if (len(lines) if line_of_sample is None else len(line_of_sample)) != sentences:
        raise DataError(
            f"{references} has {len(lines)} lines for the data-bin's {sentences} test sentences: give the test "
            "split's untouched target text"
        )
    (out / MANIFEST).unlink(missing_ok=True)  # written last: a pack stopped half-way is refused on the node
    (out / "bin").mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(databin / name, out / "bin" / name)
    write_lines(out / REFERENCES, lines)
    files = [f"bin/{n}" for n in names] + [REFERENCES]
    if documents is not None:
        shutil.copyfile(documents, out / DOCUMENTS)
        files.append(DOCUMENTS)
    record = {
        "src": src,
        "tgt": tgt,
        "lowercase": lowercase,
        "references": REFERENCES,
        "line_of_sample": line_of_sample,
        "documents": DOCUMENTS if documents is not None else None,
        "test_sentences": sentences,
        "source": source,
        "packed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": git_state(),
        "files": [{"file": f, "sha256": sha256(out / f), "bytes": (out / f).stat().st_size} for f in files],
    }
    write_json(out / MANIFEST, record)
    return record


def manifest(folder: Path) -> Dict:
    """The pack's manifest (no check of the files: ``verify``)."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise DataError(
            f"no Bible data at {folder} ({MANIFEST} missing): make it where the Bible recipe ran with python -m "
            f"fairseq_residual_tools.gpu_check.bible pack --out {folder}, and carry that folder to the GPU node"
        )
    return json.loads(path.read_text())


def verify(folder: Path) -> Dict:
    """The manifest, once every file it lists is present with its sha256."""
    record = manifest(folder)
    for entry in record["files"]:
        path = Path(folder) / entry["file"]
        if not path.is_file() or sha256(path) != entry["sha256"]:
            what = "lacks" if not path.is_file() else "has another"
            raise DataError(
                f"{folder} {what} {entry['file']} than its {MANIFEST} lists: copy the whole folder again (or pack it "
                "anew)"
            )
    return record


@lru_cache(maxsize=None)
def epoch_shape(databin: str, src: str, tgt: str, max_tokens: int, subset: str = "train") -> Tuple[int, int, int]:
    """(updates, sentences, padded length) of an epoch's batches of ``subset``, as fairseq-train makes them."""
    from fairseq import options, tasks

    argv = [databin, "--arch", "transformer", "--source-lang", src, "--target-lang", tgt]
    args = options.parse_args_and_arch(options.get_training_parser(), [*argv, "--max-tokens", str(max_tokens)])
    task = tasks.setup_task(args)
    task.load_dataset(subset)
    data = task.dataset(subset)
    batches = task.get_batch_iterator(
        data, max_tokens=max_tokens, max_positions=(1024, 1024), required_batch_size_multiple=8, seed=1
    ).frozen_batches  # fairseq-train's defaults: sentences a multiple of 8, the models' 1,024 positions
    tokens = sum(len(b) * max(max(data.src_sizes[i], data.tgt_sizes[i]) for i in b) for b in batches)
    sentences = round(sum(len(b) for b in batches) / len(batches))
    return len(batches), sentences, round(tokens / len(batches) / sentences)


# ---- the runs and their plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    scheme: str
    layers: int
    warmup: bool

    @property
    def label(self) -> str:
        return f"{self.scheme} e{self.layers}d{self.layers} {'warmup' if self.warmup else 'no-warmup'}"

    @property
    def name(self) -> str:
        return "bible-" + self.label.replace(" ", "-")


def specs(groups: Sequence[str], schemes: Sequence[str], depths: Sequence[int]) -> Dict[str, List[Spec]]:
    return {
        g: [Spec(s, depths[d], w) for s, d, w in GROUPS[g] if s in schemes]
        for g in groups
        if any(s in schemes for s, _, _ in GROUPS[g])
    }


def train_command(data: Dict, spec: Spec, recipe: Recipe, epochs: int, precision: List[str], scale, stop_s) -> List:
    """fairseq-train of ``spec`` with ``recipe``, ``epochs`` epochs, validated and saved at every epoch's end (the
    last ``recipe.average`` kept, without Adam's state), JSON logs every 10 updates. The CPU path has no time limit,
    its tiny width (``scale.width``), and trains on the validation split (``CPU_TRAIN_SUBSET``)."""
    embed, ffn, heads = scale.width or (recipe.embed_dim, recipe.ffn_embed_dim, recipe.heads)
    model = [f"--{side}-{name}" for side in ("encoder", "decoder") for name in ("embed-dim", "ffn-embed-dim")]
    sizes = [embed, ffn, embed, ffn]
    return fairseq_command(
        "train",
        data["bin"],
        *("--user-dir", PLUGIN_DIR, "--arch", "residual_transformer_iwslt_de_en", "--residual-scheme", spec.scheme),
        *("--source-lang", data["src"], "--target-lang", data["tgt"]),
        *("--encoder-layers", spec.layers, "--decoder-layers", spec.layers),
        *(arg for pair in zip(model, sizes) for arg in pair),
        *("--encoder-attention-heads", heads, "--decoder-attention-heads", heads, "--share-all-embeddings"),
        *("--dropout", recipe.dropout, "--attention-dropout", recipe.attention_dropout),
        *("--activation-dropout", recipe.activation_dropout),
        *("--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--weight-decay", recipe.weight_decay),
        *("--lr", recipe.lr, "--clip-norm", recipe.clip_norm, "--lr-scheduler", "inverse_sqrt"),
        *("--warmup-updates", recipe.warmup_updates),
        *("--warmup-init-lr", recipe.warmup_init_lr if spec.warmup else recipe.lr),
        *("--criterion", "label_smoothed_cross_entropy", "--label-smoothing", recipe.label_smoothing),
        *("--max-tokens", recipe.max_tokens, "--max-epoch", epochs, "--seed", 1, "--num-workers", 0),
        *("--save-dir", data["work"] / spec.name, "--save-interval", 1, "--keep-last-epochs", recipe.average),
        *("--no-last-checkpoints", "--no-save-optimizer-state", "--log-format", "json", "--log-interval", 10),
        *([] if scale.cpu else ["--stop-time-hours", f"{stop_s / 3600:.4f}"]),
        *(["--cpu", "--train-subset", CPU_TRAIN_SUBSET, "--valid-subset", CPU_VALID_SUBSET] if scale.cpu else []),
        *precision,
    )


def score_command(data: Dict, spec: Spec, logs: Path, average: int, cpu: bool) -> List[str]:
    return [
        sys.executable,
        *("-m", "fairseq_residual_tools.gpu_check.bible", "score", "--pack", str(data["pack"])),
        *("--save-dir", str(data["work"] / spec.name), "--log", str(logs / f"{spec.name}.log")),
        *("--out", str(logs / f"{spec.name}.score.json"), "--average", str(average), *(["--cpu"] if cpu else [])),
    ]


@dataclass
class Plan:
    """What the part trains (``groups``: name -> specs), how, and the estimate of each run and of the part."""

    recipe: Recipe
    width: Tuple[int, int, int]  # the recipe's (embed, FFN, heads), or the CPU path's tiny one
    depths: Tuple[int, int]
    train_subset: str
    epochs: int
    precision: str
    updates_per_epoch: int
    groups: Dict[str, List[Spec]]
    not_run: Dict[str, str]
    seconds_per_update: Dict[str, float]  # by run label
    train_s: Dict[str, float]  # by run label: start-up, epochs, validations and saves
    estimate_s: float  # the part: its longest training, then a scoring
    score_s: float

    def record(self) -> Dict:
        return {
            "recipe": asdict(self.recipe),
            "width": list(self.width),
            "depths": list(self.depths),
            "train_subset": self.train_subset,
            "epochs": self.epochs,
            "precision": self.precision,
            "updates_per_epoch": self.updates_per_epoch,
            "groups": {g: [s.label for s in runs] for g, runs in self.groups.items()},
            "not_run": self.not_run,
            "estimated_seconds_per_update": self.seconds_per_update,
            "estimate_s": round(self.estimate_s, 1),
        }


def describe_plan(detail: Dict) -> str:
    """The plan's recipe, budget and groups in a few lines (``Plan.record``): for --dry-run and report.md."""
    r, (embed, ffn, heads) = detail["recipe"], detail["width"]
    updates = detail["epochs"] * detail["updates_per_epoch"]
    lines = [
        f"Every run: {detail['epochs']} epochs of the {detail['train_subset']} split, {detail['updates_per_epoch']} "
        f"updates each ({updates} updates) of at most "
        f"{r['max_tokens']} tokens, {detail['precision']}; width {embed}, FFN {ffn}, {heads} heads, "
        f"dropout {r['dropout']:g} / {r['attention_dropout']:g} / {r['activation_dropout']:g}; "
        f"Adam, lr {r['lr']:g}, inverse_sqrt with {r['warmup_updates']} warmup updates from {r['warmup_init_lr']:g} "
        f"(without warmup: from {r['lr']:g}); label smoothing {r['label_smoothing']:g}; the last {r['average']} "
        "epoch checkpoints averaged, beam 5.",
        "Groups planned: "
        + ("; ".join(f"{g} ({', '.join(runs)})" for g, runs in detail["groups"].items()) or "none")
        + "".join(f". Group {g}: {why}" for g, why in detail["not_run"].items())
        + ".",
    ]
    return "\n".join(lines)


def plan(args, scale, estimator: Estimator, seconds: float) -> Plan:
    """The groups, in order, that fit ``seconds`` when all their runs share the GPU (a group that does not fit is
    skipped, a later one may), each run to ``EPOCHS`` (``CPU_EPOCHS`` on the CPU path, all groups)."""
    data = manifest(Path(args.bible))
    recipe = Recipe.from_configs().adapted(BATCH_FACTOR)
    epochs = CPU_EPOCHS if scale.cpu else EPOCHS
    subset = CPU_TRAIN_SUBSET if scale.cpu else "train"
    shape = epoch_shape(str(Path(args.bible) / "bin"), data["src"], data["tgt"], recipe.max_tokens, subset)
    updates, sentences, length = shape
    vocab = sum(1 for _ in (Path(args.bible) / "bin" / f"dict.{data['tgt']}.txt").open()) + 4  # and the specials
    wanted = specs(args.bible_groups, args.schemes, scale.claims_depths)
    start, score_s = estimator.startup(), estimator.startup() + DECODE_S
    precision = "fp32" if args.bible_precision == "fp32" else "fp16"

    def workload(spec: Spec) -> Workload:
        return Workload("residual_transformer_iwslt_de_en", spec.layers, spec.scheme, vocab, sentences, length)

    def timing(runs: List[Spec]) -> Tuple[Dict[str, float], Dict[str, float]]:
        """Seconds per update and of training, by run, when ``runs`` share the GPU from start to end (the runs that
        end first free it for the others: an upper bound)."""
        flops = sum(estimator.counts(workload(s))["flops"] for s in runs)
        per_update = {s.label: estimator.update(workload(s), precision, flops) for s in runs}
        train = {label: start + epochs * (updates * t + EPOCH_OVERHEAD_S) for label, t in per_update.items()}
        return per_update, train

    chosen: Dict[str, List[Spec]] = {}
    not_run: Dict[str, str] = {}
    for group, runs in wanted.items():
        needed = max(timing([s for g in chosen.values() for s in g] + runs)[1].values()) + score_s
        if scale.cpu or needed <= seconds:
            chosen[group] = runs
        else:
            not_run[group] = f"not run: {needed:.0f} s with the groups before it, {seconds:.0f} s left"
    per_update, train = timing([s for g in chosen.values() for s in g])
    estimate_s = max(train.values()) + score_s if train else 0.0  # no group fits: nothing runs
    width = scale.width or (recipe.embed_dim, recipe.ffn_embed_dim, recipe.heads)
    chosen_plan = (updates, chosen, not_run, per_update, train, estimate_s, score_s)
    return Plan(recipe, width, tuple(scale.claims_depths), subset, epochs, args.bible_precision, *chosen_plan)


def build_part(args, scale, estimator: Estimator, seconds: float, logs: Path):
    """The check's part: the chosen runs at once, then each one's scoring; the plan beside it (``Part.detail``)."""
    from .plan import PRECISIONS, Part, Run

    found = plan(args, scale, estimator, seconds)
    data = dict(manifest(Path(args.bible)), pack=Path(args.bible), bin=Path(args.bible) / "bin")
    data["work"] = Path(args.work) / "bible"
    stop_s = seconds - found.score_s - estimator.startup()
    runs, scoring = [], []
    for spec in (s for g in found.groups.values() for s in g):
        flags = [] if found.precision == "fp32" else PRECISIONS[found.precision]
        cmd = train_command(data, spec, found.recipe, found.epochs, flags, scale, stop_s)
        save_dir = data["work"] / spec.name
        runs.append(Run(spec.label, cmd, f"{spec.name}.log", found.train_s[spec.label], save_dir=save_dir))
        score = score_command(data, spec, logs, found.recipe.average, scale.cpu)
        scoring.append(Run(spec.label, score, f"{spec.name}.score.log", found.score_s, save_dir=save_dir))
    title = f"The paper's IWSLT model on the Bible, {found.epochs} epochs a run"
    return Part("bible", title, runs, found.estimate_s, then=scoring, detail=found.record())


# ---- on the node: a run's score, and its summary for the report ------------------------------------------------


def score(args) -> Dict:
    """``args.log``'s training judged by the rule; unless it fails, its last ``--average`` epoch checkpoints
    averaged, the test set decoded and scored against the pack's untouched references; written to ``--out`` (and
    the detokenised hypotheses beside it)."""
    from ..average_checkpoints import numbered_checkpoints, write_average
    from ..repro import evaluate, scoring
    from ..training_log import divergence, read_log

    data = verify(Path(args.pack))
    fails = divergence(read_log(args.log))
    result: Dict = {"fails": fails}
    if fails is None:
        found = numbered_checkpoints(args.save_dir, "epoch")[: args.average]
        if not found:
            raise DataError(f"{args.save_dir} holds no epoch checkpoint to average: its training saved none")
        averaged = write_average([p for p, _ in found], Path(args.save_dir) / f"average{len(found)}.pt")
        task = ["--source-lang", data["src"], "--target-lang", data["tgt"]]
        out = Path(args.save_dir) / "generate-test.out"
        gen = evaluate.generate(Path(args.pack) / "bin", averaged, args.cpu, "test", task, "@@ ", out)
        original = (Path(args.pack) / data["references"]).read_text(encoding="utf-8").splitlines()
        hypotheses = scoring.detokenize(gen.hypotheses, data["tgt"])
        references = scoring.original_references(gen, original, data.get("line_of_sample"))
        sacre, signature = scoring.reference_sacrebleu(hypotheses, references, data["lowercase"], data["tgt"])
        write_lines(Path(args.out).with_suffix(".hyp.txt"), hypotheses)
        result.update(
            epochs_averaged=sorted(n for _, n in found),
            bleu=gen.fairseq_bleu,
            bleu_detail=gen.fairseq_bleu_line,
            sacrebleu=sacre,
            sacrebleu_signature=signature,
            sentences=len(hypotheses),
            generate_command=gen.command,
        )
    write_json(Path(args.out), result)
    return result


def epochs_trained(text: str) -> int:
    """The epochs a fairseq-train log ended (its epoch summaries, ``{"epoch": N, "train_loss": ...}``)."""
    from ..training_log import json_record

    records = (json_record(line) for line in text.splitlines() if '"train_loss"' in line)
    return max((int(r["epoch"]) for r in records if r is not None and "epoch" in r), default=0)


def summarise(part, results: Dict[str, Dict], logs: Path) -> Dict:
    """The record's ``bible`` entry: the plan, and per run its outcome by the rule, epochs, validation curve, where
    the plateau rule stands, BLEU, and its measured time against the estimate."""
    from ..analysis.plateau import Plateau
    from ..training_log import outcome, seconds_per_update

    detail = dict(part.detail)
    # the study's plateau rule from update 2,000 of 4,096 tokens: the same tokens at this batch
    rule = Plateau(min_updates=2000 * 4096 // detail["recipe"]["max_tokens"])
    runs = {}
    for run in part.runs:
        result, log = results[run.label], logs / run.log
        entry: Dict = {"seconds": result.get("seconds"), "estimate_s": round(run.estimate_s, 1)}
        entry["estimated_seconds_per_update"] = round(detail["estimated_seconds_per_update"][run.label], 3)
        if "error" in result:
            entry["error"] = result["error"]
        if log.is_file():
            found: Dict = outcome(log)
            valid = found["valid_curve"]
            entry.update(
                fails=found["fails"],
                epochs=epochs_trained(log.read_text(encoding="utf-8", errors="replace")),
                updates=found["train_curve"][-1][0] if found["train_curve"] else 0,
                valid_curve=valid,
                train_curve=found["train_curve"],
                best_valid_loss=min((v for _, v in valid), default=None),
                plateau_update=rule.reached(valid),
                seconds_per_update=seconds_per_update(log),
            )
        scored = logs / f"{Path(run.log).stem}.score.json"
        if scored.is_file():
            entry.update(json.loads(scored.read_text()))
        elif "then" in result:
            entry["score_error"] = result["then"].get("error", "no score written")
        runs[run.label] = entry
    return {"bible": {**detail, "plateau_rule": rule.describe(), "runs": runs}}


def clear(part) -> None:
    """A run trains anew: its folder from an earlier check (whose epoch checkpoints the average would take) goes."""
    for run in part.runs:
        if run.save_dir is not None:
            shutil.rmtree(run.save_dir, ignore_errors=True)


# ---- the command line -----------------------------------------------------------------------------------------


def pack_from_recipe(args) -> Dict:
    """``pack`` of the Bible recipe's output folder: its summary.json names the data-bin, the pair, and the untouched
    test text with its sha256, whether the model's text was lowercased and the chapters of the verses (``test_text``;
    a recipe run before that record names the text in ``references``); ``--references`` replaces the text."""
    data = Path(args.data)
    if not (data / "summary.json").is_file():
        raise DataError(
            f"no {data / 'summary.json'}: prepare the Bible first (bash data-prep/prepare-bible.sh --out {data}), or "
            "name its output folder with --data"
        )
    summary = json.loads((data / "summary.json").read_text(encoding="utf-8"))
    translation = summary["translation"]
    src, tgt = translation["source_lang"], translation["target_lang"]
    record = summary.get("test_text") or {}
    test = next((s for s in record.get("sets", []) if s["split"] == "test"), None)
    line_of, documents, lowercase = None, None, bool(record.get("lowercase", translation["lowercase"]))
    if args.references:
        references = Path(args.references)
    elif test is not None:
        references, line_of = data / test["files"][tgt]["path"], test["line_of_sample"]
        documents = data / test["documents"] if test.get("documents") else None
        if not references.is_file() or sha256(references) != test["files"][tgt]["sha256"]:
            raise DataError(f"{references} is not the test text {data / 'summary.json'} records: prepare it again")
    elif summary.get("references", {}).get("test"):
        references = Path(summary["references"]["test"])
    else:
        raise DataError(f"{data / 'summary.json'} names no test text: give the untouched test text with --references")
    source = {"data": str(data), "data_bin_sha256": summary.get("data_bin_sha256"), "pairs": summary["pairs"]}
    out = Path(args.out)
    found = pack(data / translation["data_bin"], references, src, tgt, lowercase, out, source, line_of, documents)
    total = sum(f["bytes"] for f in found["files"]) / 2**20
    print(f"[bible] {out}: {len(found['files'])} files, {total:.1f} MiB, {found['test_sentences']} test lines")
    return found


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_residual_tools.gpu_check.bible", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("pack", help="the Bible data-bin and its untouched test references, for the GPU node")
    p.add_argument("--data", default=str(DEFAULT_RECIPE_DATA), help="the Bible recipe's output folder (summary.json)")
    p.add_argument("--references", help="the untouched test target text (default: the one summary.json names)")
    p.add_argument("--out", default=str(DEFAULT_PACK), help="the folder to carry (default gpu-bible/)")
    s = commands.add_parser("score", help="(the check runs it) average, decode and score one training")
    s.add_argument("--pack", required=True)
    s.add_argument("--save-dir", required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--average", type=int, required=True)
    s.add_argument("--cpu", action="store_true")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    return exit_on_user_error(pack_from_recipe if args.command == "pack" else score, args)


if __name__ == "__main__":
    raise SystemExit(main())
