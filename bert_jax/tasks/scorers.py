"""Evaluation metrics with the definitions of the official scorers, in plain Python/numpy.

* GLUE: accuracy, binary F1, Matthews correlation (CoLA), Pearson/Spearman (STS-B), as
  scikit-learn / scipy compute them for the GLUE leaderboard.
* SQuAD v1.1 / v2.0: exact match and F1 as the official ``evaluate-v1.1.py`` /
  ``evaluate-v2.0.py`` compute them, summed in the same order so the numbers agree to the
  last bit, plus v2.0's best no-answer threshold search.
* CoNLL-2003 NER: entity-level precision/recall/F1 with conlleval's chunking rules (the
  rules `seqeval` implements), so IOB1 (the CoNLL release) and IOB2 tags both work.

Nothing here imports a model or a framework: the scorers are reused by `eval-squad`.
"""

from __future__ import annotations

import collections
import re
import string
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

# ----------------------------------------------------------------------------- GLUE


def accuracy(labels: np.ndarray, preds: np.ndarray) -> float:
    return float(np.mean(np.asarray(labels) == np.asarray(preds)))


def f1_binary(labels: np.ndarray, preds: np.ndarray, positive: int = 1) -> float:
    """F1 of the positive class (MRPC, QQP); 0 when there is no true positive."""
    labels, preds = np.asarray(labels), np.asarray(preds)
    tp = np.sum((preds == positive) & (labels == positive))
    fp = np.sum((preds == positive) & (labels != positive))
    fn = np.sum((preds != positive) & (labels == positive))
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def matthews_corr(labels: np.ndarray, preds: np.ndarray) -> float:
    """Binary Matthews correlation (CoLA); 0 when undefined, as scikit-learn."""
    labels, preds = np.asarray(labels).astype(bool), np.asarray(preds).astype(bool)
    tp = float(np.sum(preds & labels))
    tn = float(np.sum(~preds & ~labels))
    fp = float(np.sum(preds & ~labels))
    fn = float(np.sum(~preds & labels))
    denom = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denom) if denom else 0.0


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denom = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denom) if denom else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks for ties (as scipy.stats.rankdata)."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(_ranks(x), _ranks(y))


# ----------------------------------------------------------------------------- SQuAD

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower-case, drop ASCII punctuation, the articles a/an/the, and extra whitespace
    (the official normalisation, in the same order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1_v1(prediction: str, truth: str) -> float | int:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    same = sum((collections.Counter(pred) & collections.Counter(gold)).values())
    if same == 0:
        return 0
    precision, recall = same / len(pred), same / len(gold)
    return (2 * precision * recall) / (precision + recall)


def _f1_v2(gold: str, prediction: str) -> float | int:
    """v2.0 differs from v1.1 only here: two empty answers agree (F1 1, not 0)."""
    gold_toks = normalize_answer(gold).split() if gold else []
    pred_toks = normalize_answer(prediction).split() if prediction else []
    if not gold_toks or not pred_toks:
        return int(gold_toks == pred_toks)
    same = sum((collections.Counter(gold_toks) & collections.Counter(pred_toks)).values())
    if same == 0:
        return 0
    precision, recall = same / len(pred_toks), same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def questions(dataset: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    """Every question (`qas` entry) of a SQuAD `data` list, in order."""
    for article in dataset:
        for paragraph in article["paragraphs"]:
            yield from paragraph["qas"]


def squad_v1(dataset: Sequence[Mapping[str, Any]], predictions: Mapping[str, str]) -> dict[str, float]:
    """SQuAD v1.1 ``{"exact_match", "f1"}`` (percent); an unanswered question scores 0.

    `dataset` is the ``"data"`` list of the official JSON.
    """
    exact = f1 = total = 0
    for qa in questions(dataset):
        total += 1
        if qa["id"] not in predictions:
            print(f"Unanswered question {qa['id']} will receive score 0.", file=sys.stderr)
            continue
        truths = [a["text"] for a in qa["answers"]]
        pred = predictions[qa["id"]]
        exact += max(normalize_answer(pred) == normalize_answer(t) for t in truths)
        f1 += max(_f1_v1(pred, t) for t in truths)
    if total == 0:
        raise ValueError("the SQuAD dataset has no questions")
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def _raw_scores_v2(
    dataset: Sequence[Mapping[str, Any]], predictions: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, float | int]]:
    exact, f1 = {}, {}
    missing = []
    for qa in questions(dataset):
        qid = qa["id"]
        golds = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
        if qid not in predictions:
            missing.append(qid)
            continue
        pred = predictions[qid]
        exact[qid] = max(int(normalize_answer(g) == normalize_answer(pred)) for g in golds)
        f1[qid] = max(_f1_v2(g, pred) for g in golds)
    if missing:
        # The official script prints these and then fails on a KeyError: say it clearly.
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise ValueError(f"{len(missing)} question(s) have no prediction: {shown}")
    return exact, f1


def _summary(exact: Mapping[str, float], f1: Mapping[str, float], qids: Sequence[str]) -> dict[str, Any]:
    total = len(qids)
    return {
        "exact": 100.0 * sum(exact[k] for k in qids) / total,
        "f1": 100.0 * sum(f1[k] for k in qids) / total,
        "total": total,
    }


def best_null_threshold(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """(best score in percent, threshold): answer "" for every question whose no-answer
    score exceeds the threshold. Sweeps questions in increasing no-answer score (stable
    order), as the official script, so ties resolve identically."""
    current = best = sum(1 for v in has_answer.values() if not v)
    threshold: float = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            current += scores[qid]
        elif predictions[qid]:
            current += -1
        if current > best:
            best, threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), threshold


class MissingNoAnswerProbabilities(ValueError):
    """Questions with a prediction but no no-answer probability (`squad_v2`): the
    probabilities' file is at fault, not the predictions'."""


def squad_v2(
    dataset: Sequence[Mapping[str, Any]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    na_prob_thresh: float = 1.0,
) -> dict[str, Any]:
    """SQuAD v2.0 scores with the official keys (``exact``, ``f1``, ``total``, ``HasAns_*``,
    ``NoAns_*``, and with `na_probs` the tuned ``best_exact``/``best_f1`` and thresholds)."""
    has_answer = {qa["id"]: bool(qa["answers"]) for qa in questions(dataset)}
    if not has_answer:
        raise ValueError("the SQuAD dataset has no questions")
    probs = na_probs if na_probs is not None else {k: 0.0 for k in predictions}
    missing = [q for q in has_answer if q in predictions and q not in probs]
    if missing:
        raise MissingNoAnswerProbabilities(
            f"the no-answer probabilities lack {len(missing)} question(s): {missing[:5]}"
        )
    exact_raw, f1_raw = _raw_scores_v2(dataset, predictions)

    def thresholded(scores: Mapping[str, float]) -> dict[str, float]:
        return {q: float(not has_answer[q]) if probs[q] > na_prob_thresh else s for q, s in scores.items()}

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    out = _summary(exact, f1, list(exact))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, v in has_answer.items() if v == wanted]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in _summary(exact, f1, qids).items()})
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = best_null_threshold(
            predictions, exact_raw, probs, has_answer
        )
        out["best_f1"], out["best_f1_thresh"] = best_null_threshold(predictions, f1_raw, probs, has_answer)
    return out


# ----------------------------------------------------------------------------- NER


def _split_tag(tag: str) -> tuple[str, str]:
    """("B", "PER") from "B-PER"; a bare "O"/"B" has type "_" (as conlleval/seqeval)."""
    return tag[0], tag[1:].split("-", maxsplit=1)[-1] or "_"


def _chunk_ends(prev: str, tag: str, prev_type: str, type_: str) -> bool:
    if prev in ("E", "S") or (prev in ("B", "I") and tag in ("B", "S", "O")):
        return True
    return prev not in ("O", ".") and prev_type != type_


def _chunk_starts(prev: str, tag: str, prev_type: str, type_: str) -> bool:
    if tag in ("B", "S") or (prev in ("E", "S", "O") and tag in ("E", "I")):
        return True
    return tag not in ("O", ".") and prev_type != type_


def entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """(type, first, last) chunks of one tag sequence under conlleval's rules: a chunk
    starts at B/S, at an I/E after O or after another type; IOB1 and IOB2 both parse."""
    chunks = []
    prev, prev_type, begin = "O", "", 0
    for i, tag in enumerate([*tags, "O"]):
        cur, type_ = _split_tag(tag)
        if _chunk_ends(prev, cur, prev_type, type_):
            chunks.append((prev_type, begin, i - 1))
        if _chunk_starts(prev, cur, prev_type, type_):
            begin = i
        prev, prev_type = cur, type_
    return chunks


def entity_f1(true_tags: Sequence[Sequence[str]], pred_tags: Sequence[Sequence[str]]) -> dict[str, float]:
    """Micro-averaged entity precision/recall/F1 over sentences (exact type and span)."""
    if len(true_tags) != len(pred_tags):
        raise ValueError(f"{len(true_tags)} gold sentences but {len(pred_tags)} predicted")
    gold, pred = set(), set()
    for i, (t, p) in enumerate(zip(true_tags, pred_tags, strict=True)):
        if len(t) != len(p):
            raise ValueError(f"sentence {i}: {len(t)} gold tags but {len(p)} predicted")
        gold |= {(i, *e) for e in entities(t)}
        pred |= {(i, *e) for e in entities(p)}
    correct = len(gold & pred)
    precision = correct / len(pred) if pred else 0.0
    recall = correct / len(gold) if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}
