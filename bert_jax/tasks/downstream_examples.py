"""What the readers of the downstream suite (`downstream_readers`) share: the `Record` of
one example (with the key of its group, `downstream_splits`), ids from content, the search
of an answer in its context, and the rule for bad entries.

Every example's id is the task and the hash of its raw input, so a repeated example is a
duplicated id. Entries not in the task's format, with an empty context or text, an
answer not in its context, a label outside the task's labels or a duplicated id are
skipped and counted, never silently: one ``warning:`` line per kind and file (as
`bert_jax.data.text_files` counts replaced bytes). A file with nothing usable left is
refused in one line.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any

from bert_jax.data import text_files
from bert_jax.tasks.text import is_squad_whitespace

KINDS = {
    "format": "not in the task's format",
    "empty": "an empty context or text",
    "no_answer": "an answer that is not in its context",
    "label": "a label outside the label set",
    "duplicate": "a duplicated id",
}


@dataclasses.dataclass(frozen=True)
class Record:
    """One example: a question and its context (QA) or a text (pair) with its label."""

    guid: str
    group: str  # the key its split is drawn by
    text_a: str  # QA: the question
    text_b: str | None  # QA: the context; None for single texts
    label: int | None = None  # classification: an index into the task's labels
    answer: str = ""  # QA: the answer, a slice of the context ("" = no answer)
    answer_start: int = -1


Parsed = Record | str  # a record, or the kind of problem of a raw entry (a key of KINDS)


class Skips:
    """Skipped entries of one file, by kind: one warning line per kind."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.counts: collections.Counter = collections.Counter()
        self.first: dict[str, str] = {}

    def add(self, kind: str, where: str) -> None:
        self.counts[kind] += 1
        self.first.setdefault(kind, where)

    def report(self, kept: int, details: dict[str, str]) -> None:
        for kind, n in self.counts.items():
            what = details.get(kind, KINDS[kind])
            noun = "example" if n == 1 else "examples"
            print(
                f"warning: {self.source}: {n} {noun} skipped: {what} (first: {self.first[kind]})", flush=True
            )
        if not kept:
            skipped = ", ".join(f"{n} {KINDS[k]}" for k, n in self.counts.items()) or "it has none"
            raise ValueError(f"{self.source}: no usable examples ({skipped})")


def content_id(task: str, raw: str) -> str:
    return f"{task}-{hashlib.sha1(raw.encode()).hexdigest()[:16]}"


def collect(source: str, entries: Iterable[tuple[str, Any]], parse: Callable[[Any], Parsed],
            details: dict[str, str] | None = None) -> list[Record]:  # fmt: skip
    """Parses ``(where, entry)`` pairs, keeping the first of each id; skips are reported."""
    skips, seen, out = Skips(source), set(), []
    for where, entry in entries:
        parsed = parse(entry)
        if isinstance(parsed, str):
            skips.add(parsed, where)
        elif parsed.guid in seen:
            skips.add("duplicate", parsed.guid)
        else:
            seen.add(parsed.guid)
            out.append(parsed)
    skips.report(len(out), details or {})
    return out


def bigbench_examples(path: str) -> list[tuple[str, Any]]:
    """``("example N", entry)`` of a BIG-bench ``task.json``."""
    with open(path, "rb") as f:
        text = text_files.decode(f.read(), path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("examples"), list):
        raise ValueError(f"{path}: not a BIG-bench task file (expected an object with an 'examples' list)")
    return [(f"example {i}", e) for i, e in enumerate(doc["examples"])]


def answer_span(answer: str, context: str) -> tuple[int, str] | None:
    """(start, the context's own text) of `answer` in `context`, whitespace ignored (the
    Disfl-QA contexts are space-tokenised, "40 , 000", their answers not, "40,000"): the
    first match that starts and ends on word boundaries, else the first match; None when
    there is none. The text returned is the context's slice, as SQuAD files require."""
    found = _match(answer, context)
    return None if found is None else (found[0], context[found[0] : found[1]])


def _match(answer: str, context: str) -> tuple[int, int] | None:
    positions = [i for i, ch in enumerate(context) if not is_squad_whitespace(ch)]
    squeezed = "".join(context[i] for i in positions)
    target = "".join(ch for ch in answer if not is_squad_whitespace(ch))
    if not target:
        return None
    first, at = None, squeezed.find(target)
    while at >= 0:
        start, end = positions[at], positions[at + len(target) - 1] + 1
        if first is None:
            first = (start, end)
        starts_word = start == 0 or is_squad_whitespace(context[start - 1])
        if starts_word and (end == len(context) or is_squad_whitespace(context[end])):
            return start, end
        at = squeezed.find(target, at + 1)
    return first


def qa_record(task: str, raw: str, question: str, context: str, answer: str | None, group: str) -> Parsed:
    """A QA record (``answer`` None: unanswerable) or the kind of its problem."""
    question, context = question.strip(), context.strip()
    if not context or not question:
        return "empty"
    if answer is None:
        return Record(content_id(task, raw), group, question, context)
    span = answer_span(answer, context)
    if span is None:
        return "no_answer"
    return Record(content_id(task, raw), group, question, context, answer=span[1], answer_start=span[0])


def one_label(scores: Any, labels: dict[str, int]) -> int | None:
    """The label whose BIG-bench ``target_scores`` is 1 (the others 0), or None."""
    if not isinstance(scores, dict):
        return None
    best = [k for k, v in scores.items() if v == 1]
    if len(best) != 1 or best[0] not in labels:
        return None
    return labels[best[0]]
