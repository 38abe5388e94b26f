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

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")


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
    """

    name: str
    arrays: dict[str, np.ndarray]
    meta: Any = None

    def __len__(self) -> int:
        return len(self.arrays["input_ids"])


class Task:
    """Interface of a fine-tuning task (see the module docstring)."""

    name: str = ""
    main_metric: str = ""
    eval_splits: tuple[str, ...] = ("dev",)
    test_splits: tuple[str, ...] = ()
    # Training rows may be packed (`bert_jax.finetuning.packing`): the model and loss take packed
    # batches (one label per example slot, weighted by ``label_weights``).
    packable: bool = False

    def model(self, bert_config: Any) -> Any:
        """The flax module (a head of `bert_jax.model.heads`) with the encoder under ``bert``."""
        raise NotImplementedError

    def load(self, config: Any, tokenizer: Any, split: str) -> Split:
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


def subset(items: list[Any], config: Any, split: str) -> list[Any]:
    """A smaller split for quick runs: ``max_train_examples`` drawn at random (by
    ``config.seed``) from train, the first ``max_eval_examples`` of any other split."""
    if split == "train":
        n = int(config.max_train_examples)
        if n and n < len(items):
            order = np.random.default_rng(int(config.seed)).permutation(len(items))[:n]
            return [items[i] for i in sorted(order)]
        return items
    n = int(config.max_eval_examples)
    return items[:n] if n else items
