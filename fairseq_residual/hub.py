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
"""

import json
import unicodedata
from pathlib import Path
from typing import List, Union

from .errors import DataError


def read_translation_record(data_prep_out) -> dict:
    """``summary.json``'s ``translation`` record of a data-prep output folder."""
    summary = Path(data_prep_out) / "summary.json"
    if not summary.is_file():
        raise DataError(
            f"no {summary}: data_prep_out must be the --out folder of data-prep/prepare-*.sh "
            "(the one holding summary.json, bin/ and text/)"
        )
    record = json.loads(summary.read_text()).get("translation")
    if record is None:
        raise DataError(
            f"{summary} records no tokeniser and subword settings (written before they were recorded, "
            "or a multilingual OPUS-100 folder): delete it and run the same data-prep command again, "
            "which redoes only the summary"
        )
    return record


def _remove_non_printing(line: str) -> str:
    """``remove-non-printing-char.perl`` as data prep applies it (fairseq_residual_tools/dataprep/moses.py)."""
    return "".join(" " if unicodedata.category(c)[0] == "C" else c for c in line)


class Translator:
    """Raw text in, detokenised translations out; ``hub`` is fairseq's ``GeneratorHubInterface``."""

    def __init__(self, hub, record: dict):
        self.hub = hub
        self.record = record
        self._normalizer = None
        if record["normalize_punctuation"]:
            from sacremoses import MosesPunctNormalizer

            self._normalizer = MosesPunctNormalizer(lang=record["source_lang"], penn=False, perl_parity=True)

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

    def translate(self, text: Union[str, List[str]], beam: int = 5, **generate_kwargs) -> Union[str, List[str]]:
        """The best hypothesis for each raw line, subwords removed and detokenised."""
        lines = [text] if isinstance(text, str) else list(text)
        hypos = self.hub.generate([self.encode(line) for line in lines], beam=beam, **generate_kwargs)
        out = [self.hub.decode(h[0]["tokens"]) for h in hypos]
        return out[0] if isinstance(text, str) else out


def load_translator(checkpoint, data_prep_out, cpu: bool = True, **overrides) -> Translator:
    """Load ``checkpoint`` (a ``.pt`` file) with the dictionaries, tokeniser and subwords of ``data_prep_out``.

    ``overrides`` go to fairseq's ``from_pretrained`` (e.g. ``max_len_b=50``);
    ``cpu=False`` leaves the model where fairseq puts it (a GPU when there is one).
    """
    from .model import ResidualTransformerModel

    checkpoint, out = Path(checkpoint), Path(data_prep_out)
    if not checkpoint.is_file():
        raise DataError(f"no checkpoint {checkpoint}: give the .pt file fairseq-train wrote")
    record = read_translation_record(out)
    subword = {"bpe": record["bpe"]}
    if record["bpe"] == "subword_nmt":
        subword["bpe_codes"] = str((out / record["bpe_codes"]).resolve())
    else:
        subword["sentencepiece_model"] = str((out / record["sentencepiece_model"]).resolve())
    if record["tokenizer"] == "moses":
        subword.update(tokenizer="moses", moses_no_dash_splits=not record["moses_aggressive_dash_splits"])
    hub = ResidualTransformerModel.from_pretrained(
        str(checkpoint.resolve().parent),
        checkpoint_file=checkpoint.name,
        # an absolute path: fairseq reads a path starting with "." as relative to the checkpoint's folder
        data_name_or_path=str((out / record["data_bin"]).resolve()),
        source_lang=record["source_lang"],
        target_lang=record["target_lang"],
        **subword,
        **overrides,
    )
    if cpu:
        hub = hub.cpu()
    return Translator(hub.eval(), record)
