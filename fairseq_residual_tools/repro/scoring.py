"""BLEU as each of the paper's tables reports it (docs/reproduce.md, "Evaluation"): ``score_iwslt``,
``score_wmt`` and ``score_opus``. Every sacreBLEU is against the test set's untouched text (data prep's record,
``data_record.untouched_test_sets``), never against fairseq-generate's ``T-`` lines, which are the references after
the recipe's tokenisation, lowercasing and subwords (and ``<unk>``).
"""

import re
from dataclasses import dataclass, field
from statistics import mean
from typing import Any, Dict, List, Optional, Sequence, Tuple

from fairseq.data import Dictionary
from fairseq.scoring.bleu import BleuConfig, Scorer
from sacrebleu.metrics import BLEU
from sacremoses import MosesDetokenizer

from ..errors import DataError
from .data_record import UntouchedText

_HYPOTHESIS = re.compile(r"^H-(\d+)\t[^\t\n]*\t?(.*)$", re.M)  # H-<id>\t<score>\t<text>
_REFERENCE = re.compile(r"^T-(\d+)\t(.*)$", re.M)
_BLEU = re.compile(r"^Generate \S+ with beam=\d+: (BLEU4? = ([0-9.]+).*)$", re.M)


@dataclass
class Generation:  # what fairseq-generate printed for one test set, in test-set order
    hypotheses: List[str]  # H- lines (post-processed: BPE removed)
    references: List[str]  # T- lines
    ids: List[int] = field(default_factory=list)  # fairseq's sample ids, ascending: a line of each list
    fairseq_bleu: Optional[float] = None  # the "Generate ... BLEU4 = x" figure, when printed
    fairseq_bleu_line: str = ""
    command: str = ""  # the fairseq-generate command line


def parse_generate(text: str) -> Generation:
    hyps = {int(i): line for i, line in _HYPOTHESIS.findall(text)}
    refs = {int(i): line for i, line in _REFERENCE.findall(text)}
    if hyps.keys() != refs.keys():
        raise ValueError(f"fairseq-generate output has {len(hyps)} hypotheses for {len(refs)} references")
    order = sorted(hyps)
    bleu = _BLEU.search(text)
    return Generation(
        hypotheses=[hyps[i] for i in order],
        references=[refs[i] for i in order],
        ids=order,
        fairseq_bleu=float(bleu[2]) if bleu else None,
        fairseq_bleu_line=bleu[1] if bleu else "",
    )


def compound_split(line: str) -> str:
    """fairseq's compound_split_bleu.sh: ``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'``."""
    return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", line)


def tokenized_bleu(hypotheses: List[str], references: List[str]) -> Tuple[float, str]:
    """BLEU-4 over whitespace tokens with fairseq's scorer, as ``fairseq-score`` computes it."""
    vocab = Dictionary()
    scorer = Scorer(BleuConfig(pad=vocab.pad(), eos=vocab.eos(), unk=vocab.unk()))
    for hyp, ref in zip(hypotheses, references, strict=True):
        scorer.add(vocab.encode_line(ref, add_if_not_exist=True), vocab.encode_line(hyp, add_if_not_exist=True))
    return round(scorer.score(order=4), 2), scorer.result_string()


def detokenize(lines: List[str], lang: str) -> List[str]:
    detok = MosesDetokenizer(lang=lang)
    return [detok.detokenize(line.split()) for line in lines]


def sacrebleu_score(hypotheses: List[str], references: List[str], tokenize: str = "13a") -> Tuple[float, str]:
    metric = BLEU(tokenize=tokenize)
    score = metric.corpus_score(hypotheses, [references])
    return round(score.score, 2), str(metric.get_signature())


def original_references(gen: Generation, original: Sequence[str], line_of: Optional[Sequence[int]] = None) -> List[str]:
    """The untouched test text's line for each of ``gen``'s hypotheses, by sample id: fairseq's sample id i is line
    ``line_of[i]`` of ``original`` (the recipe's record where it drops or reorders lines; else the identity, which
    then requires one hypothesis per line)."""
    if line_of is None:
        if gen.ids != list(range(len(original))):
            raise DataError(
                f"fairseq-generate decoded {len(gen.ids)} sentences (sample ids {_span(gen.ids)}) for a test set of "
                f"{len(original)} lines: decode the whole test subset, or give the recipe's sample-id mapping"
            )
        return list(original)
    outside = [i for i in gen.ids if not 0 <= i < len(line_of)]
    if outside:
        raise DataError(f"sample ids {_span(outside)} are not in the recipe's mapping of {len(line_of)} test lines")
    return [original[line_of[i]] for i in gen.ids]


def _span(ids: Sequence[int]) -> str:
    return f"{min(ids)}-{max(ids)}" if ids else "none"


def reference_sacrebleu(hypotheses: Sequence[str], references: Sequence[str], lowercase: bool, target_lang: str = "en"):
    """sacreBLEU of detokenised ``hypotheses`` against the untouched ``references`` (the test set's own text), as
    ``sacrebleu REF -i HYP [-lc]`` scores it: ``lowercase`` exactly when the recipe lowercased the text the model
    learnt (its signature then says ``case:lc``). Returns (score, signature)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    metric = BLEU(lowercase=lowercase, tokenize=sacrebleu_tokenizer(target_lang))
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return round(score.score, 2), str(metric.get_signature())


def sacrebleu_tokenizer(target_lang: str) -> str:
    return "zh" if target_lang.startswith("zh") else "13a"


def untouched_sacrebleu(gen: Generation, hypotheses: Sequence[str], untouched: UntouchedText, target_lang: str):
    """sacreBLEU of ``hypotheses`` (``gen``'s, in its order, as plain text) against the untouched text's line of each
    sample id, ``-lc`` exactly when the recipe lowercased: (score, signature)."""
    references = original_references(gen, untouched.lines, untouched.line_of_sample)
    return reference_sacrebleu(hypotheses, references, untouched.lowercase, target_lang)


def score_iwslt(gen: Generation, untouched: UntouchedText, target_lang: str) -> dict:
    """The paper's IWSLT-14 figure, fairseq-generate's tokenised BLEU, and sacreBLEU of the Moses-detokenised
    hypotheses against the untouched references."""
    if gen.fairseq_bleu is None:
        raise ValueError("fairseq-generate printed no BLEU line")
    sacre, signature = untouched_sacrebleu(gen, detokenize(gen.hypotheses, target_lang), untouched, target_lang)
    return {
        "bleu": gen.fairseq_bleu,
        "bleu_detail": gen.fairseq_bleu_line,
        "sacrebleu": sacre,
        "sacrebleu_signature": signature,
        "sentences": len(gen.hypotheses),
    }


def score_wmt(generations: Dict[str, Generation], untouched: Dict[str, UntouchedText], target_lang: str) -> dict:
    """Per test set (name -> generation, name -> its untouched text) and the averages over them: sacreBLEU of the
    Moses-detokenised hypotheses against the official references (the paper's figure, B2T's protocol), and
    tokenised BLEU with compound splitting (fairseq's ``compound_split_bleu.sh``) as a second figure."""
    per_set: Dict[str, Dict[str, Any]] = {}
    signature = ""  # every test set's: the same metric
    for name, gen in generations.items():
        detokenized = detokenize(gen.hypotheses, target_lang)
        sacre, signature = untouched_sacrebleu(gen, detokenized, untouched[name], target_lang)
        bleu, detail = tokenized_bleu(
            [compound_split(h) for h in gen.hypotheses], [compound_split(r) for r in gen.references]
        )
        per_set[name] = {
            "sacrebleu": sacre,
            "references": untouched[name].official or untouched[name].path,
            "bleu": bleu,
            "bleu_detail": detail,
            "sentences": len(gen.hypotheses),
        }
    return {
        "sacrebleu": round(mean(s["sacrebleu"] for s in per_set.values()), 2),
        "sacrebleu_signature": signature,
        "bleu": round(mean(s["bleu"] for s in per_set.values()), 2),
        "test_sets": per_set,
        "averaged_over": list(per_set),
    }


def score_opus(directions: Dict[str, Tuple[float, str]]) -> dict:
    """EX / XE / ALL from per-direction sacrebleu scores (``"en-de" -> (score, signature)``)."""
    scores = {d: s for d, (s, _) in directions.items()}
    ex = [s for d, s in scores.items() if d.startswith("en-")]
    xe = [s for d, s in scores.items() if d.endswith("-en")]
    return {
        "EX": round(mean(ex), 2) if ex else None,
        "XE": round(mean(xe), 2) if xe else None,
        "ALL": round(mean(scores.values()), 2),
        "directions": scores,
        "sacrebleu_signatures": sorted({sig for _, sig in directions.values()}),
    }
