"""Data preparation: raw parallel text -> tokenised -> subwords -> fairseq data-bin, one module per recipe of
``data-prep/prepare-*.sh`` (see data-prep/README.md) and the stages they share (``pipeline``).
"""
