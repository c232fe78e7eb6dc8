"""The shared tokenise -> subword -> binarise steps, and the ``Stages`` that run a recipe's steps.

Every step writes its outputs under temporary names and renames them when complete (``atomic_outputs``),
so an interrupted run never leaves a file that looks finished.
"""

import contextlib
import hashlib
import json
import logging
import os
import shlex
import shutil
import sys
from functools import partial
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..errors import DataError
from ..files import atomic_outputs, write_json
from .download import Checksums
from .formats import progress_bar, utf8_chunks
from .moses import TextSteps

logger = logging.getLogger(__name__)


#: the version of summary.json's fields (2: the data-bin's sha256 and the archives; 3: the test sets' untouched text)
SUMMARY_FORMAT = 3
#: the files of a data-bin that its content hash covers: fairseq's dictionaries and binarised splits
DATABIN_CONTENT = ("dict.*.txt", "*.bin", "*.idx")


def databin_sha256(databin: Path) -> str:
    """sha256 over the names, sizes and bytes of a data-bin's dictionaries and binaries (``DATABIN_CONTENT``) in name
    order: what tells two data-bins (or one before and after a change) apart."""
    digest = hashlib.sha256()
    for path in sorted({p for pattern in DATABIN_CONTENT for p in Path(databin).glob(pattern)}):
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        _add_bytes(digest, path)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    return _add_bytes(hashlib.sha256(), path).hexdigest()


def _add_bytes(digest, path: Path):
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest


class TestText(NamedTuple):
    """A test set whose untouched text a recipe keeps in ``OUT/test-text/<name>.<lang>``: what sacreBLEU scores
    against (repro/scoring.py), since the recipe's own text of it is tokenised, perhaps lowercased, and subwords."""

    split: str  # fairseq's name of it in bin/ (test, test1, ...)
    name: str
    langs: Tuple[str, str]
    prepared: Path  # the prefix of the recipe's text of it (text/), which holds as many lines, in the same order
    official: Optional[str] = None  # the sacrebleu test set whose files it is (e.g. "-t wmt14/full -l en-de")


class Stages:
    """Run named stages in order, each skipped only when its output is known to be current: its outputs exist,
    ``record_file`` (``OUT/stages.json``) holds the same options (those that change its output) and inputs
    (files the run does not write itself) for it, and no earlier stage of this run was redone, since a stage
    may read what any earlier one wrote. The first difference is logged as a warning; ``force`` redoes all.
    """

    def __init__(self, record_file: Path, force=False):
        self.record_file = Path(record_file)
        self.force = force
        self.records: Dict[str, dict] = (
            json.loads(self.record_file.read_text(encoding="utf-8")) if self.record_file.is_file() else {}
        )
        self.ran: List[str] = []
        self.skipped: List[str] = []

    def run(self, name: str, outputs: Sequence[Path], fn: Callable, options: Optional[dict] = None, inputs=()):
        """Run stage ``name`` (``fn``, which writes ``outputs``) unless it is current; see the class."""
        record = made_from(options or {}, inputs)
        reason = self._redo_reason(name, outputs, record)
        if reason is None:
            logger.info("skip  %s (done)", name)
            self.skipped.append(name)
            return
        if reason and not self.ran:
            logger.warning("redo  %s and every later stage: %s", name, reason)
        logger.info("stage %s", name)
        for p in outputs:
            Path(p).parent.mkdir(parents=True, exist_ok=True)
        fn()
        missing = [str(p) for p in outputs if not Path(p).exists()]
        assert not missing, f"stage {name} did not write {missing}"
        self.ran.append(name)
        self.records[name] = record
        self.record_file.parent.mkdir(parents=True, exist_ok=True)
        write_json(self.record_file, self.records, sort_keys=True)

    def _redo_reason(self, name, outputs, record) -> Optional[str]:
        """None when the stage can be skipped; otherwise why not ("" when it is simply not done yet)."""
        if self.force or self.ran or not all(Path(p).exists() for p in outputs):
            return ""
        before = self.records.get(name)
        if before is None:
            return f"{self.record_file} has no record of what its output was made from"
        if before == record:
            return None
        changed = []
        for kind, what in (("options", "option"), ("inputs", "input")):
            old, new = before.get(kind, {}), record[kind]
            for key in sorted(set(old) | set(new)):
                if old.get(key) != new.get(key):
                    changed.append(f"{what} {key} was {old.get(key, '(not set)')}, now {new.get(key, '(not set)')}")
        return "; ".join(changed)


def made_from(options: Dict[str, object], inputs: Sequence[Path]) -> dict:
    """A stage's record: its options, and each input file's resolved path, size and modification time."""
    stats = {str(Path(p).resolve()): Path(p).stat() for p in inputs}  # the recipe checked that they exist
    files = {path: f"{stat.st_size} bytes, mtime_ns {stat.st_mtime_ns}" for path, stat in stats.items()}
    return {"options": json.loads(json.dumps(options, default=str)), "inputs": files}


class RecipeStages(Stages):
    """A recipe's stages in its output folder ``out`` (``orig/``, ``tmp/``, ``text/``, ``bin/``),
    with the two stages that end every recipe: ``binarise`` and ``summary``."""

    def __init__(self, recipe: str, args, out):
        self.recipe, self.args, self.out = recipe, args, Path(out)
        self.orig, self.tmp, self.text, self.databin = (self.out / d for d in ("orig", "tmp", "text", "bin"))
        super().__init__(self.out / "stages.json", force=args.force)

    def options(self, *names: str, **more) -> dict:
        """The command line's values of ``names``, and ``more``: what a stage is made from."""
        return {**{name: getattr(self.args, name) for name in names}, **more}

    def binarise(self, prefixes: Dict[str, str], **options):
        """``fairseq-preprocess --joined-dictionary`` of ``prefixes`` (split -> text prefix) into ``bin/``."""
        args = self.args
        preprocess = partial(fairseq_preprocess, prefixes, args.src, args.tgt, self.databin, args.workers)
        self.run("binarise", [self.databin / "preprocess.done"], preprocess, self.options("src", "tgt", **options))

    def summary(self, pairs: Callable[[], dict], **fields):
        """``summary.json``: the recipe, ``pairs()`` per split (``lines`` in place of ``pairs`` when ``fields`` has
        ``lines=True``: monolingual text), ``fields``, the data-bin with its content's sha256, the release archives
        read (name -> the checksum they were verified against) and every option."""

        counted = "lines" if fields.pop("lines", False) else "pairs"

        def write():
            info = {"recipe": self.recipe, counted: pairs(), **fields, "data_bin": str(self.databin)}
            info.update(data_bin_sha256=databin_sha256(self.databin), archives=self.archives())
            write_json(self.out / "summary.json", {**info, "options": vars(self.args)})

        # SUMMARY_FORMAT: a summary.json written before its fields changed is written again
        self.run("summary", [self.out / "summary.json"], write, options={**vars(self.args), "format": SUMMARY_FORMAT})

    def test_text_path(self, name: str, lang: str) -> Path:
        return self.out / "test-text" / f"{name}.{lang}"

    def test_text(self, sets: Sequence[TestText], lowercase: bool) -> dict:
        """``summary.json``'s ``test_text`` record: each of ``sets`` with its fairseq split, its untouched text's files
        (relative to the output folder) with their sha256 and line count, and whether the recipe lowercases the text
        the model learns (sacreBLEU then scores with ``-lc``). Sample id i of a split is line i of its text
        (``line_of_sample`` null): these recipes neither drop nor reorder test lines. A text whose line count is not
        the prepared text's stops the recipe: it would pair hypotheses with other sentences' references."""
        record = []
        for test in sets:
            files = {}
            for lang in test.langs:
                path, prepared = self.test_text_path(test.name, lang), Path(f"{test.prepared}.{lang}")
                lines, expected = count_lines(path), count_lines(prepared)
                if lines != expected:
                    raise DataError(
                        f"{path} has {lines} lines, the prepared {prepared} {expected}: the release's {test.name} is "
                        "not read as the recipe expects"
                    )
                files[lang] = {"path": str(path.relative_to(self.out)), "sha256": file_sha256(path), "lines": lines}
            official = {"sacrebleu": test.official} if test.official else {}
            record.append({"split": test.split, "name": test.name, "files": files, "line_of_sample": None, **official})
        return {"lowercase": lowercase, "sets": record}

    def archives(self) -> Dict[str, Optional[str]]:
        """The release archives the extract stages read -> the checksum the download was verified against (or pinned
        with, ``--record-checksum``), from the checksums file the run used."""
        names = sorted(r["options"]["archive"] for r in self.records.values() if "archive" in r["options"])
        if not names:
            return {}
        checksums = Checksums(self.args.checksums)
        return {name: checksums.archive(name).sha256 or checksums.archive(name).md5 for name in names}

    def text_steps(self, steps: TextSteps, bpe: str, model: Path) -> dict:
        """What raw text goes through before the model (``steps``, then fairseq's ``--bpe`` with the file
        ``model``, relative to the output folder): the part of the ``translation`` and ``language_model`` records
        that fairseq_residual.hub reads."""
        model_key = {"subword_nmt": "bpe_codes", "sentencepiece": "sentencepiece_model"}[bpe]
        moses = steps.tokenize
        return {
            "data_bin": "bin",
            "lowercase": steps.lowercase,
            "normalize_punctuation": steps.normalize_punctuation,
            "remove_non_printing": steps.remove_non_printing,
            "tokenizer": "moses" if moses else None,
            "moses_aggressive_dash_splits": steps.aggressive_dash_splits if moses else None,
            "bpe": bpe,
            model_key: str(Path(model).relative_to(self.out)),
        }

    def tokenizer_flags(self, steps: TextSteps, bpe: str, model: Path) -> List[str]:
        """fairseq's tokenizer and ``--bpe`` flags for raw text through ``steps`` and ``model``."""
        model_key = {"subword_nmt": "bpe_codes", "sentencepiece": "sentencepiece_model"}[bpe]
        flags: List[str] = []
        if steps.tokenize:
            # fairseq's moses tokenizer splits dashes unless told not to; tokenizer.perl only with -a
            flags += ["--tokenizer", "moses"] + ([] if steps.aggressive_dash_splits else ["--moses-no-dash-splits"])
        return flags + ["--bpe", bpe, "--" + model_key.replace("_", "-"), str(Path(model).resolve())]

    def language_model(self, steps: TextSteps, bpe: str, model: Path) -> dict:
        """``summary.json``'s ``language_model`` record, read by ``fairseq_residual.hub.load_language_model``:
        ``text_steps``, the language, and the flags ``fairseq-eval-lm`` needs besides the data-bin."""
        return {
            "lang": steps.lang,
            **self.text_steps(steps, bpe, model),
            "fairseq_eval_lm_flags": shlex.join(
                ["--task", "language_modeling", *self.tokenizer_flags(steps, bpe, model)]
            ),
        }

    def translation(self, steps: TextSteps, bpe: str, model: Path) -> dict:
        """``summary.json``'s ``translation`` record, read by ``fairseq_residual.hub.load_translator``: what raw
        source text goes through (``steps``, then fairseq's ``--bpe`` ``subword_nmt`` or ``sentencepiece`` with
        the file ``model``), and the same as ``fairseq-interactive`` flags. Paths are relative to the output
        folder, except in the flags."""
        flags = [
            "--source-lang",
            self.args.src,
            "--target-lang",
            self.args.tgt,
            *self.tokenizer_flags(steps, bpe, model),
        ]
        return {
            "source_lang": self.args.src,
            "target_lang": self.args.tgt,
            **self.text_steps(steps, bpe, model),
            # fairseq-interactive lowercases nothing: with "lowercase", lowercase the input first
            "fairseq_interactive_flags": shlex.join(flags),
        }


def concatenate(inputs: Sequence[Path], out: Path):
    """``cat inputs > out``, atomically."""
    with atomic_outputs([out]) as (tmp,), open(tmp, "wb") as g:
        for p in inputs:
            with open(p, "rb") as f:
                shutil.copyfileobj(f, g)


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def same_length(paths: Sequence[Path]) -> int:
    """The line count the files ``paths`` share."""
    counts = {str(p): count_lines(p) for p in paths}
    if len(set(counts.values())) != 1:
        listed = ", ".join(f"{p} has {n} lines" for p, n in counts.items())
        raise DataError(f"line counts differ: {listed}; the sides must be aligned line by line")
    return next(iter(counts.values()))


def check_parallel(prefix: str, src: str, tgt: str) -> int:
    """Both sides exist, are non-empty and have the same number of lines."""
    paths = [Path(f"{prefix}.{lang}") for lang in (src, tgt)]
    for path in paths:
        if not path.is_file():
            raise DataError(f"missing file {path}: expected parallel text {prefix}.{{{src},{tgt}}}")
    pairs = same_length(paths)
    if pairs == 0:
        raise DataError(f"empty corpus: {paths[0]} has no lines")
    return pairs


def split_every(inp: Path, every: int, kept: Path, taken: Path):
    """awk 'NR%every==0' -> taken, the other lines -> kept."""
    with (
        atomic_outputs([kept, taken]) as (tk, tt),
        open(inp, encoding="utf-8") as f,
        open(tk, "w", encoding="utf-8") as k,
        open(tt, "w", encoding="utf-8") as t,
    ):
        for n, line in enumerate(f, start=1):
            (t if n % every == 0 else k).write(line)


class _Without:
    """``stream``, less the writes that begin with ``start`` (subword-nmt writes each of its lines at once)."""

    def __init__(self, stream, start: str):
        self.stream, self.start = stream, start

    def write(self, text: str) -> int:
        return len(text) if text.startswith(self.start) else self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def learn_joint_bpe(inputs: List[Path], codes: Path, merges: int, workers=1):
    """Joint BPE (subword-nmt ``learn_bpe.py -s merges``) learned on the concatenation of ``inputs``, its
    progress on the project's bar (subword-nmt's own redraws its line up to 10 times a second, into logs too).
    A text with fewer merges than asked for (no other pair seen twice) is said in one line, in place of
    subword-nmt's "no pair has frequency >= 2. Stopping"."""
    from subword_nmt import learn_bpe as subword_nmt_learn_bpe

    subword_nmt_learn_bpe.tqdm = lambda merges_range: progress_bar(codes.name, unit="merges", iterable=merges_range)

    # one file holding every input (subword-nmt's parallel word count reads a named file)
    joined = Path(f"{codes}.input.tmp{os.getpid()}")
    try:
        concatenate(inputs, joined)
        with (
            atomic_outputs([codes]) as (tmp,),
            open(joined, encoding="utf-8") as f,
            open(tmp, "w", encoding="utf-8") as g,
        ):
            with contextlib.redirect_stderr(_Without(sys.stderr, "no pair has frequency >= ")):
                subword_nmt_learn_bpe.learn_bpe(f, g, merges, min_frequency=2, total_symbols=False, num_workers=workers)
    finally:
        joined.unlink(missing_ok=True)
    with open(codes, encoding="utf-8") as c:
        learned = sum(1 for line in c if not line.startswith("#version"))
    if learned < merges:
        logger.warning(
            f"{codes.name}: {learned} codes learned, fewer than the {merges} merges asked for (--bpe-merges): no "
            "other pair of symbols occurs twice in the text"
        )


def apply_bpe(codes: Path, inp: Path, out: Path, workers=1):
    """subword-nmt ``apply_bpe.py -c codes`` (``@@ `` marks a split inside a word)."""
    from subword_nmt.apply_bpe import BPE

    with open(codes, encoding="utf-8") as c:
        bpe = BPE(c)
    with atomic_outputs([out]) as (tmp,), open(tmp, "w", encoding="utf-8") as g:
        bpe.process_lines(str(inp), g, num_workers=workers)


def train_sentencepiece(
    texts: List[Path], model_prefix: Path, vocab_size: int, model_type="unigram", character_coverage=0.9995, workers=1
):
    """A SentencePiece model ``<model_prefix>.model`` / ``.vocab`` trained on the lines of ``texts``."""
    import sentencepiece as spm

    tmp_prefix = Path(f"{model_prefix}.tmp{os.getpid()}")
    with atomic_outputs([Path(f"{model_prefix}.model"), Path(f"{model_prefix}.vocab")]) as tmp:
        try:
            spm.SentencePieceTrainer.train(
                input=[str(t) for t in texts],
                model_prefix=str(tmp_prefix),
                vocab_size=vocab_size,
                model_type=model_type,
                character_coverage=character_coverage,
                num_threads=workers,
                minloglevel=2,
            )
        except RuntimeError as e:
            raise DataError(f"SentencePiece training on {', '.join(map(str, texts))} failed: {e}") from None
        os.replace(f"{tmp_prefix}.model", tmp[0])
        os.replace(f"{tmp_prefix}.vocab", tmp[1])


def apply_sentencepiece(model: Path, inp: Path, out: Path, workers=1, quiet=True):
    """Each line as space-separated pieces (decode: join, then ``▁`` -> space)."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(model))
    progress = progress_bar(Path(out).name, quiet=quiet)
    with progress, atomic_outputs([out]) as (tmp,), open(tmp, "w", encoding="utf-8") as g:
        for chunk in utf8_chunks(inp, 10000):
            pieces = sp.encode([line.rstrip("\n") for line in chunk], out_type=str, num_threads=workers)
            g.writelines(" ".join(p) + "\n" for p in pieces)
            progress.update(len(chunk))


def sentencepiece_dictionary(vocab: Path, out: Path):
    """fairseq's ``dict.txt`` from a SentencePiece ``.vocab`` (fairseq adds its own specials)."""
    specials = {"<unk>", "<s>", "</s>", "<pad>"}
    with atomic_outputs([out]) as (tmp,), open(vocab, encoding="utf-8") as f, open(tmp, "w", encoding="utf-8") as g:
        for line in f:
            piece = line.split("\t")[0]
            if piece not in specials:
                g.write(f"{piece} 1\n")


def run_fairseq_preprocess(prefixes: Dict[str, str], src: str, tgt: str, destdir: Path, workers: int, *flags: str):
    """``fairseq-preprocess`` of ``prefixes`` (split -> text prefix) in this process (one interpreter
    start-up for many calls); returns its arguments."""
    from fairseq import options
    from fairseq_cli import preprocess

    argv = ["--source-lang", src, "--target-lang", tgt, "--destdir", str(destdir), "--workers", str(workers)]
    for split, prefix in prefixes.items():
        argv += [f"--{split}pref", prefix]
    argv += flags
    logger.info("fairseq-preprocess %s", " ".join(argv))
    preprocess.main(options.get_preprocessing_parser().parse_args(argv))
    return argv


def fairseq_preprocess(prefixes: Dict[str, str], src: str, tgt: str, destdir: Path, workers=1):
    """Binarise with ``fairseq-preprocess --joined-dictionary``; ``destdir`` appears only when complete.
    ``prefixes["test"]`` may list several comma-separated prefixes: fairseq names them ``test``, ``test1``, ..."""
    with atomic_outputs([destdir]) as (tmp,):
        argv = run_fairseq_preprocess(prefixes, src, tgt, tmp, workers, "--joined-dictionary")
        (tmp / "preprocess.done").write_text("fairseq-preprocess " + " ".join(argv) + "\n")


def fairseq_preprocess_monolingual(prefixes: Dict[str, str], destdir: Path, workers=1):
    """Binarise one language with ``fairseq-preprocess --only-source`` (``dict.txt``, ``train.bin`` ...: the files
    fairseq's language_modeling task reads); ``destdir`` appears only when complete."""
    from fairseq import options
    from fairseq_cli import preprocess

    with atomic_outputs([destdir]) as (tmp,):
        argv = ["--only-source", "--destdir", str(tmp), "--workers", str(workers)]
        for split, prefix in prefixes.items():
            argv += [f"--{split}pref", prefix]
        logger.info("fairseq-preprocess %s", " ".join(argv))
        preprocess.main(options.get_preprocessing_parser().parse_args(argv))
        (tmp / "preprocess.done").write_text("fairseq-preprocess " + " ".join(argv) + "\n")
