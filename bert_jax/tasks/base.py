"""What a fine-tuning task is: `Task` (its head, its data, its loss, its scoring), the
model-ready `Split`, and the compact `TaskSpec` of sentence(-pair) classification.

A task is a `Task`: which head to put on the encoder, how to read a split into `Split`
arrays (``input_ids``/``input_mask``/``segment_ids`` plus its targets), its loss on the
head's outputs, and how to score (and write) the outputs of a split. `finetune.py` runs
one loop for all of them. Sentence(-pair) classification tasks (GLUE, BBC News) are
described more compactly by a `TaskSpec` (a reader of `Example`s and a metric function)
and wrapped by `tasks.classification.ClassificationTask`.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")


@dataclasses.dataclass(frozen=True)
class QAWindows:
    """How extractive QA (SQuAD-style tasks) cuts contexts into windows and reads answers
    (the original `run_squad.py` flags of the same names)."""

    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0  # v2.0: a null answer when its score wins by this
    train_file: str = ""  # empty: the official name in data_dir
    dev_file: str = ""


@dataclasses.dataclass(frozen=True)
class TaskData:
    """What a task's `Task.load` reads (`FinetuneSettings.task_data`):
    where the data is, how long a row may be, the quick-run subsets and their seed, the
    casing (for answers read back from text) and, for QA tasks, `qa`."""

    data_dir: str = ""
    max_seq_length: int = 128
    max_train_examples: int = 0  # 0 = all
    max_eval_examples: int = 0
    seed: int = 0
    do_lower_case: bool = True
    qa: QAWindows | None = None

    def local(self) -> TaskData:
        """These settings with a ``data_dir`` in a bucket (``gs://...``) read from its local
        copy (`remote_copy.local_folder`; ``tfds:gs://...`` TFDS reads itself), and so the
        QA settings' ``train_file`` and ``dev_file``."""
        from bert_jax.data import remote_copy  # the bucket client, only where one is named
        from bert_jax.storage import files

        data_dir = self.data_dir
        if files.is_remote(data_dir):
            data_dir = remote_copy.local_folder(data_dir, "data_dir")
        qa = self.qa
        if qa is not None and any(files.is_remote(f) for f in (qa.train_file, qa.dev_file)):
            qa = dataclasses.replace(
                qa,
                train_file=remote_copy.local_file(qa.train_file, "train_file") if qa.train_file else "",
                dev_file=remote_copy.local_file(qa.dev_file, "dev_file") if qa.dev_file else "",
            )
        return dataclasses.replace(self, data_dir=data_dir, qa=qa)

    def windows(self, task: str) -> QAWindows:
        """The QA settings, which a QA task cannot do without."""
        if self.qa is None:
            raise ValueError(
                f"task {task} needs the QA settings (config.doc_stride, ...): start from configs/squad.py"
            )
        return self.qa


@dataclasses.dataclass(frozen=True)
class Example:
    """One sentence or sentence pair with its label (None on unlabelled test sets)."""

    text_a: str
    text_b: str | None
    label: int | float | None
    guid: str = ""


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A sentence(-pair) classification or regression task (``labels == ()``)."""

    name: str
    labels: tuple[str, ...]  # () = regression
    read: Callable[[str, str], list[Example]]  # (data_dir, split) -> examples
    metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]]
    main_metric: str
    eval_splits: tuple[str, ...] = ("dev",)
    # split name -> GLUE submission file name (e.g. {"test_matched": "MNLI-m.tsv"})
    test_files: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def num_labels(self) -> int:
        return len(self.labels) or 1


@dataclasses.dataclass
class Split:
    """Model-ready rows of one split and what scoring needs to map them back.

    `arrays` hold `MODEL_INPUTS` and, when labelled, the task's targets; every array has
    one row per model input (a SQuAD window, an NER sentence, a SWAG question). `meta` is
    task-specific (SQuAD: examples and window maps; GLUE: ids for submission files).
    `cut`: the examples whose text did not fit and was cut, at the limit `cut_at` names
    (``max_seq_length=128``; SQuAD's questions at ``max_query_length``).
    """

    name: str
    arrays: dict[str, np.ndarray]
    meta: Any = None
    cut: int = 0
    cut_at: str = ""

    def __len__(self) -> int:
        return len(self.arrays["input_ids"])

    def described(self) -> str:
        """``train 1,780`` and, where texts did not fit, ``(1,512 cut at max_seq_length=128)``."""
        cut = f" ({self.cut:,} cut at {self.cut_at})" if self.cut else ""
        return f"{self.name} {len(self):,}{cut}"


class Task:
    """Interface of a fine-tuning task (see the module docstring)."""

    name: str = ""
    main_metric: str = ""
    eval_splits: tuple[str, ...] = ("dev",)
    test_splits: tuple[str, ...] = ()
    # Training rows may be packed (`bert_jax.finetuning.packing`): the model and loss take packed
    # batches (one label per example slot, weighted by ``label_weights``).
    packable: bool = False
    # The names of the head's outputs where they are labels (a classifier's classes, NER's
    # tags), in output order: an export's ``id2label``. () for a regression or another head.
    label_names: tuple[str, ...] = ()

    def model(self, bert_config: Any) -> Any:
        """The flax module (a head of `bert_jax.model.heads`) with the encoder under ``bert``."""
        raise NotImplementedError

    def load(self, data: TaskData, tokenizer: Any, split: str) -> Split:
        raise NotImplementedError

    def loss(self, outputs: Any, batch: dict[str, Any]) -> Any:
        """Mean loss of a batch (traced inside the jitted train step)."""
        raise NotImplementedError

    def loss_weight(self, batch: dict[str, Any]) -> Any:
        """How many terms `loss` averages over in `batch` (rows; NER: labelled tokens), so
        that micro-batches of gradient accumulation add up to the whole batch exactly."""
        return batch["input_ids"].shape[0]

    def score(self, outputs: Any, split: Split, out_dir: str) -> dict[str, float]:
        """Metrics of a labelled split from the head's outputs (numpy, one row per row of
        `split`); may write prediction files into `out_dir`."""
        raise NotImplementedError

    def write_test(self, outputs: Any, split: Split, out_dir: str) -> str:
        """Writes the predictions of an unlabelled split; returns the file's path."""
        raise NotImplementedError(f"task {self.name} writes no test predictions")


def subset(items: list[Any], data: TaskData, split: str, labels: Sequence[Any] | None = None) -> list[Any]:
    """A smaller split for quick runs, drawn by ``data.seed`` (so the same rows in every
    evaluation of a run, whatever order the file has) and kept in the split's order:
    ``max_train_examples`` of train, ``max_eval_examples`` of any other split. With
    `labels` (one per item: a classification task's labelled split) the draw is
    stratified, each label keeping its share of the split; otherwise it is uniform."""
    n = data.max_train_examples if split == "train" else data.max_eval_examples
    if not n or n >= len(items):
        return items
    rng = np.random.default_rng(data.seed)
    if labels is None or split == "train":  # train: uniform, as max_train_examples says
        chosen = rng.permutation(len(items))[:n]
    else:
        chosen = stratified_sample(labels, n, rng)
    return [items[i] for i in sorted(chosen)]


def stratified_sample(labels: Sequence[Any], n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` indices whose labels keep the proportions of `labels`: each label's items in a
    random order, the i-th of a label of `count` items ranked at ``(i + 0.5) / count``
    (ties broken at random), the `n` lowest ranks taken: every label gets about its share
    ``n * count / len(labels)`` (Sainte-Laguë apportionment), which of its items at random."""
    order = rng.permutation(len(labels))
    counts = collections.Counter(labels[i] for i in order)
    seen: collections.Counter = collections.Counter()
    rank = np.empty(len(labels))
    for i in order:
        rank[i] = (seen[labels[i]] + 0.5) / counts[labels[i]]
        seen[labels[i]] += 1
    return np.lexsort((rng.random(len(labels)), rank))[:n]
