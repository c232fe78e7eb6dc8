"""Data preparation: raw parallel text -> tokenised -> subwords -> fairseq data-bin."""
