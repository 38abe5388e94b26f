"""SQuAD v1.1 / v2.0 (paper §4.2, §4.3): official JSON → document-stride windows → spans.

Reading follows the original ``run_squad.py``: a paragraph is split into words on
whitespace, each word into WordPieces (so every piece maps back to one word), and a
question becomes one or more ``[CLS] question [SEP] window [SEP]`` rows, windows starting
every `doc_stride` pieces. A piece seen by several windows is scored only in the window
where it has the most context on both sides ("max context"). Predictions are the best
n-best span (at most `max_answer_length` pieces) projected back onto the original words
(`text.final_text`); for v2.0 the question is unanswerable when the [CLS] "null" score
beats the best span by more than a threshold, tuned on dev (`metrics.best_null_threshold`).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from bert_jax import metrics
from bert_jax.tasks import Split, Task, subset
from bert_jax.tasks.text import final_text, is_squad_whitespace


@dataclasses.dataclass(frozen=True)
class SquadExample:
    qas_id: str
    question: str
    doc_tokens: list[str]  # the paragraph's whitespace-separated words
    answer_text: str  # the first answer ("" when unanswerable)
    start_word: int  # word index of the first answer's start, -1 when none
    end_word: int
    is_impossible: bool


def split_words(context: str) -> tuple[list[str], list[int]]:
    """Whitespace words of a paragraph and, per character, the index of its word."""
    words: list[str] = []
    char_to_word: list[int] = []
    new_word = True
    for ch in context:
        if is_squad_whitespace(ch):
            new_word = True
        else:
            if new_word:
                words.append(ch)
            else:
                words[-1] += ch
            new_word = False
        char_to_word.append(len(words) - 1)
    return words, char_to_word


def load_json(path: str) -> dict[str, Any]:
    """An official SQuAD JSON file (``{"version": ..., "data": [articles]}``)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"SQuAD file {path} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise ValueError(f"{path}: not a SQuAD file (expected an object with a 'data' list)")
    return doc


def _check_answer(path: str, qid: str, context: str, answer: Any) -> tuple[str, int]:
    if not isinstance(answer, dict) or "text" not in answer or "answer_start" not in answer:
        raise ValueError(f"{path}: question {qid}: an answer lacks 'text' or 'answer_start'")
    text, start = answer["text"], answer["answer_start"]
    if not isinstance(start, int) or context[start : start + len(text)] != text:
        found = context[start : start + len(text)] if isinstance(start, int) else start
        raise ValueError(
            f"{path}: question {qid}: answer {text!r} does not match the context at "
            f"answer_start {start} (the context there reads {found!r})"
        )
    return text, start


def read_examples(path: str, version_2: bool) -> tuple[list[dict[str, Any]], list[SquadExample]]:
    """(raw ``data`` for scoring, one `SquadExample` per question); every answer is checked
    against its paragraph, so a wrong `answer_start` fails here naming file and question."""
    data = load_json(path)["data"]
    examples = []
    for article in data:
        for paragraph in article.get("paragraphs", []):
            context = paragraph.get("context")
            if not isinstance(context, str):
                raise ValueError(f"{path}: a paragraph of {article.get('title')!r} has no 'context'")
            words, char_to_word = split_words(context)
            for qa in paragraph.get("qas", []):
                qid = qa.get("id")
                if not isinstance(qid, str) or not isinstance(qa.get("question"), str):
                    raise ValueError(f"{path}: question {qid!r} lacks an 'id' or a 'question'")
                if not isinstance(qa.get("answers"), list):
                    raise ValueError(f"{path}: question {qid}: no 'answers' list")
                impossible = bool(qa.get("is_impossible", False))
                if impossible and not version_2:
                    raise ValueError(
                        f"{path}: question {qid} is unanswerable (is_impossible): a SQuAD 2.0 "
                        "file; use version 2.0"
                    )
                checked = [_check_answer(path, qid, context, a) for a in qa["answers"]]
                for a in qa.get("plausible_answers", []):
                    _check_answer(path, qid, context, a)
                if impossible or not checked:
                    if not version_2:
                        raise ValueError(f"{path}: question {qid} has no answer (SQuAD 1.1)")
                    examples.append(SquadExample(qid, qa["question"], words, "", -1, -1, True))
                    continue
                text, start = checked[0]
                examples.append(
                    SquadExample(
                        qid,
                        qa["question"],
                        words,
                        text,
                        char_to_word[start],
                        char_to_word[start + len(text) - 1],
                        False,
                    )
                )
    if not examples:
        raise ValueError(f"{path}: no questions")
    return data, examples


def restrict(data: list[dict[str, Any]], qids: set[str]) -> list[dict[str, Any]]:
    """The ``data`` list with only the questions in `qids` (for scoring a subset)."""
    out = []
    for article in data:
        paragraphs = [
            {**p, "qas": [qa for qa in p["qas"] if qa["id"] in qids]} for p in article.get("paragraphs", [])
        ]
        out.append({**article, "paragraphs": [p for p in paragraphs if p["qas"]]})
    return out


@dataclasses.dataclass
class Windows:
    """What maps each model row back to its question and words (row = one window)."""

    example: np.ndarray  # [N] index into the examples
    n_tokens: np.ndarray  # [N] real (unpadded) length of the row
    token_to_word: np.ndarray  # [N, S] word index of a passage piece, -1 elsewhere
    max_context: np.ndarray  # [N, S] True where this window is the piece's best context


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
            piece_word, pieces, word_start = [], [], []
            for w, word in enumerate(ex.doc_tokens):
                word_start.append(len(pieces))
                for p in words[word]:
                    piece_word.append(w)
                    pieces.append(p)
        query = questions[ex.question][:max_query_length]
        piece_start = piece_end = -1
        if training and not ex.is_impossible:
            piece_start = word_start[ex.start_word]
            last = ex.end_word + 1 < len(ex.doc_tokens)
            piece_end = word_start[ex.end_word + 1] - 1 if last else len(pieces) - 1
            piece_start, piece_end = _improve_span(pieces, piece_start, piece_end, answers[ex.answer_text])
        spans = _doc_spans(len(pieces), max_seq_length - len(query) - 3, doc_stride)
        for span_index, (start, length) in enumerate(spans):
            ids = [special.cls, *query, special.sep, *pieces[start : start + length], special.sep]
            offset = len(query) + 2
            to_word = np.full(max_seq_length, -1, np.int32)
            to_word[offset : offset + length] = piece_word[start : start + length]
            best = np.zeros(max_seq_length, bool)
            best[offset : offset + length] = [
                _is_max_context(spans, span_index, start + i) for i in range(length)
            ]
            n = len(ids)
            rows["input_ids"].append(ids + [special.pad] * (max_seq_length - n))
            rows["input_mask"].append([1] * n + [0] * (max_seq_length - n))
            rows["segment_ids"].append([0] * offset + [1] * (length + 1) + [0] * (max_seq_length - n))
            rows["example"].append(ex_index)
            rows["n_tokens"].append(n)
            rows["token_to_word"].append(to_word)
            rows["max_context"].append(best)
            if training:
                inside = not ex.is_impossible and start <= piece_start and piece_end < start + length
                rows["start_positions"].append(piece_start - start + offset if inside else 0)
                rows["end_positions"].append(piece_end - start + offset if inside else 0)
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
    by_example: dict[int, list[int]] = collections.defaultdict(list)
    for row, ex in enumerate(windows.example):
        by_example[int(ex)].append(row)
    predictions, null_odds, nbest_out = {}, {}, {}
    for ex_index, ex in enumerate(examples):
        candidates = []  # (score, row, start, end, start_logit, end_logit)
        null = (math.inf, -1, 0.0, 0.0)  # (score, row, start logit, end logit)
        for row in by_example.get(ex_index, []):
            starts, ends = start_logits[row], end_logits[row]
            if version_2:
                score = float(starts[0]) + float(ends[0])
                if score < null[0]:
                    null = (score, row, float(starts[0]), float(ends[0]))
            best_starts = np.argsort(-starts, kind="stable")[:n_best_size]
            best_ends = np.argsort(-ends, kind="stable")[:n_best_size]
            n, to_word, max_ctx = windows.n_tokens[row], windows.token_to_word[row], windows.max_context[row]
            for s in best_starts:
                if s >= n or to_word[s] < 0 or not max_ctx[s]:
                    continue
                for e in best_ends:
                    if e >= n or to_word[e] < 0 or e < s or e - s + 1 > max_answer_length:
                        continue
                    sl, el = float(starts[s]), float(ends[e])
                    candidates.append((sl + el, row, int(s), int(e), sl, el))
        if version_2 and null[1] >= 0:
            candidates.append((null[0], null[1], 0, 0, null[2], null[3]))
        candidates.sort(key=lambda c: c[0], reverse=True)
        nbest: list[dict[str, Any]] = []
        seen: set[str] = set()
        for _, row, s, e, sl, el in candidates:
            if len(nbest) >= n_best_size:
                break
            if s > 0:
                to_word = windows.token_to_word[row]
                orig = " ".join(ex.doc_tokens[to_word[s] : to_word[e] + 1])
                text = final_text(_pieces_to_text(vocab, input_ids[row, s : e + 1]), orig, do_lower_case)
            else:
                text = ""
            if text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "start_logit": sl, "end_logit": el})
        if version_2 and "" not in seen and null[1] >= 0:
            nbest.append({"text": "", "start_logit": null[2], "end_logit": null[3]})
        if not nbest:
            nbest.append({"text": "empty", "start_logit": 0.0, "end_logit": 0.0})
        probs = _softmax([c["start_logit"] + c["end_logit"] for c in nbest])
        for c, p in zip(nbest, probs, strict=True):
            c["probability"] = p
        nbest_out[ex.qas_id] = nbest
        if not version_2:
            predictions[ex.qas_id] = nbest[0]["text"]
            continue
        best = next((c for c in nbest if c["text"]), {"text": "", "start_logit": 0.0, "end_logit": 0.0})
        diff = null[0] - best["start_logit"] - best["end_logit"]
        null_odds[ex.qas_id] = diff
        predictions[ex.qas_id] = "" if diff > null_score_diff_threshold else best["text"]
    return predictions, null_odds, nbest_out


@dataclasses.dataclass
class SquadMeta:
    data: list[dict[str, Any]]  # the raw "data" list, for the official scores
    examples: list[SquadExample]
    windows: Windows
    vocab: Sequence[str]
    options: dict[str, Any]  # do_lower_case, n_best_size, max_answer_length, threshold


def _cross_entropy(logits: Any, positions: Any) -> Any:
    import jax
    import jax.numpy as jnp

    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, positions[:, None], axis=-1))


class SquadTask(Task):
    """SQuAD as a fine-tuning task; data files ``<data_dir>/{train,dev}-v{1.1,2.0}.json``
    (the official names) unless `config.train_file` / `config.dev_file` name them."""

    def __init__(self, version_2: bool) -> None:
        self.version_2 = version_2
        self.name = "squad2.0" if version_2 else "squad1.1"
        self.main_metric = "best_f1" if version_2 else "f1"

    def model(self, bert_config: Any) -> Any:
        from bert_jax.heads import BertForQuestionAnswering

        return BertForQuestionAnswering(bert_config)

    def path(self, config: Any, split: str) -> str:
        explicit = config.get(f"{split}_file", "")
        if explicit:
            return explicit
        version = "2.0" if self.version_2 else "1.1"
        return os.path.join(config.data_dir, f"{split}-v{version}.json")

    def load(self, config: Any, tokenizer: Any, split: str) -> Split:
        data, examples = read_examples(self.path(config, split), self.version_2)
        kept = subset(examples, config, split)
        if len(kept) < len(examples):  # score only the questions kept
            data, examples = restrict(data, {e.qas_id for e in kept}), kept
        training = split == "train"
        arrays, windows = featurize(
            examples,
            tokenizer,
            config.max_seq_length,
            config.get("doc_stride", 128),
            config.get("max_query_length", 64),
            training,
        )
        options = {
            "do_lower_case": config.get("do_lower_case", True),
            "n_best_size": config.get("n_best_size", 20),
            "max_answer_length": config.get("max_answer_length", 30),
            "null_score_diff_threshold": config.get("null_score_diff_threshold", 0.0),
        }
        return Split(split, arrays, SquadMeta(data, examples, windows, tokenizer.vocab, options))

    def loss(self, outputs: Any, batch: dict[str, Any]) -> Any:
        start, end = outputs
        return (
            _cross_entropy(start, batch["start_positions"]) + _cross_entropy(end, batch["end_positions"])
        ) / 2

    def evaluate(self, outputs: Any, split: Split, out_dir: str) -> dict[str, float]:
        """Writes ``predictions.json`` and ``nbest_predictions.json`` (v2.0 also
        ``null_odds.json`` and ``predictions_tuned.json``, at the threshold tuned on this
        split as in the paper's §4.3) into `out_dir`; returns the official scores."""
        meta: SquadMeta = split.meta
        predictions, null_odds, nbest = predict_answers(
            meta.examples,
            meta.windows,
            split.arrays["input_ids"],
            np.asarray(outputs[0]),
            np.asarray(outputs[1]),
            meta.vocab,
            version_2=self.version_2,
            **meta.options,
        )
        os.makedirs(out_dir, exist_ok=True)
        write_json(os.path.join(out_dir, "predictions.json"), predictions)
        write_json(os.path.join(out_dir, "nbest_predictions.json"), nbest)
        if not self.version_2:
            return metrics.squad_v1(meta.data, predictions)
        write_json(os.path.join(out_dir, "null_odds.json"), null_odds)
        scores = metrics.squad_v2(meta.data, predictions, null_odds)
        best_text = {q: next((c["text"] for c in n if c["text"]), "") for q, n in nbest.items()}
        threshold = scores["best_f1_thresh"]
        tuned = {q: "" if null_odds[q] > threshold else best_text[q] for q in predictions}
        write_json(os.path.join(out_dir, "predictions_tuned.json"), tuned)
        return {k: float(v) for k, v in scores.items()}


def write_json(path: str, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
