"""SQuAD model outputs → answers: the best n-best span per question, mapped back to its words.

Candidates are the best start and end positions of each window of a question; the best
span (at most `max_answer_length` pieces, starting where its window has max context) is
projected back onto the original words (`text.final_text`). For v2.0 the question is
unanswerable when the [CLS] "null" score beats the best span by more than a threshold,
tuned on dev (`metrics.best_null_threshold`).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from bert_jax.tasks.squad_examples import SquadExample
from bert_jax.tasks.squad_windows import Windows
from bert_jax.tasks.text import final_text

# (score, row, start, end, start logit, end logit); start 0 is the null answer ([CLS]).
_Candidate = tuple[float, int, int, int, float, float]
# (score, row, start logit, end logit) of the lowest [CLS] score over a question's windows.
_Null = tuple[float, int, float, float]
_NO_NULL: _Null = (math.inf, -1, 0.0, 0.0)


def _pieces_to_text(vocab: Sequence[str], ids: Sequence[int]) -> str:
    text = " ".join(vocab[i] for i in ids).replace(" ##", "").replace("##", "")
    return " ".join(text.strip().split())


def _softmax(scores: Sequence[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


@dataclasses.dataclass(frozen=True)
class _Decoder:
    """The model outputs of all windows and the decoding options."""

    windows: Windows
    input_ids: np.ndarray
    start_logits: np.ndarray
    end_logits: np.ndarray
    vocab: Sequence[str]
    do_lower_case: bool
    version_2: bool
    n_best_size: int
    max_answer_length: int

    def window_spans(self, row: int) -> list[_Candidate]:
        """Spans of window `row` from its `n_best_size` best starts and ends that lie in the
        passage, start where the window has max context and are short enough."""
        starts, ends = self.start_logits[row], self.end_logits[row]
        best_starts = np.argsort(-starts, kind="stable")[: self.n_best_size]
        best_ends = np.argsort(-ends, kind="stable")[: self.n_best_size]
        w = self.windows
        n, to_word, max_ctx = w.n_tokens[row], w.token_to_word[row], w.max_context[row]
        spans = []
        for s in best_starts:
            if s >= n or to_word[s] < 0 or not max_ctx[s]:
                continue
            for e in best_ends:
                if e >= n or to_word[e] < 0 or e < s or e - s + 1 > self.max_answer_length:
                    continue
                sl, el = float(starts[s]), float(ends[e])
                spans.append((sl + el, row, int(s), int(e), sl, el))
        return spans

    def candidates(self, rows: Sequence[int]) -> tuple[list[_Candidate], _Null]:
        """A question's candidates over its windows `rows`, best first (v2.0: with the
        null answer of its lowest-scoring [CLS]), and that null."""
        candidates: list[_Candidate] = []
        null = _NO_NULL
        for row in rows:
            starts, ends = self.start_logits[row], self.end_logits[row]
            if self.version_2:
                score = float(starts[0]) + float(ends[0])
                if score < null[0]:
                    null = (score, row, float(starts[0]), float(ends[0]))
            candidates.extend(self.window_spans(row))
        if self.version_2 and null[1] >= 0:
            candidates.append((null[0], null[1], 0, 0, null[2], null[3]))
        candidates.sort(key=lambda c: c[0], reverse=True)
        return candidates, null

    def span_text(self, ex: SquadExample, row: int, start: int, end: int) -> str:
        """The original words of pieces [start, end] of window `row`, trimmed to the pieces."""
        to_word = self.windows.token_to_word[row]
        orig = " ".join(ex.doc_tokens[to_word[start] : to_word[end] + 1])
        pieces = _pieces_to_text(self.vocab, self.input_ids[row, start : end + 1])
        return final_text(pieces, orig, self.do_lower_case)

    def nbest(self, ex: SquadExample, candidates: Sequence[_Candidate], null: _Null) -> list[dict[str, Any]]:
        """Up to `n_best_size` distinct answer texts (v2.0: then "" if not among them), each
        with its logits and probability over the list."""
        nbest: list[dict[str, Any]] = []
        seen: set[str] = set()
        for _, row, s, e, sl, el in candidates:
            if len(nbest) >= self.n_best_size:
                break
            text = self.span_text(ex, row, s, e) if s > 0 else ""
            if text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "start_logit": sl, "end_logit": el})
        if self.version_2 and "" not in seen and null[1] >= 0:
            nbest.append({"text": "", "start_logit": null[2], "end_logit": null[3]})
        if not nbest:
            nbest.append({"text": "empty", "start_logit": 0.0, "end_logit": 0.0})
        probs = _softmax([c["start_logit"] + c["end_logit"] for c in nbest])
        for c, p in zip(nbest, probs, strict=True):
            c["probability"] = p
        return nbest


def _null_score_diff(nbest: Sequence[dict[str, Any]], null: _Null) -> tuple[float, str]:
    """(null score - best non-empty span score, that span's text) for v2.0."""
    best = next((c for c in nbest if c["text"]), {"text": "", "start_logit": 0.0, "end_logit": 0.0})
    return null[0] - best["start_logit"] - best["end_logit"], best["text"]


def predict_answers(
    examples: Sequence[SquadExample],
    windows: Windows,
    input_ids: np.ndarray,
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    vocab: Sequence[str],
    do_lower_case: bool = True,
    version_2: bool = False,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    null_score_diff_threshold: float = 0.0,
) -> tuple[dict[str, str], dict[str, float], dict[str, list[dict[str, Any]]]]:
    """(predictions, null score differences (v2.0; the ``null_odds.json``), n-best lists).

    Candidates are the `n_best_size` best start and end positions of each window; a span
    must lie in the passage, start where its window has max context, and be at most
    `max_answer_length` pieces. v2.0 answers "" when ``null score - best span score``
    exceeds `null_score_diff_threshold`.
    """
    decoder = _Decoder(
        windows,
        input_ids,
        start_logits,
        end_logits,
        vocab,
        do_lower_case,
        version_2,
        n_best_size,
        max_answer_length,
    )
    by_example: dict[int, list[int]] = collections.defaultdict(list)
    for row, ex in enumerate(windows.example):
        by_example[int(ex)].append(row)
    predictions, null_odds, nbest_out = {}, {}, {}
    for ex_index, ex in enumerate(examples):
        candidates, null = decoder.candidates(by_example.get(ex_index, []))
        nbest = nbest_out[ex.qas_id] = decoder.nbest(ex, candidates, null)
        if not version_2:
            predictions[ex.qas_id] = nbest[0]["text"]
            continue
        diff, text = _null_score_diff(nbest, null)
        null_odds[ex.qas_id] = diff
        predictions[ex.qas_id] = "" if diff > null_score_diff_threshold else text
    return predictions, null_odds, nbest_out
