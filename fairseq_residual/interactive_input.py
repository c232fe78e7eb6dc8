"""fairseq-interactive says once that its input is not UTF-8.

fairseq-interactive reads stdin with Python's own error handler: under the C locale undecodable bytes become escapes
(``surrogateescape``) that the tokeniser and BPE pass on and the dictionary maps to ``<unk>`` without a word; under
a UTF-8 locale the first one ends the run in a ``UnicodeDecodeError`` traceback. A file given by ``--input`` it opens
as strict UTF-8 under every locale: that traceback. With the plugin, stdin and the file are both read the first way
under every locale, so the same text is translated alike from either, and the first line holding such a byte is
named in one line on stderr (``NOT_UTF8``, with the file's name); the translations go on as before.

``fairseq_cli.interactive.buffered_read`` is replaced where that module is imported (under ``fairseq-interactive``
before the plugin loads) and where it runs as ``__main__`` (``python -m fairseq_cli.interactive``); the plugin does
not import it itself, since that import configures Python's root logger.
"""

import fileinput
import functools
import io
import re
import sys
from typing import Any

#: the one line, with the input ("the input", or "the input file" and its name as given), the line number and the
#: first byte UTF-8 cannot decode
NOT_UTF8 = (
    "fairseq-interactive: {input} is not UTF-8 (line {line} holds the byte 0x{byte:02x}, which UTF-8 cannot "
    "decode): such characters become <unk>; convert it first (iconv -f latin1 -t utf-8)"
)
#: what ``surrogateescape`` makes of the bytes 0x80-0xff that UTF-8 cannot decode
_ESCAPED = re.compile("[\udc80-\udcff]")
_MARK = "fairseq_residual_interactive_input"


def _saying_not_utf8(buffered_read):
    """fairseq's reader as it is (the stripped lines, in lists of ``buffer_size``), but stdin and a file alike read
    undecodable bytes as escapes and name the first once; ``buffered_read`` stays as ``__wrapped__`` for ``undo``."""

    @functools.wraps(buffered_read)
    def read(input, buffer_size):
        if input == "-" and isinstance(sys.stdin, io.TextIOWrapper):
            sys.stdin.reconfigure(errors="surrogateescape")  # nothing is read yet
        named = "the input" if input == "-" else f"the input file {input}"
        openhook = fileinput.hook_encoded("utf-8", errors="surrogateescape")  # fairseq's, without errors= (strict)
        buffer, said = [], False
        with fileinput.input(files=[input], openhook=openhook) as lines:
            for number, line in enumerate(lines, start=1):
                escaped = None if said else _ESCAPED.search(line)
                if escaped is not None:
                    byte = ord(escaped.group()) - 0xDC00
                    print(NOT_UTF8.format(input=named, line=number, byte=byte), file=sys.stderr)
                    said = True
                buffer.append(line.strip())
                if len(buffer) >= buffer_size:
                    yield buffer
                    buffer = []
        if buffer:
            yield buffer

    setattr(read, _MARK, True)
    return read


def _interactive_modules() -> list:
    """fairseq_cli.interactive where it was imported, and the ``__main__`` of ``python -m fairseq_cli.interactive``."""
    found = [sys.modules.get("fairseq_cli.interactive")]
    main = sys.modules.get("__main__")
    if getattr(getattr(main, "__spec__", None), "name", None) == "fairseq_cli.interactive":
        found.append(main)
    return [module for module in found if module is not None and hasattr(module, "buffered_read")]


def apply() -> None:
    module: Any
    for module in _interactive_modules():
        if not getattr(module.buffered_read, _MARK, False):
            module.buffered_read = _saying_not_utf8(module.buffered_read)


def undo() -> None:
    """Give ``fairseq_cli.interactive`` its own reader back (``patches.undo_all``; it is not a fixed target)."""
    module: Any
    for module in _interactive_modules():
        if getattr(module.buffered_read, _MARK, False):
            module.buffered_read = module.buffered_read.__wrapped__
