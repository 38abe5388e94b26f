"""Fine-tuning tasks: each reads its data into `Example`s and names its metrics.

A task is a `TaskSpec`: labels (empty for regression), a reader per split, and a metric
function; `finetune.py` runs the same loop for all of them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np


@dataclasses.dataclass(frozen=True)
class Example:
    text_a: str
    text_b: str | None
    label: int | float | None  # None on unlabelled test sets
    guid: str = ""


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    name: str
    labels: tuple[str, ...]  # () = regression
    read: Callable[[str, str], list[Example]]  # (data_dir, split) -> examples
    metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]]
    main_metric: str

    @property
    def num_labels(self) -> int:
        return len(self.labels) or 1


def get_task(name: str) -> TaskSpec:
    from bert_jax.tasks import bbc, glue

    registry = {**glue.TASKS, "bbc": bbc.TASK}
    if name not in registry:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(sorted(registry))}")
    return registry[name]
