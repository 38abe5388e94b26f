"""SQuAD examples → model rows: ``[CLS] question [SEP] window [SEP]`` per passage window.

Each paragraph word is split into WordPieces (so every piece maps back to one word) and a
question becomes one or more rows, windows starting every `doc_stride` pieces. A piece
seen by several windows is scored only in the window where it has the most context on
both sides ("max context"); `Windows` records that and the piece → word map for
`squad_answers.predict_answers`. Training rows also carry the answer's start and end.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from bert_jax.tasks.squad_examples import SquadExample


@dataclasses.dataclass
class Windows:
    """What maps each model row back to its question and words (row = one window)."""

    example: np.ndarray  # [N] index into the examples
    n_tokens: np.ndarray  # [N] real (unpadded) length of the row
    token_to_word: np.ndarray  # [N, S] word index of a passage piece, -1 elsewhere
    max_context: np.ndarray  # [N, S] True where this window is the piece's best context
    questions_cut: int = 0  # questions longer than max_query_length pieces (cut, as the original)


class _Passage(NamedTuple):
    """A paragraph as WordPieces."""

    pieces: list[int]  # piece ids of the whole paragraph
    piece_word: list[int]  # per piece, the index of its word
    word_start: list[int]  # per word, the index of its first piece


def _doc_spans(n_pieces: int, max_pieces: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) windows over the passage pieces, each starting `stride` after the
    previous one, the last one reaching the end."""
    spans, start = [], 0
    while start < n_pieces:
        length = min(n_pieces - start, max_pieces)
        spans.append((start, length))
        if start + length == n_pieces:
            break
        start += min(length, stride)
    return spans


def _is_max_context(spans: Sequence[tuple[int, int]], current: int, position: int) -> bool:
    """Whether window `current` gives piece `position` its largest min(left, right) context
    (length as the tie-breaker), as the original `_check_is_max_context`."""
    best_score, best = None, None
    for i, (start, length) in enumerate(spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best = score, i
    return best == current


def _tokenize_unique(tokenizer: Any, texts: Sequence[str]) -> dict[str, list[int]]:
    unique = list(dict.fromkeys(texts))
    return dict(zip(unique, tokenizer.tokenize(unique), strict=True)) if unique else {}


def _improve_span(pieces: list[int], start: int, end: int, answer: list[int]) -> tuple[int, int]:
    """The tightest sub-span of [start, end] whose pieces equal the answer's own pieces
    (e.g. answer "1895" inside the word "(1895-1943)")."""
    for new_start in range(start, end + 1):
        for new_end in range(end, new_start - 1, -1):
            if pieces[new_start : new_end + 1] == answer:
                return new_start, new_end
    return start, end


def _passage(doc_tokens: Sequence[str], word_pieces: dict[str, list[int]]) -> _Passage:
    passage = _Passage([], [], [])
    for w, word in enumerate(doc_tokens):
        passage.word_start.append(len(passage.pieces))
        for p in word_pieces[word]:
            passage.piece_word.append(w)
            passage.pieces.append(p)
    return passage


def _answer_pieces(ex: SquadExample, passage: _Passage, answer: list[int]) -> tuple[int, int]:
    """First and last passage piece of the answer (`answer`: its own pieces)."""
    start = passage.word_start[ex.start_word]
    if ex.end_word + 1 < len(ex.doc_tokens):
        end = passage.word_start[ex.end_word + 1] - 1
    else:
        end = len(passage.pieces) - 1
    return _improve_span(passage.pieces, start, end, answer)


def _add_window(
    rows: dict[str, list[Any]],
    special: Any,
    query: list[int],
    passage: _Passage,
    spans: Sequence[tuple[int, int]],
    span_index: int,
    max_seq_length: int,
) -> None:
    """Appends the model row of window `span_index` and its `Windows` maps to `rows`."""
    start, length = spans[span_index]
    ids = [special.cls, *query, special.sep, *passage.pieces[start : start + length], special.sep]
    offset = len(query) + 2
    to_word = np.full(max_seq_length, -1, np.int32)
    to_word[offset : offset + length] = passage.piece_word[start : start + length]
    best = np.zeros(max_seq_length, bool)
    best[offset : offset + length] = [_is_max_context(spans, span_index, start + i) for i in range(length)]
    n = len(ids)
    rows["input_ids"].append(ids + [special.pad] * (max_seq_length - n))
    rows["input_mask"].append([1] * n + [0] * (max_seq_length - n))
    rows["segment_ids"].append([0] * offset + [1] * (length + 1) + [0] * (max_seq_length - n))
    rows["n_tokens"].append(n)
    rows["token_to_word"].append(to_word)
    rows["max_context"].append(best)


def _add_targets(
    rows: dict[str, list[Any]], answer: tuple[int, int] | None, span: tuple[int, int], offset: int
) -> None:
    """Appends the row positions of the answer's pieces, or [CLS] (0, 0) when the question
    is unanswerable (`answer` None) or the answer is not wholly inside the window."""
    start, length = span
    inside = answer is not None and start <= answer[0] and answer[1] < start + length
    rows["start_positions"].append(answer[0] - start + offset if inside else 0)
    rows["end_positions"].append(answer[1] - start + offset if inside else 0)


def _to_arrays(rows: dict[str, list[Any]], training: bool) -> tuple[dict[str, np.ndarray], Windows]:
    arrays = {k: np.asarray(rows[k], np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    if training:
        arrays["start_positions"] = np.asarray(rows["start_positions"], np.int32)
        arrays["end_positions"] = np.asarray(rows["end_positions"], np.int32)
    windows = Windows(
        example=np.asarray(rows["example"], np.int32),
        n_tokens=np.asarray(rows["n_tokens"], np.int32),
        token_to_word=np.stack(rows["token_to_word"]),
        max_context=np.stack(rows["max_context"]),
    )
    return arrays, windows


def featurize(
    examples: Sequence[SquadExample],
    tokenizer: Any,
    max_seq_length: int = 384,
    doc_stride: int = 128,
    max_query_length: int = 64,
    training: bool = False,
) -> tuple[dict[str, np.ndarray], Windows]:
    """Model rows for every window of every question (targets when `training`).

    A training answer outside a window (or an unanswerable question) points at [CLS]
    (position 0), as in the original.
    """
    if max_seq_length < max_query_length + 4:
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room after the question")
    special = tokenizer.special
    words = _tokenize_unique(tokenizer, [w for e in examples for w in e.doc_tokens])
    questions = _tokenize_unique(tokenizer, [e.question for e in examples])
    answers = _tokenize_unique(tokenizer, [e.answer_text for e in examples if training and e.answer_text])
    rows: dict[str, list[Any]] = collections.defaultdict(list)
    prev_doc: list[str] | None = None
    for ex_index, ex in enumerate(examples):
        if ex.doc_tokens is not prev_doc:  # questions of one paragraph share its pieces
            prev_doc = ex.doc_tokens
            passage = _passage(ex.doc_tokens, words)
        query = questions[ex.question][:max_query_length]
        answer = None
        if training and not ex.is_impossible:
            answer = _answer_pieces(ex, passage, answers[ex.answer_text])
        spans = _doc_spans(len(passage.pieces), max_seq_length - len(query) - 3, doc_stride)
        for span_index, span in enumerate(spans):
            _add_window(rows, special, query, passage, spans, span_index, max_seq_length)
            rows["example"].append(ex_index)
            if training:
                _add_targets(rows, answer, span, len(query) + 2)
    arrays, windows = _to_arrays(rows, training)
    cut = sum(len(questions[ex.question]) > max_query_length for ex in examples)
    return arrays, dataclasses.replace(windows, questions_cut=cut)
