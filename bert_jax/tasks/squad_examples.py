"""SQuAD JSON → `SquadExample`s: one per question, its paragraph split into whitespace words.

Reading follows the original ``run_squad.py``: a paragraph is split into words on
whitespace and the first answer's character offsets become word indices. Every answer
(and v2.0 plausible answer) is checked against its paragraph, so a wrong `answer_start`
fails while reading, naming the file and the question.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from bert_jax.tasks.text import is_squad_whitespace


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


def _read_question(
    path: str, qa: dict[str, Any], context: str, words: list[str], char_to_word: list[int], version_2: bool
) -> SquadExample:
    """One question of a paragraph (`words`, `char_to_word` from `split_words(context)`)."""
    qid = qa.get("id")
    if not isinstance(qid, str) or not isinstance(qa.get("question"), str):
        raise ValueError(f"{path}: question {qid!r} lacks an 'id' or a 'question'")
    if not isinstance(qa.get("answers"), list):
        raise ValueError(f"{path}: question {qid}: no 'answers' list")
    impossible = bool(qa.get("is_impossible", False))
    if impossible and not version_2:
        raise ValueError(
            f"{path}: question {qid} is unanswerable (is_impossible): a SQuAD 2.0 file; use version 2.0"
        )
    checked = [_check_answer(path, qid, context, a) for a in qa["answers"]]
    for a in qa.get("plausible_answers", []):
        _check_answer(path, qid, context, a)
    if impossible or not checked:
        if not version_2:
            raise ValueError(f"{path}: question {qid} has no answer (SQuAD 1.1)")
        return SquadExample(qid, qa["question"], words, "", -1, -1, True)
    text, start = checked[0]
    end_word = char_to_word[start + len(text) - 1]
    return SquadExample(qid, qa["question"], words, text, char_to_word[start], end_word, False)


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
            words, char_to_word = split_words(context)  # shared by the paragraph's questions
            for qa in paragraph.get("qas", []):
                examples.append(_read_question(path, qa, context, words, char_to_word, version_2))
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
