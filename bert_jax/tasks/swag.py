"""SWAG (paper §4.4): pick the most plausible of four continuations of a sentence.

Data: the release's CSV files ``<data_dir>/{train,val,test}.csv`` with the columns
``video-id, fold-ind, startphrase, sent1, sent2, gold-source, ending0..ending3, label``
(no ``label`` in test). Each choice is the pair ``[CLS] sent1 [SEP] sent2 ending_i [SEP]``;
the head scores each choice from its [CLS] vector and a softmax runs over the four.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.model.heads import BertForMultipleChoice
from bert_jax.tasks import scorers
from bert_jax.tasks.base import Split, Task, TaskData, subset

NUM_CHOICES = 4
_FILES = {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}
_COLUMNS = ("sent1", "sent2", *(f"ending{i}" for i in range(NUM_CHOICES)))


@dataclasses.dataclass(frozen=True)
class SwagExample:
    guid: str
    context: str  # sent1
    start: str  # sent2, the beginning of the second sentence
    endings: tuple[str, ...]
    label: int | None


def read_swag(path: str, labelled: bool) -> list[SwagExample]:
    """Examples of a SWAG CSV; errors name the file and line (a missing column, a label
    that is not 0-3, an empty file)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"SWAG file {path} does not exist")
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty file (no header)")
        wanted = (*_COLUMNS, "label") if labelled else _COLUMNS
        missing = [c for c in wanted if c not in header]
        if missing:
            raise ValueError(f"{path}:1: missing column(s) {missing} in the header")
        index = {c: header.index(c) for c in wanted}
        out = []
        for row in reader:
            line = reader.line_num
            if not any(row):
                continue
            if len(row) != len(header):
                raise ValueError(f"{path}:{line}: {len(row)} fields, the header has {len(header)}")
            label = None
            if labelled:
                raw = row[index["label"]].strip()
                if raw not in {str(i) for i in range(NUM_CHOICES)}:
                    raise ValueError(f"{path}:{line}: label {raw!r} is not one of 0-{NUM_CHOICES - 1}")
                label = int(raw)
            endings = tuple(row[index[f"ending{i}"]] for i in range(NUM_CHOICES))
            out.append(SwagExample(str(line), row[index["sent1"]], row[index["sent2"]], endings, label))
    if not out:
        raise ValueError(f"{path}: no examples (empty split)")
    return out


def featurize(
    examples: list[SwagExample], tokenizer: Any, max_seq_length: int
) -> tuple[dict[str, np.ndarray], int]:
    """[N, 4, S] inputs (and [N] labels when known), and how many questions had a choice cut."""
    contexts = [e.context for e in examples for _ in range(NUM_CHOICES)]
    endings = [f"{e.start} {ending}".strip() for e in examples for ending in e.endings]
    flat, lengths = tokenizer.encode_pairs_measured(contexts, endings, max_seq_length)
    arrays = {k: v.reshape(len(examples), NUM_CHOICES, max_seq_length) for k, v in flat.items()}
    if all(e.label is not None for e in examples):
        arrays["labels"] = np.array([e.label for e in examples], np.int32)
    return arrays, int(np.sum(lengths.reshape(len(examples), NUM_CHOICES).max(1) > max_seq_length))


class SwagTask(Task):
    name = "swag"
    main_metric = "accuracy"
    test_splits = ("test",)

    def model(self, bert_config: Any) -> Any:
        return BertForMultipleChoice(bert_config)

    def load(self, data: TaskData, tokenizer: Any, split: str) -> Split:
        path = os.path.join(data.data_dir, _FILES.get(split, f"{split}.csv"))
        examples = subset(read_swag(path, labelled=split != "test"), data, split)
        arrays, cut = featurize(examples, tokenizer, data.max_seq_length)
        return Split(split, arrays, examples, cut, f"max_seq_length={data.max_seq_length}")

    def loss(self, outputs: Any, batch: dict[str, Any]) -> Any:
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(outputs, batch["labels"]))

    def score(self, outputs: Any, split: Split, out_dir: str) -> dict[str, float]:
        return {"accuracy": scorers.accuracy(split.arrays["labels"], np.argmax(outputs, -1))}

    def write_test(self, outputs: Any, split: Split, out_dir: str) -> str:
        """``<out_dir>/swag_test.csv``: the example's line and the four choice scores."""
        path = os.path.join(out_dir, f"swag_{split.name}.csv")
        os.makedirs(out_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["line", "pred", *(f"score{i}" for i in range(NUM_CHOICES))])
            for e, scores in zip(split.meta, np.asarray(outputs), strict=True):
                writer.writerow([e.guid, int(np.argmax(scores)), *(f"{s:.6f}" for s in scores)])
        return path
