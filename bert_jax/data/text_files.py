"""Text as UTF-8, with a word about every byte that could not be decoded.

Every reader of free text (the `features` input, the pre-training corpora, the `tokenize`
input) decodes through `decode`: bytes that are not UTF-8 are replaced by U+FFFD exactly
as Python's ``errors="replace"`` does (one U+FFFD per maximal invalid sequence), and one
``warning:`` line per file (or TFDS dataset) counts the undecodable bytes, so that no text
changes silently. Clean UTF-8 takes the strict decoder only (no second pass).
"""

from __future__ import annotations

import re

_ESCAPED = re.compile("[\udc80-\udcff]")  # surrogateescape's stand-ins, one per bad byte


def decode_counted(raw: bytes) -> tuple[str, int]:
    """``(text, undecodable bytes)``: `raw` as UTF-8 with the bad bytes replaced."""
    try:
        return raw.decode("utf-8"), 0
    except UnicodeDecodeError:
        pass
    # Valid UTF-8 never decodes to a lone surrogate, so each one stands for one bad byte.
    bad = len(_ESCAPED.findall(raw.decode("utf-8", "surrogateescape")))
    return raw.decode("utf-8", "replace"), bad


def warn_replaced(name: str, count: int) -> None:
    """The one warning line for `count` replaced bytes of `name` (nothing for 0)."""
    if count:
        noun = "byte" if count == 1 else "bytes"
        print(f"warning: {name}: {count} undecodable {noun} replaced by U+FFFD", flush=True)


def decode(raw: bytes, name: str) -> str:
    """`raw` as UTF-8, undecodable bytes replaced and counted in one warning naming `name`."""
    text, bad = decode_counted(raw)
    warn_replaced(name, bad)
    return text


def read_text(path: str, start: int = 0, end: int = -1) -> str:
    """A file's bytes ``[start, end)`` (``end`` -1: to the end) as text (see `decode`); a
    UTF-8 byte-order mark at the start of the file is dropped."""
    with open(path, "rb") as f:
        f.seek(start)
        raw = f.read() if end < 0 else f.read(end - start)
    name = path if start == 0 and end < 0 else f"{path} (bytes {start}-{end if end >= 0 else 'end'})"
    text = decode(raw, name)
    return text[1:] if start == 0 and text.startswith("\ufeff") else text


def split_lines(text: str) -> list[str]:
    """Lines ended by "\\n" (or "\\r\\n") only: form feeds, U+2028, U+0085 or a lone "\\r"
    inside a line stay in it (`str.splitlines` would split there), so that line i of a
    file is always item i; a blank line is an empty string, a final newline ends the last
    line (it starts no empty one)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def read_lines(path: str) -> list[str]:
    """The lines of a text file (`read_text`, then `split_lines`)."""
    return split_lines(read_text(path))
