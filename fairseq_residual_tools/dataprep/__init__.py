"""Data preparation: raw parallel text -> tokenised -> subwords -> fairseq data-bin.

``pipeline`` holds the shared stages; ``iwslt14``, ``wmt14``, ``opus100`` and
``custom`` are the recipes behind ``data-prep/prepare-*.sh`` (see data-prep/README.md);
``download`` fetches and verifies the release archives listed in ``checksums.json``.
"""
