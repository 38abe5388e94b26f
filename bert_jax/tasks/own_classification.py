"""Sentence(-pair) classification on a user's own files: ``configs/classify.py`` with
``--config.data_dir=DIR`` (``[CLS] A [SEP] (B [SEP])``, the pooled vector → one dense
layer, as GLUE's tasks).

DIR holds ``train`` and ``dev`` (or ``validation``), and ``test`` to predict, each as
``.tsv``, ``.csv`` or ``.jsonl``. A TSV or CSV file's header names its columns (a JSONL
line's keys): the text in ``text`` (or ``sentence``, ``sentence1``, ``text_a``), the
second segment of a pair in ``text_b`` (or ``sentence2``), the class in ``label``; a
test file needs no label, and an ``id`` (or ``idx``, ``index``) column names its rows
in the predictions. A TSV's fields are taken as they are (no quoting: GLUE's layout), a
CSV's with the usual double quotes.

The classes are the train file's labels, sorted (as numbers when every label is an
integer: ``-1, 0, 1``; else as text); a dev label that is not one of them is refused in
one line naming the file and line. Scored by accuracy (chosen on) and macro F1; ``test``
predictions go to ``test_predictions.tsv`` (``id`` and the class's label). Labels that are
all numbers, not all integers (``3.8``: a similarity score, as STS-B's), make it a
regression (one output, squared error; Pearson, chosen on, and Spearman; the predicted
score in ``test_predictions.tsv``).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from bert_jax.data import text_files
from bert_jax.storage import atomic_files
from bert_jax.tasks import scorers
from bert_jax.tasks.base import Example, Split, TaskData, TaskSpec
from bert_jax.tasks.classification import ClassificationTask

NAME = "classify"
FORMATS = (".tsv", ".csv", ".jsonl")
_SPLIT_FILES = {"train": ("train",), "dev": ("dev", "validation"), "test": ("test",)}
_TEXT = ("text", "sentence", "sentence1", "text_a")
_TEXT_B = ("text_b", "sentence2")
_ID = ("id", "idx", "index")
PREDICTIONS = "test_predictions.tsv"


@dataclasses.dataclass(frozen=True)
class Row:
    """One data row as written: its texts, its label's text ("" where none), its id."""

    text_a: str
    text_b: str | None
    label: str
    guid: str
    line: int


def split_file(data_dir: str, split: str) -> str:
    """The file of `split` in `data_dir`: one of ``<name>.tsv|.csv|.jsonl``."""
    if not data_dir:
        raise ValueError(f"task {NAME}: set config.data_dir to the folder of your train/dev files")
    names = _SPLIT_FILES.get(split, (split,))
    found = [os.path.join(data_dir, n + ext) for n in names for ext in FORMATS]
    found = [p for p in found if os.path.isfile(p)]
    if not found:
        wanted = " or ".join(f"{n}.tsv|.csv|.jsonl" for n in names)
        raise FileNotFoundError(f"task {NAME}: no {split} file in {data_dir} (looked for {wanted})")
    if len(found) > 1:
        raise ValueError(f"task {NAME}: {' and '.join(found)} are both the {split} split: keep one")
    return found[0]


def _column(header: Sequence[str], names: Sequence[str], path: str, required: bool) -> str | None:
    for name in names:
        if name in header:
            return name
    if required:
        raise ValueError(f"{path}: no {'/'.join(names)} column (its columns: {', '.join(header)})")
    return None


def read_rows(path: str, labelled: bool) -> list[Row]:
    """The rows of one file; `labelled`: every row needs a label (train, dev)."""
    text = text_files.read_text(path)
    if path.endswith(".jsonl"):
        records = []
        for line, raw in enumerate(text.splitlines(), start=1):
            if raw.strip():
                try:
                    record = json.loads(raw)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{line}: not a JSON object ({e.msg})") from None
                if not isinstance(record, dict):
                    raise ValueError(f"{path}:{line}: not a JSON object")
                records.append((line, {k: "" if v is None else str(v) for k, v in record.items()}))
        header = list(dict.fromkeys(k for _, r in records for k in r))
    else:
        csv.field_size_limit(sys.maxsize)
        quoting = csv.QUOTE_NONE if path.endswith(".tsv") else csv.QUOTE_MINIMAL
        delimiter = "\t" if path.endswith(".tsv") else ","
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
        rows = [(reader.line_num, row) for row in reader]  # a quoted field may span lines
        if not rows:
            raise ValueError(f"{path} is empty: a header line, then one example a line")
        header = [h.strip() for h in rows[0][1]]
        records = []
        for line, row in rows[1:]:
            if not any(f.strip() for f in row):
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
            records.append((line, dict(zip(header, row, strict=True))))
    a, b = _column(header, _TEXT, path, True), _column(header, _TEXT_B, path, False)
    label, ident = _column(header, ("label",), path, labelled), _column(header, _ID, path, False)
    out = []
    for i, (line, record) in enumerate(records):
        value = record.get(label, "").strip() if label else ""
        if labelled and not value:
            raise ValueError(f"{path}:{line}: no label")
        guid = record.get(ident, "").strip() if ident else ""
        out.append(Row(record.get(a, ""), record.get(b) if b else None, value, guid or str(i), line))
    if not out:
        raise ValueError(f"{path}: no examples (a header line, then one example a line)")
    return out


def sorted_labels(labels: set[str]) -> tuple[str, ...]:
    """As numbers when every label is an integer (``-1, 0, 1``), else as text."""
    try:
        return tuple(sorted(labels, key=int))
    except ValueError:
        return tuple(sorted(labels))


def scores(labels: Sequence[str]) -> bool:
    """Whether `labels` are all numbers and not all integers (``3.8``): a regression."""
    values = [_number(x) for x in labels]
    if None in values:
        return False
    return not all(v.is_integer() and "." not in x for v, x in zip(values, labels, strict=True))


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def macro_f1(labels: np.ndarray, preds: np.ndarray, num_classes: int) -> float:
    """The mean over classes of each class's F1 (a class absent from both scores 0)."""
    return float(np.mean([scorers.f1_binary(labels, preds, positive=c) for c in range(num_classes)]))


class OwnClassificationTask(ClassificationTask):
    """`ClassificationTask` whose classes come from the train file (read at the first
    `load`: the model is made after the splits are read)."""

    def __init__(self) -> None:
        super().__init__(
            TaskSpec(NAME, (), self._read, self._metrics, "accuracy", ("dev",), {"test": PREDICTIONS})
        )
        self.data_dir: str | None = None
        self._source = ""  # the file the labels were learnt from
        self._learnt: list[Row] | None = None  # its rows, read once: its split's load takes them

    def load(self, data: TaskData, tokenizer: Any, split: str) -> Split:
        if self.data_dir != data.data_dir:
            self._learn_labels(data.data_dir)
        return super().load(data, tokenizer, split)

    def _learn_labels(self, data_dir: str) -> None:
        try:
            path = split_file(data_dir, "train")
        except FileNotFoundError as no_train:  # scoring a fine-tuned model on dev alone (`--evaluate`)
            try:
                path = split_file(data_dir, "dev")
            except FileNotFoundError:
                raise no_train from None
        rows = read_rows(path, labelled=True)
        labels = sorted_labels({r.label for r in rows})
        self.data_dir, self._source, self._learnt = data_dir, path, rows
        if scores(labels):
            self.spec = dataclasses.replace(self.spec, labels=(), main_metric="pearson")
            return
        if len(labels) < 2:
            raise ValueError(f"{path}: one label only ({labels[0]}): a classifier needs two or more")
        self.spec = dataclasses.replace(self.spec, labels=labels, main_metric="accuracy")

    def _read(self, data_dir: str, split: str) -> list[Example]:
        path = split_file(data_dir, split)
        labelled = split != "test"
        if path == self._source and self._learnt is not None:
            rows, self._learnt = self._learnt, None
        else:
            rows = read_rows(path, labelled)
        index = {name: i for i, name in enumerate(self.label_names)}
        out = []
        for row in rows:
            if self.regression:
                score = _number(row.label)  # (a test row may give none)
                if labelled and score is None:
                    raise ValueError(
                        f"{path}:{row.line}: label {row.label!r} is not a number, as {self._source}'s are"
                    )
                out.append(Example(row.text_a, row.text_b, score, row.guid))
                continue
            if labelled and row.label not in index:
                raise ValueError(
                    f"{path}:{row.line}: label {row.label!r} is not one of {self._source}'s "
                    f"({', '.join(self.label_names)})"
                )
            out.append(Example(row.text_a, row.text_b, index.get(row.label), row.guid))
        return out

    def _metrics(self, labels: np.ndarray, preds: np.ndarray) -> dict[str, float]:
        if self.regression:
            return {"pearson": scorers.pearson(labels, preds), "spearman": scorers.spearman(labels, preds)}
        return {
            "accuracy": scorers.accuracy(labels, preds),
            "f1_macro": macro_f1(labels, preds, len(self.label_names)),
        }

    def write_test(self, outputs: Any, split: Split, out_dir: str) -> str:
        """``<out_dir>/test_predictions.tsv``: each row's id and predicted label."""
        predicted = self.predictions(np.asarray(outputs))
        lines = ["id\tprediction"]
        named = (lambda p: f"{float(p):.4f}") if self.regression else (lambda p: self.label_names[int(p)])
        lines += [f"{e.guid}\t{named(p)}" for e, p in zip(split.meta, predicted, strict=True)]
        path = os.path.join(out_dir, PREDICTIONS)
        atomic_files.write_text(path, "\n".join(lines) + "\n")
        return path
