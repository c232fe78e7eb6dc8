"""Translate raw text with a trained checkpoint and the data-prep output it was trained on.

    from fairseq_residual.hub import load_translator
    translator = load_translator("checkpoints/checkpoint_best.pt", data_prep_out="data-bin/iwslt14.de-en")
    translator.translate("Das ist ein Haus.")            # -> detokenised English
    translator.translate(["Ein Satz.", "Noch einer."])   # -> a list

A model only translates text that went through the steps its training data went
through. Data prep (``data-prep/*.sh``) records them in ``OUT/summary.json`` under
``translation``: lowercasing, punctuation normalisation, Moses tokenisation and
its dash option, the BPE codes or SentencePiece model. ``load_translator`` reads
that record (the plugin never imports the tools package, which imports the
plugin) and hands the tokeniser and subword model to fairseq's own hub interface
(``from_pretrained``); ``Translator.encode`` runs fairseq's tokeniser and BPE with
the steps fairseq has no option for (WMT's punctuation normalisation before,
lowercasing after tokenisation, as data prep does), and the output goes through
fairseq's own subword removal and Moses detokenisation.

fairseq's ``TransformerModel.from_pretrained`` cannot load these checkpoints
unless the plugin is imported (fairseq finds model classes only in its own
package or a ``--user-dir``, and a checkpoint runs no code under torch's safe
loading): import ``fairseq_residual`` first, or pass
``user_dir=fairseq_residual.__path__[0]``.

Language models (``--arch residual_transformer_lm*``) load the same way from the output of
``data-prep/prepare-monolingual.sh`` (its ``language_model`` record):

    from fairseq_residual.hub import load_language_model
    lm = load_language_model("checkpoints/checkpoint_best.pt", data_prep_out="data-bin/mytext")
    lm.score("The house is old.")            # -> log-probabilities of its tokens, perplexity
    lm.sample("The house", max_len_b=20)     # -> a continuation, detokenised
"""

import json
import unicodedata
from pathlib import Path
from typing import List, Union

from . import quiet
from .errors import DataError

#: summary.json's record of each kind of data-prep folder -> what the folder is, the loader that reads it, and
#: the recipes that make it
KINDS = {
    "translation": ("a translation data-prep folder", "load_translator", "a translation recipe (data-prep/)"),
    "language_model": (
        "a language-model data-prep folder",
        "load_language_model",
        "data-prep/prepare-monolingual.sh",
    ),
}


def read_translation_record(data_prep_out) -> dict:
    """``summary.json``'s ``translation`` record of a data-prep output folder."""
    return _read_record(data_prep_out, "translation", "or a multilingual OPUS-100 folder")


def read_language_model_record(data_prep_out) -> dict:
    """``summary.json``'s ``language_model`` record of a ``prepare-monolingual.sh`` output folder."""
    return _read_record(data_prep_out, "language_model", "or a translation corpus: use prepare-monolingual.sh")


def _read_record(data_prep_out, key: str, or_else: str) -> dict:
    summary = Path(data_prep_out) / "summary.json"
    if not summary.is_file():
        raise DataError(
            f"no {summary}: data_prep_out must be the --out folder of data-prep/prepare-*.sh "
            "(the one holding summary.json, bin/ and text/)"
        )
    records = json.loads(summary.read_text())
    record = records.get(key)
    other = next((kind for kind in KINDS if kind != key and kind in records), None)
    if record is None and other is not None:
        what, loader, _ = KINDS[other]
        _, needs, made_by = KINDS[key]
        raise DataError(f"{data_prep_out} is {what}: {loader} reads it; {needs} needs the --out folder of {made_by}")
    if record is None:
        raise DataError(
            f"{summary} records no tokeniser and subword settings (written before they were recorded, "
            f"{or_else}): delete it and run the same data-prep command again, which redoes only the summary"
        )
    return record


def _remove_non_printing(line: str) -> str:
    """``remove-non-printing-char.perl`` as data prep applies it (fairseq_residual_tools/dataprep/moses.py)."""
    return "".join(" " if unicodedata.category(c)[0] == "C" else c for c in line)


class RawText:
    """A model behind fairseq's ``GeneratorHubInterface`` (``hub``) that reads raw text in ``lang``, through the
    steps of its data-prep ``record``."""

    def __init__(self, hub, record: dict, lang: str):
        self.hub = hub
        self.record = record
        self._normalizer = None
        if record["normalize_punctuation"]:
            from sacremoses import MosesPunctNormalizer

            self._normalizer = MosesPunctNormalizer(lang=lang, penn=False, perl_parity=True)

    def encode(self, line: str):
        """Token ids of raw ``line``, through data prep's steps in data prep's order."""
        if self._normalizer is not None:
            line = self._normalizer.normalize(line)
        if self.record["remove_non_printing"]:
            line = _remove_non_printing(line)
        line = self.hub.tokenize(line)
        if self.record["lowercase"]:  # after tokenising, as data prep does (Moses rules look at case)
            line = line.lower()
        return self.hub.binarize(self.hub.apply_bpe(line))


class Translator(RawText):
    """Raw text in, detokenised translations out."""

    def __init__(self, hub, record: dict):
        super().__init__(hub, record, record["source_lang"])

    def translate(self, text: Union[str, List[str]], beam: int = 5, **generate_kwargs) -> Union[str, List[str]]:
        """The best hypothesis for each raw line, subwords removed and detokenised."""
        lines = [text] if isinstance(text, str) else list(text)
        hypos = self.hub.generate([self.encode(line) for line in lines], beam=beam, **generate_kwargs)
        out = [self.hub.decode(h[0]["tokens"]) for h in hypos]
        return out[0] if isinstance(text, str) else out


class LanguageModel(RawText):
    """Raw text in: its tokens' log-probabilities, or a sampled continuation, detokenised."""

    def __init__(self, hub, record: dict):
        super().__init__(hub, record, record["lang"])

    def score(self, text: str) -> dict:
        """``tokens`` (the text's subword ids), ``positional_scores`` (natural-log probability of each given the
        ones before, the first given the start of sentence) and ``perplexity`` (exp of their negated mean). As
        fairseq's own hub, the end of sentence is not scored (``fairseq-eval-lm`` scores it)."""
        hypo = self.hub.generate([self.encode(text)], score_reference=True)[0][0]
        scores = hypo["positional_scores"]
        return {"tokens": hypo["tokens"], "positional_scores": scores, "perplexity": scores.mean().neg().exp().item()}

    def sample(self, prefix: str, sampling_topk: int = 10, **generate_kwargs) -> str:
        """``prefix`` continued by top-k sampling (``beam=1``; fairseq's generation options as keywords)."""
        tokens = self.encode(prefix)[:-1]  # without the end of sentence: the model continues the prefix
        kwargs = dict(beam=1, sampling=True, sampling_topk=sampling_topk, **generate_kwargs)
        return self.hub.decode(self.hub.generate([tokens], **kwargs)[0][0]["tokens"])


def load_translator(checkpoint, data_prep_out, cpu: bool = True, **overrides) -> Translator:
    """Load ``checkpoint`` (a ``.pt`` file) with the dictionaries, tokeniser and subwords of ``data_prep_out``.

    ``overrides`` go to fairseq's ``from_pretrained`` (e.g. ``max_len_b=50``);
    ``cpu=False`` leaves the model where fairseq puts it (a GPU when there is one).
    """
    from .model import ResidualTransformerModel

    out = Path(data_prep_out)
    record = read_translation_record(out)
    langs = dict(source_lang=record["source_lang"], target_lang=record["target_lang"])
    _check_task(checkpoint, "translation", "load_translator")
    hub = _from_pretrained(ResidualTransformerModel, checkpoint, out, record, cpu, **langs, **overrides)
    return Translator(hub, record)


def load_language_model(checkpoint, data_prep_out, cpu: bool = True, **overrides) -> LanguageModel:
    """Load a ``residual_transformer_lm`` ``checkpoint`` with the dictionary, tokeniser and subwords of
    ``data_prep_out`` (the ``--out`` folder of ``prepare-monolingual.sh``); as ``load_translator``."""
    from .language_model import ResidualTransformerLanguageModel

    out = Path(data_prep_out)
    record = read_language_model_record(out)
    _check_task(checkpoint, "language_modeling", "load_language_model")
    return LanguageModel(
        _from_pretrained(ResidualTransformerLanguageModel, checkpoint, out, record, cpu, **overrides), record
    )


def _check_task(checkpoint, task: str, loader: str) -> None:
    """A one-line error if ``checkpoint`` was trained for the other task than ``task`` (``task_kinds``)."""
    from .checkpoint_reading import check_checkpoint_task

    if Path(checkpoint).is_file():  # a missing one is _from_pretrained's to name
        check_checkpoint_task(str(checkpoint), task, f"{loader} needs a checkpoint trained with --task {task}")


def _from_pretrained(model_cls, checkpoint, out: Path, record: dict, cpu: bool, **overrides):
    """fairseq's hub interface (``from_pretrained``) of ``checkpoint`` with the data-bin, tokeniser and subword
    model that ``record`` names in the data-prep folder ``out``, in eval mode."""
    checkpoint = Path(checkpoint)
    if not checkpoint.is_file():
        raise DataError(f"no checkpoint {checkpoint}: give the .pt file fairseq-train wrote")
    subword = {"bpe": record["bpe"]}
    if record["bpe"] == "subword_nmt":
        subword["bpe_codes"] = str((out / record["bpe_codes"]).resolve())
    else:
        subword["sentencepiece_model"] = str((out / record["sentencepiece_model"]).resolve())
    if record["tokenizer"] == "moses":
        subword.update(tokenizer="moses", moses_no_dash_splits=not record["moses_aggressive_dash_splits"])
    with quiet.hub_loading():
        hub = model_cls.from_pretrained(
            str(checkpoint.resolve().parent),
            checkpoint_file=checkpoint.name,
            # an absolute path: fairseq reads a path starting with "." as relative to the checkpoint's folder
            data_name_or_path=str((out / record["data_bin"]).resolve()),
            **subword,
            **overrides,
        )
    if cpu:
        hub = hub.cpu()
    return hub.eval()
