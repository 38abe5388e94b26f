"""GLUE from the original TSV files in a local folder (``<data_dir>/<TASK>/{train,dev}.tsv``).

Columns are found by the header names of each task's release (CoLA has no header: by
position). A missing column, a label outside the task's label set or an empty split is an
error naming the file and the line.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import sys

from bert_jax import metrics
from bert_jax.tasks import Example, TaskSpec


@dataclasses.dataclass(frozen=True)
class _Layout:
    folder: str
    a: str | int
    b: str | int | None
    label: str | int
    header: bool = True
    dev_file: str = "dev.tsv"


_LAYOUTS = {
    "cola": _Layout("CoLA", 3, None, 1, header=False),
    "sst2": _Layout("SST-2", "sentence", None, "label"),
    "mrpc": _Layout("MRPC", "#1 String", "#2 String", "Quality"),
    "stsb": _Layout("STS-B", "sentence1", "sentence2", "score"),
    "qqp": _Layout("QQP", "question1", "question2", "is_duplicate"),
    "mnli": _Layout("MNLI", "sentence1", "sentence2", "gold_label", dev_file="dev_matched.tsv"),
    "mnli_mm": _Layout("MNLI", "sentence1", "sentence2", "gold_label", dev_file="dev_mismatched.tsv"),
    "qnli": _Layout("QNLI", "question", "sentence", "label"),
    "rte": _Layout("RTE", "sentence1", "sentence2", "label"),
    "wnli": _Layout("WNLI", "sentence1", "sentence2", "label"),
}

_LABELS = {
    "cola": ("0", "1"),
    "sst2": ("0", "1"),
    "mrpc": ("0", "1"),
    "stsb": (),
    "qqp": ("0", "1"),
    "mnli": ("contradiction", "entailment", "neutral"),
    "mnli_mm": ("contradiction", "entailment", "neutral"),
    "qnli": ("entailment", "not_entailment"),
    "rte": ("entailment", "not_entailment"),
    "wnli": ("0", "1"),
}


def _column(row: list[str], header: list[str] | None, col: str | int, path: str, line: int) -> str:
    index = col if isinstance(col, int) else (header.index(col) if header and col in header else -1)
    if index < 0 or index >= len(row):
        raise ValueError(f"{path}:{line}: missing column {col!r} (row has {len(row)} fields)")
    return row[index]


def read_tsv(task: str, data_dir: str, split: str) -> list[Example]:
    layout, labels = _LAYOUTS[task], _LABELS[task]
    name = {"train": "train.tsv", "dev": layout.dev_file}.get(split, f"{split}.tsv")
    path = os.path.join(data_dir, layout.folder, name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"GLUE {task}: {path} does not exist")
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    header = rows[0] if layout.header and rows else None
    body = rows[1:] if header is not None else rows
    out = []
    for i, row in enumerate(body, start=2 if header is not None else 1):
        if not any(row):
            continue
        a = _column(row, header, layout.a, path, i)
        b = _column(row, header, layout.b, path, i) if layout.b is not None else None
        raw = _column(row, header, layout.label, path, i).strip()
        if labels:
            if raw not in labels:
                raise ValueError(f"{path}:{i}: label {raw!r} is not one of {list(labels)}")
            label: int | float = labels.index(raw)
        else:
            try:
                label = float(raw)
            except ValueError:
                raise ValueError(f"{path}:{i}: score {raw!r} is not a number") from None
        out.append(Example(a, b, label, f"{split}-{i}"))
    if not out:
        raise ValueError(f"{path}: the {split} split is empty")
    return out


def _classification_metrics(task: str):
    def fn(y, p):
        if task == "cola":
            return {"matthews_corr": metrics.matthews_corr(y, p), "accuracy": metrics.accuracy(y, p)}
        if task in ("mrpc", "qqp"):
            return {"f1": metrics.f1_binary(y, p), "accuracy": metrics.accuracy(y, p)}
        if task == "stsb":
            return {"pearson": metrics.pearson(y, p), "spearman": metrics.spearman(y, p)}
        return {"accuracy": metrics.accuracy(y, p)}

    return fn


_MAIN = {"cola": "matthews_corr", "mrpc": "f1", "qqp": "f1", "stsb": "pearson"}

TASKS = {
    name: TaskSpec(
        name=name,
        labels=_LABELS[name],
        read=lambda data_dir, split, name=name: read_tsv(name, data_dir, split),
        metrics=_classification_metrics(name),
        main_metric=_MAIN.get(name, "accuracy"),
    )
    for name in _LAYOUTS
}
