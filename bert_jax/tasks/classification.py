"""Sentence(-pair) classification and regression (GLUE, BBC News) as a fine-tuning `Task`:
``[CLS] A [SEP] B [SEP]``, the pooled [CLS] vector → one dense layer (paper §4.1)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.model.heads import BertForSequenceClassification
from bert_jax.tasks import glue
from bert_jax.tasks.base import Split, Task, TaskData, TaskSpec, subset


class ClassificationTask(Task):
    packable = True

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.eval_splits = spec.eval_splits
        self.test_splits = tuple(spec.test_files)

    # What the spec says (a task that learns its labels from its data replaces its spec).
    @property
    def main_metric(self) -> str:
        return self.spec.main_metric

    @property
    def regression(self) -> bool:
        return not self.spec.labels

    @property
    def label_names(self) -> tuple[str, ...]:
        return self.spec.labels

    def model(self, bert_config: Any) -> Any:
        return BertForSequenceClassification(bert_config, num_labels=self.spec.num_labels)

    def load(self, data: TaskData, tokenizer: Any, split: str) -> Split:
        examples = self.spec.read(data.data_dir, split)
        labelled = not self.regression and all(e.label is not None for e in examples)
        examples = subset(examples, data, split, [e.label for e in examples] if labelled else None)
        pairs = any(e.text_b is not None for e in examples)
        arrays, lengths = tokenizer.encode_pairs_measured(
            [e.text_a for e in examples],
            [e.text_b or "" for e in examples] if pairs else None,
            data.max_seq_length,
        )
        if all(e.label is not None for e in examples):
            dtype = np.float32 if self.regression else np.int32
            arrays["labels"] = np.array([e.label for e in examples], dtype)
        cut = int(np.sum(lengths > data.max_seq_length))
        return Split(split, arrays, examples, cut, f"max_seq_length={data.max_seq_length}")

    def loss(self, outputs: Any, batch: dict[str, Any]) -> Any:
        """Mean over the batch's examples (packed: over the slots ``label_weights`` marks)."""
        if self.regression:
            per_example = (outputs[..., 0] - batch["labels"]) ** 2
        else:
            per_example = optax.softmax_cross_entropy_with_integer_labels(outputs, batch["labels"])
        if "label_weights" not in batch:
            return jnp.mean(per_example)
        weights = batch["label_weights"]
        return jnp.sum(per_example * weights) / jnp.maximum(jnp.sum(weights), 1.0)

    def loss_weight(self, batch: dict[str, Any]) -> Any:
        if "label_weights" not in batch:
            return batch["input_ids"].shape[0]

        return jnp.sum(batch["label_weights"])

    def predictions(self, outputs: np.ndarray) -> np.ndarray:
        return outputs[:, 0] if self.regression else np.argmax(outputs, -1)

    def score(self, outputs: Any, split: Split, out_dir: str) -> dict[str, float]:
        if "labels" not in split.arrays:
            raise ValueError(f"{self.name}: the {split.name} split has no labels to score")
        return self.spec.metrics(split.arrays["labels"], self.predictions(np.asarray(outputs)))

    def write_test(self, outputs: Any, split: Split, out_dir: str) -> str:
        if split.name not in self.spec.test_files:
            raise ValueError(f"{self.name}: no submission file for split {split.name!r}")
        return glue.write_submission(
            self.name, split.name, split.meta, self.predictions(np.asarray(outputs)), out_dir
        )
