"""BLEU as each of the paper's tables reports it (docs/reproduce.md, "Evaluation"): ``score_iwslt``,
``score_wmt`` and ``score_opus``; IWSLT-14 and WMT'14 add SacreBLEU on Moses-detokenised text.
"""

import re
from dataclasses import dataclass
from statistics import mean
from typing import Any, Dict, List, Optional, Tuple

from fairseq.data import Dictionary
from fairseq.scoring.bleu import BleuConfig, Scorer
from sacrebleu.metrics import BLEU
from sacremoses import MosesDetokenizer

_HYPOTHESIS = re.compile(r"^H-(\d+)\t[^\t\n]*\t?(.*)$", re.M)  # H-<id>\t<score>\t<text>
_REFERENCE = re.compile(r"^T-(\d+)\t(.*)$", re.M)
_BLEU = re.compile(r"^Generate \S+ with beam=\d+: (BLEU4? = ([0-9.]+).*)$", re.M)


@dataclass
class Generation:  # what fairseq-generate printed for one test set, in test-set order
    hypotheses: List[str]  # H- lines (post-processed: BPE removed)
    references: List[str]  # T- lines
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


def detokenized_sacrebleu(gen: Generation, lang: str) -> Tuple[float, str]:
    """SacreBLEU of Moses-detokenised hypotheses against Moses-detokenised references."""
    return sacrebleu_score(detokenize(gen.hypotheses, lang), detokenize(gen.references, lang))


def sacrebleu_tokenizer(target_lang: str) -> str:
    return "zh" if target_lang.startswith("zh") else "13a"


def score_iwslt(gen: Generation, target_lang: str) -> dict:
    if gen.fairseq_bleu is None:
        raise ValueError("fairseq-generate printed no BLEU line")
    sacre, signature = detokenized_sacrebleu(gen, target_lang)
    return {
        "bleu": gen.fairseq_bleu,
        "bleu_detail": gen.fairseq_bleu_line,
        "sacrebleu": sacre,
        "sacrebleu_signature": signature,
        "sentences": len(gen.hypotheses),
    }


def score_wmt(generations: Dict[str, Generation], target_lang: str) -> dict:
    """Per test set (name -> generation) and the averages over them."""
    per_set: Dict[str, Dict[str, Any]] = {}
    for name, gen in generations.items():
        bleu, detail = tokenized_bleu(
            [compound_split(h) for h in gen.hypotheses], [compound_split(r) for r in gen.references]
        )
        sacre, signature = detokenized_sacrebleu(gen, target_lang)
        per_set[name] = {"bleu": bleu, "bleu_detail": detail, "sacrebleu": sacre, "sentences": len(gen.hypotheses)}
    return {
        "bleu": round(mean(s["bleu"] for s in per_set.values()), 2),
        "sacrebleu": round(mean(s["sacrebleu"] for s in per_set.values()), 2),
        "sacrebleu_signature": signature,
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
