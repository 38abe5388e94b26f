"""GLUE (paper §4.1): the nine tasks from the original TSV release or from TFDS `glue/*`.

Local files: ``<data_dir>/<Folder>/{train,dev,test}.tsv`` exactly as the GLUE download
script lays them out, or ``<data_dir>/{train,dev,test}.tsv`` with the task's own folder as
``data_dir`` (MNLI: ``dev_matched``/``dev_mismatched``/``test_matched``/
``test_mismatched``). Columns are found by each file's header names; CoLA's train/dev
have no header (columns by position). With ``data_dir="tfds"`` (or ``"tfds:<dir>"`` for a
TFDS data folder) the same splits come from ``tfds.load("glue/<task>")``.

A missing column, a label outside the task's label set or an empty split is an error
naming the file and the line. Test-set predictions are written as the GLUE submission
files (``SST-2.tsv``, ``MNLI-m.tsv``, ... with ``index\\tprediction`` rows).
"""

from __future__ import annotations

import csv
import dataclasses
import os
import sys
from collections.abc import Sequence

import numpy as np

from bert_jax.data import corpora
from bert_jax.storage import tensorflow_runtime
from bert_jax.tasks import scorers
from bert_jax.tasks.base import Example, TaskSpec

Column = str | int  # a header name, or a position in header-less files


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a task's fields are, in the TSV release and in TFDS."""

    folder: str
    a: Column
    b: Column | None
    label: Column
    test_a: str
    test_b: str | None
    test_index: str = "index"
    header: bool = True  # train/dev files start with a header line
    tfds_a: str = ""
    tfds_b: str | None = None
    tfds_labels: tuple[str, ...] = ()  # TFDS's ClassLabel names, in its order


_NLI = ("entailment", "not_entailment")
LAYOUTS: dict[str, Layout] = {
    "cola": Layout("CoLA", 3, None, 1, "sentence", None, header=False, tfds_a="sentence",
                   tfds_labels=("unacceptable", "acceptable")),
    "sst2": Layout("SST-2", "sentence", None, "label", "sentence", None, tfds_a="sentence",
                   tfds_labels=("negative", "positive")),
    "mrpc": Layout("MRPC", "#1 String", "#2 String", "Quality", "#1 String", "#2 String",
                   tfds_a="sentence1", tfds_b="sentence2", tfds_labels=("not_equivalent", "equivalent")),
    "stsb": Layout("STS-B", "sentence1", "sentence2", "score", "sentence1", "sentence2",
                   tfds_a="sentence1", tfds_b="sentence2"),
    "qqp": Layout("QQP", "question1", "question2", "is_duplicate", "question1", "question2",
                  test_index="id", tfds_a="question1", tfds_b="question2",
                  tfds_labels=("not_duplicate", "duplicate")),
    "mnli": Layout("MNLI", "sentence1", "sentence2", "gold_label", "sentence1", "sentence2",
                   tfds_a="premise", tfds_b="hypothesis",
                   tfds_labels=("entailment", "neutral", "contradiction")),
    "qnli": Layout("QNLI", "question", "sentence", "label", "question", "sentence",
                   tfds_a="question", tfds_b="sentence", tfds_labels=_NLI),
    "rte": Layout("RTE", "sentence1", "sentence2", "label", "sentence1", "sentence2",
                  tfds_a="sentence1", tfds_b="sentence2", tfds_labels=_NLI),
    "wnli": Layout("WNLI", "sentence1", "sentence2", "label", "sentence1", "sentence2",
                   tfds_a="sentence1", tfds_b="sentence2", tfds_labels=("not_entailment", "entailment")),
}  # fmt: skip

# The label strings of the TSV release (and of the submission files), index = class id.
LABELS: dict[str, tuple[str, ...]] = {
    "cola": ("0", "1"),
    "sst2": ("0", "1"),
    "mrpc": ("0", "1"),
    "stsb": (),
    "qqp": ("0", "1"),
    "mnli": ("contradiction", "entailment", "neutral"),
    "qnli": _NLI,
    "rte": _NLI,
    "wnli": ("0", "1"),
}

# TFDS split names of ours.
_TFDS_SPLITS = {
    "dev": "validation",
    "dev_matched": "validation_matched",
    "dev_mismatched": "validation_mismatched",
}


def _eval_splits(task: str) -> tuple[str, ...]:
    return ("dev_matched", "dev_mismatched") if task == "mnli" else ("dev",)


def submission_files(task: str) -> dict[str, str]:
    """Test split → the GLUE leaderboard's file name for it."""
    if task == "mnli":
        return {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"}
    return {"test": f"{LAYOUTS[task].folder}.tsv"}


def _index(header: list[str] | None, col: Column, path: str) -> int:
    if isinstance(col, int):
        return col
    if header is None or col not in header:
        raise ValueError(f"{path}:1: missing column {col!r} in the header {header}")
    return header.index(col)


def _field(row: list[str], index: int, col: Column, path: str, line: int) -> str:
    if index >= len(row):
        raise ValueError(f"{path}:{line}: missing column {col!r} (the row has {len(row)} fields)")
    return row[index]


def _parse_label(task: str, raw: str, path: str, line: int) -> int | float:
    labels = LABELS[task]
    raw = raw.strip()
    if not labels:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"{path}:{line}: score {raw!r} is not a number") from None
    if raw not in labels:
        raise ValueError(f"{path}:{line}: label {raw!r} is not one of {list(labels)}")
    return labels.index(raw)


def read_tsv(task: str, data_dir: str, split: str) -> list[Example]:
    """Examples of a split of the GLUE TSV release; test splits have ``label=None`` and
    their ``index`` column as ``guid`` (for the submission file)."""
    layout = LAYOUTS[task]
    path = os.path.join(data_dir, layout.folder, f"{split}.tsv")
    own = os.path.join(data_dir, f"{split}.tsv")  # data_dir as the task's own folder
    if not os.path.exists(path) and os.path.exists(own):
        path = own
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"GLUE {task}: {path} does not exist (config.data_dir is the GLUE download's folder, "
            f"holding {layout.folder}/, or the task's own folder, holding {split}.tsv)"
        )
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    test = split.startswith("test")
    has_header = layout.header or test
    header = rows[0] if has_header and rows else None
    if test:
        cols: Sequence[Column | None] = (layout.test_a, layout.test_b, layout.test_index)
    else:
        cols = (layout.a, layout.b, layout.label)
    indexes = [None if c is None else _index(header, c, path) for c in cols]
    out = []
    for line, row in enumerate(rows[1:] if has_header else rows, start=2 if has_header else 1):
        if not any(row):
            continue
        a, b, last = (
            None if i is None else _field(row, i, c, path, line) for i, c in zip(indexes, cols, strict=True)
        )
        if test:
            out.append(Example(a, b, None, last))
        else:
            out.append(Example(a, b, _parse_label(task, last, path, line), f"{split}-{line}"))
    if not out:
        raise ValueError(f"{path}: the {split} split is empty (no data lines)")
    return out


def _tfds_instead(task: str) -> str:
    """The other way to `task`'s data, for a refusal of its TFDS dataset."""
    return (
        f"or give the folder of GLUE's files, holding {LAYOUTS[task].folder}/ (config.data_dir; an "
        "ablation table's config.data_dirs.glue)"
    )


def check_tfds(task: str, data_dir: str = "") -> None:
    """`corpora.check_tfds` of `task`'s TFDS dataset (``glue/<task>``): for a job that
    reads it later."""
    corpora.check_tfds(f"glue/{task}", data_dir, _tfds_instead(task))


def read_tfds(task: str, split: str, data_dir: str | None = None) -> list[Example]:
    """Examples from ``tfds.load("glue/<task>")``; TFDS's label ids are mapped to ours by
    label name (MNLI orders its classes differently), test labels (-1) become None."""
    import jax  # a run's hosts would each build it: only a run of one builds it

    tfds = tensorflow_runtime.tensorflow_datasets()
    layout, labels = LAYOUTS[task], LABELS[task]
    name = f"glue/{task}"
    corpora.ensure_tfds(name, data_dir or "", build=jax.process_count() == 1, instead=_tfds_instead(task))
    tfds_split = _TFDS_SPLITS.get(split, split)
    dataset = tfds.load(
        name, split=tfds_split, data_dir=data_dir or None, shuffle_files=False, download=False
    )
    out = []
    for i, row in enumerate(tfds.as_numpy(dataset)):
        a = row[layout.tfds_a].decode("utf-8")
        b = row[layout.tfds_b].decode("utf-8") if layout.tfds_b else None
        raw = row["label"]
        label: int | float | None
        if split.startswith("test"):
            label = None  # -1 in the real data (random in tfds's mock data)
        elif not labels:
            label = float(raw)
        elif raw < 0:
            label = None
        elif raw >= len(layout.tfds_labels):
            raise ValueError(f"{name}[{tfds_split}] example {i}: label id {raw} outside {layout.tfds_labels}")
        else:
            tfds_name = layout.tfds_labels[raw]
            label = labels.index(tfds_name) if tfds_name in labels else int(raw)
        out.append(Example(a, b, label, str(int(row["idx"]))))
    if not out:
        raise ValueError(f"{name}[{tfds_split}]: the {split} split is empty")
    return out


def read(task: str, data_dir: str, split: str) -> list[Example]:
    """`read_tfds` when `data_dir` is ``tfds`` or ``tfds:<dir>``, else `read_tsv`."""
    if data_dir == "tfds" or data_dir.startswith("tfds:"):
        return read_tfds(task, split, data_dir[5:] or None)
    if not data_dir:
        raise ValueError(f"GLUE {task}: set data_dir to the GLUE folder (or 'tfds')")
    return read_tsv(task, data_dir, split)


def prediction_strings(task: str, predictions: np.ndarray) -> list[str]:
    """What the GLUE server expects in the ``prediction`` column: the label string of the
    TSV release (0/1, entailment, ...), or the STS-B score clipped to [0, 5]."""
    labels = LABELS[task]
    if not labels:
        return [f"{float(np.clip(p, 0.0, 5.0)):.3f}" for p in predictions]
    return [labels[int(p)] for p in predictions]


def write_submission(task: str, split: str, examples: Sequence[Example], predictions: np.ndarray,
                     out_dir: str) -> str:  # fmt: skip
    """Writes ``<out_dir>/<GLUE file name>`` (``index\\tprediction``); returns its path."""
    if len(examples) != len(predictions):
        raise ValueError(f"{len(examples)} test examples but {len(predictions)} predictions")
    path = os.path.join(out_dir, submission_files(task)[split])
    os.makedirs(out_dir, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("index\tprediction\n")
        for e, p in zip(examples, prediction_strings(task, predictions), strict=True):
            f.write(f"{e.guid}\t{p}\n")
    return path


def _metric_fn(task: str):
    def fn(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
        if task == "cola":
            return {"matthews_corr": scorers.matthews_corr(y, p), "accuracy": scorers.accuracy(y, p)}
        if task in ("mrpc", "qqp"):
            return {"f1": scorers.f1_binary(y, p), "accuracy": scorers.accuracy(y, p)}
        if task == "stsb":
            return {"pearson": scorers.pearson(y, p), "spearman": scorers.spearman(y, p)}
        return {"accuracy": scorers.accuracy(y, p)}

    return fn


_MAIN = {"cola": "matthews_corr", "mrpc": "f1", "qqp": "f1", "stsb": "pearson"}

TASKS: dict[str, TaskSpec] = {
    name: TaskSpec(
        name=name,
        labels=LABELS[name],
        read=lambda data_dir, split, name=name: read(name, data_dir, split),
        metrics=_metric_fn(name),
        main_metric=_MAIN.get(name, "accuracy"),
        eval_splits=_eval_splits(name),
        test_files=submission_files(name),
    )
    for name in LAYOUTS
}
