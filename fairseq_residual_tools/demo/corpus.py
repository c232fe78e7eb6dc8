"""A synthetic, deterministic "language pair" that needs no network.

The source language is SVO with English-like morphology; the target language has its own vocabulary and grammar,
so a model must learn more than a word lexicon:

* word order: target is SOV, adjectives follow their noun, a prepositional phrase moves before the verb and a
  sentence adverb moves to the front;
* agreement: target determiners and adjectives agree with their noun in gender (a lexical property invisible in
  the source) and number, and the target verb agrees with the subject in number and marks tense;
* a vocabulary of a few thousand inflected word forms built from syllables, so subword segmentation (BPE /
  SentencePiece) matters.

``generate_corpus(seed)`` always returns the same sentences for the same seed.
"""

import random
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Dict, List, Tuple

SOURCE_SYLLABLES = (
    "ba be bi bo bu da de di do ka ke ki ko la le li lo ma me mi mo na ne ni no pa pe pi po ra re ri ro sa se si so ta "
    "te ti to va ve vi"
).split()
TARGET_SYLLABLES = (
    "zu zo za gru gro gra fli flo fla shu sho sha kru kro kra mju mjo mja tsu tso tsa vlu vlo vla hnu hno hna dzu dzo "
    "dza pfu pfo pfa"
).split()


@dataclass(frozen=True)
class Lexicon:
    nouns: Dict[str, Tuple[str, int]]  # source stem -> (target stem, gender 0/1)
    adjectives: Dict[str, str]
    verbs: Dict[str, str]
    adverbs: Dict[str, str]
    prepositions: Dict[str, str]


def _words(rng: random.Random, syllables: List[str], count: int) -> List[str]:
    words: Dict[str, None] = {}  # distinct words of 2-4 syllables, in the order drawn
    while len(words) < count:
        words["".join(rng.choice(syllables) for _ in range(rng.choice((2, 3, 4))))] = None
    return list(words)


def build_lexicon(seed: int, nouns=700, adjectives=180, verbs=260, adverbs=40) -> Lexicon:
    rng = random.Random(seed)
    src = _words(rng, SOURCE_SYLLABLES, nouns + adjectives + verbs + adverbs)
    pairs = iter(zip(src, _words(rng, TARGET_SYLLABLES, len(src))))
    return Lexicon(
        nouns={s: (t, rng.randrange(2)) for s, t in islice(pairs, nouns)},
        adjectives=dict(islice(pairs, adjectives)),
        verbs=dict(islice(pairs, verbs)),
        adverbs=dict(pairs),
        prepositions={"with": "mit", "near": "bei", "under": "unt", "behind": "hint"},
    )


# target inflection: determiner[gender][number], adjective suffix[gender][number]
TARGET_DETERMINER = [["lo", "los"], ["la", "las"]]
TARGET_ADJ_SUFFIX = [["o", "oi"], ["a", "ai"]]
TARGET_NOUN_PLURAL = "en"
# (source, target) verb suffix[tense][number]
VERB_SUFFIX = {"present": [("s", "et"), ("", "ent")], "past": [("ed", "ot"), ("ed", "ont")]}


def _noun_phrase(rng: random.Random, lex: Lexicon):
    noun = rng.choice(list(lex.nouns))
    plural = rng.random() < 0.4
    adjs = [rng.choice(list(lex.adjectives)) for _ in range(rng.choice([0, 0, 1, 1, 2]))]
    src = ["the"] + adjs + [noun + ("s" if plural else "")]
    stem, gender = lex.nouns[noun]
    tgt = [TARGET_DETERMINER[gender][plural], stem + (TARGET_NOUN_PLURAL if plural else "")]
    tgt += [lex.adjectives[a] + TARGET_ADJ_SUFFIX[gender][plural] for a in adjs]
    return src, tgt, plural


def _pair(rng: random.Random, lex: Lexicon) -> Tuple[str, str]:
    subj_src, subj_tgt, subj_plural = _noun_phrase(rng, lex)
    verb = rng.choice(list(lex.verbs))
    src_suffix, tgt_suffix = VERB_SUFFIX[rng.choice(["present", "past"])][subj_plural]
    obj_src, obj_tgt, _ = _noun_phrase(rng, lex)
    src = subj_src + [verb + src_suffix] + obj_src
    tgt_middle = obj_tgt
    if rng.random() < 0.4:
        prep = rng.choice(list(lex.prepositions))
        pp_src, pp_tgt, _ = _noun_phrase(rng, lex)
        src += [prep] + pp_src
        tgt_middle = [lex.prepositions[prep]] + pp_tgt + tgt_middle
    tgt = subj_tgt + tgt_middle + [lex.verbs[verb] + tgt_suffix]
    if rng.random() < 0.3:
        adverb = rng.choice(list(lex.adverbs))
        src += [adverb]
        tgt = [lex.adverbs[adverb].capitalize() + ","] + tgt
    else:
        tgt[0] = tgt[0].capitalize()
    src[0] = src[0].capitalize()
    return " ".join(src) + ".", " ".join(tgt) + "."


def generate_corpus(seed: int = 1, train=6000, valid=300, test=300, **vocabulary):
    """{"train"|"valid"|"test": [(source, target), ...]}, disjoint splits. ``vocabulary`` sets the lexicon's size
    (``nouns``, ``adjectives``, ``verbs``, ``adverbs``; see ``build_lexicon``): the fewer words, the more often a
    model sees each."""
    rng, lex = random.Random(seed), build_lexicon(seed, **vocabulary)
    drawn: Dict[str, str] = {}  # source -> target: distinct sources in the order drawn
    while len(drawn) < train + valid + test:
        drawn.setdefault(*_pair(rng, lex))
    pairs = list(drawn.items())
    return {"train": pairs[:train], "valid": pairs[train : train + valid], "test": pairs[train + valid :]}


def write_corpus(out_dir, seed: int = 1, src="src", tgt="tgt", **sizes):
    """Write ``{split}.{src}`` / ``{split}.{tgt}`` raw text files (``sizes``: the split sizes and vocabulary of
    ``generate_corpus``); return the prefixes."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    prefixes = {}
    for split, pairs in generate_corpus(seed, **sizes).items():
        prefixes[split] = str(out_dir / split)
        for side, lang in ((0, src), (1, tgt)):
            Path(f"{prefixes[split]}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    return prefixes
