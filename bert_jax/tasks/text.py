"""Character-level text helpers of the original BERT code that span-based tasks need.

WordPiece ids come from `bert_jax.data.tokenization`; what it cannot give is the link back to
the raw text: SQuAD maps a predicted WordPiece span to the original characters by
re-running the *basic* tokenizer (clean-up, CJK split, lower-casing, accent stripping,
punctuation split) on the original words and aligning the two strings with spaces removed
(the original ``get_final_text``). These are pure-Python re-implementations of those rules.
"""

from __future__ import annotations

import unicodedata


def is_whitespace(ch: str) -> bool:
    """Space, tab, newline, CR and Unicode space separators (the original `_is_whitespace`)."""
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_squad_whitespace(ch: str) -> bool:
    """Where the original SQuAD reader splits a paragraph into words (also U+202F)."""
    return ch in " \t\r\n" or ord(ch) == 0x202F


def _is_control(ch: str) -> bool:
    return ch not in "\t\n\r" and unicodedata.category(ch).startswith("C")


def is_punctuation(ch: str) -> bool:
    """ASCII non-alphanumerics (``$``, ``^``, ``` ` ``` too) and Unicode P* categories."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _split_punctuation(token: str) -> list[str]:
    pieces: list[list[str]] = []
    new_word = True
    for ch in token:
        if is_punctuation(ch):
            pieces.append([ch])
            new_word = True
        else:
            if new_word:
                pieces.append([])
            new_word = False
            pieces[-1].append(ch)
    return ["".join(p) for p in pieces]


def basic_tokenize(text: str, do_lower_case: bool) -> list[str]:
    """The original BasicTokenizer: tokens before WordPiece (strings, not ids)."""
    cleaned = []
    for ch in text:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or _is_control(ch):
            continue
        if is_whitespace(ch):
            cleaned.append(" ")
        elif _is_cjk(cp):
            cleaned.append(f" {ch} ")
        else:
            cleaned.append(ch)
    out: list[str] = []
    for token in "".join(cleaned).split():
        if do_lower_case:
            token = unicodedata.normalize("NFD", token.lower())
            token = "".join(ch for ch in token if unicodedata.category(ch) != "Mn")
        out.extend(_split_punctuation(token))
    return " ".join(out).split()


def _without_spaces(text: str) -> tuple[str, list[int]]:
    """`text` with spaces removed, and for each kept character its index in `text`."""
    index = [i for i, ch in enumerate(text) if ch != " "]
    return "".join(text[i] for i in index), index


def final_text(pred_text: str, orig_text: str, do_lower_case: bool) -> str:
    """Project a detokenized WordPiece answer (`pred_text`, lower-cased, punctuation split
    off) onto the original words `orig_text`, keeping their case and spacing.

    E.g. pred "steve smith" in orig "Steve Smith's" gives "Steve Smith". When the two
    strings cannot be aligned character by character (the basic tokenizer changed the
    length, e.g. by stripping accents of a multi-character form), fall back to `orig_text`
    (the original heuristic).
    """
    tok_text = " ".join(basic_tokenize(orig_text, do_lower_case))
    start = tok_text.find(pred_text)
    if start == -1:
        return orig_text
    end = start + len(pred_text) - 1
    orig_ns, orig_map = _without_spaces(orig_text)
    tok_ns, tok_map = _without_spaces(tok_text)
    if len(orig_ns) != len(tok_ns):
        return orig_text
    tok_to_ns = {s: ns for ns, s in enumerate(tok_map)}
    if start not in tok_to_ns or end not in tok_to_ns:
        return orig_text
    ns_start, ns_end = tok_to_ns[start], tok_to_ns[end]
    if ns_start >= len(orig_map) or ns_end >= len(orig_map):
        return orig_text
    return orig_text[orig_map[ns_start] : orig_map[ns_end] + 1]
