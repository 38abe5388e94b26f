"""Text with the mask token written in it → model rows and the masks' positions (fill-mask).

The mask is written as the tokenizer's own mask string (``[MASK]`` for a BERT vocabulary,
whatever a ``tokenizer.json`` names, e.g. ``<mask>``): each text is split at it, the pieces
between tokenized as text and the mask id put in between, so the mask is never read as
the characters ``[``, ``mask``, ``]``, whatever the tokenizer. The text before a mask loses
its trailing spaces (a byte-level BPE or SentencePiece would make them a piece of their
own; a space before a mask belongs to the word the mask stands for, as `transformers`
treats ``<mask>``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bert_jax.data.tokenization import Tokenizer


@dataclass(frozen=True)
class MaskedRows:
    """``batch``: ``input_ids``/``input_mask``/``segment_ids`` [N, S]; ``positions`` [N, P]
    the masks' token positions (P the most masks of any text; the others' extra entries 0,
    ``counts`` says how many are real); ``lengths`` each text's row length before a cut."""

    batch: dict[str, np.ndarray]
    positions: np.ndarray
    counts: np.ndarray
    lengths: np.ndarray


def mask_string(tokenizer: Tokenizer) -> str:
    """How a mask is written in the text: the vocabulary's mask token."""
    return tokenizer.vocab[tokenizer.mask_id]


def encode(
    tokenizer: Tokenizer,
    texts: list[str],
    max_seq_length: int | None = None,
    named: Callable[[int], str] = lambda i: f"text {i + 1}",
) -> MaskedRows:
    """``[CLS] text [SEP]`` rows with the mask id at each mask string, padded to
    `max_seq_length` (None: the longest row's length); a row longer is cut before its
    ``[SEP]``. Refused with ``ValueError`` naming the text (`named`: ``text 3`` by
    default, counted from 1): one without a mask, or one whose mask falls past
    `max_seq_length`."""
    marker = mask_string(tokenizer)
    parts = [t.split(marker) for t in texts]
    for i, p in enumerate(parts):
        if len(p) == 1:
            raise ValueError(f"{named(i)} has no {marker} to fill: {_shown(texts[i])}")
    flat = [piece.rstrip() if j < len(p) - 1 else piece for p in parts for j, piece in enumerate(p)]
    pieces = iter(tokenizer.tokenize(flat))
    rows, wheres = [], []
    for p in parts:
        row, where = [tokenizer.cls_id], []
        for j in range(len(p)):
            row += next(pieces)
            if j < len(p) - 1:
                where.append(len(row))
                row.append(tokenizer.mask_id)
        rows.append([*row, tokenizer.sep_id])
        wheres.append(where)
    n, width = len(texts), max_seq_length or max(map(len, rows))
    ids = np.full((n, width), tokenizer.pad_id, np.int32)
    input_mask = np.zeros((n, width), np.int32)
    positions = np.zeros((n, max(map(len, wheres))), np.int32)
    counts = np.array([len(w) for w in wheres], np.int32)
    lengths = np.array([len(r) for r in rows], np.int64)
    for i, (row, where) in enumerate(zip(rows, wheres, strict=True)):
        if where[-1] >= width - 1:
            raise ValueError(
                f"{named(i)}: its {marker} at token {where[-1] + 1} of {len(row)} is cut at "
                f"max_seq_length={width}: {_shown(texts[i])}"
            )
        if len(row) > width:
            row = [*row[: width - 1], tokenizer.sep_id]
        ids[i, : len(row)] = row
        input_mask[i, : len(row)] = 1
        positions[i, : len(where)] = where
    batch = {"input_ids": ids, "input_mask": input_mask, "segment_ids": np.zeros_like(ids)}
    return MaskedRows(batch, positions, counts, lengths)


def filled(text: str, marker: str, tokens: list[str]) -> str:
    """`text` with its masks replaced by `tokens` (one each, as `piece_text` gives them):
    a word piece that continues a word (``##ing``) joins the text before it."""
    parts = text.split(marker)
    out = parts[0]
    for token, rest in zip(tokens, parts[1:], strict=True):
        if token.startswith("##"):
            out = out.rstrip() + token[2:]
        else:
            out += token
        out += rest
    return out


def piece_text(piece: str) -> str:
    """A vocabulary piece as text: byte-level BPE's ``Ġ`` and SentencePiece's ``▁`` as a
    space before the word (stripped where the text already has one: see `filled`); a
    WordPiece continuation keeps its ``##``."""
    for space in ("Ġ", "▁"):
        if piece.startswith(space):
            return piece[len(space) :]
    return piece


def _shown(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")
