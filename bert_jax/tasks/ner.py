"""CoNLL-2003 named-entity recognition (paper §5.3) as token tagging.

Data: the CoNLL format, one ``word POS chunk NER`` line per token, sentences separated by
blank lines, ``-DOCSTART-`` lines between documents; files ``<data_dir>/{train,valid,test}
.txt`` (the TFDS names) or the release's ``eng.train``/``eng.testa``/``eng.testb``.

Each word is split into WordPieces and only its first piece carries the word's tag (the
paper's choice; the other pieces get no loss and no prediction). Scores are entity-level
precision/recall/F1 (`scorers.entity_f1`, conlleval's chunking as seqeval), so a word that
did not fit into `max_seq_length` counts as predicted ``O``.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.model.heads import BertForTokenClassification
from bert_jax.tasks import scorers
from bert_jax.tasks.base import Split, Task, TaskData, subset

TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
IGNORE = -1  # target of pieces that are not a word's first piece (and of padding)

_FILES = {
    "train": ("train.txt", "eng.train"),
    "dev": ("valid.txt", "dev.txt", "eng.testa"),
    "test": ("test.txt", "eng.testb"),
}


@dataclasses.dataclass(frozen=True)
class Sentence:
    words: list[str]
    tags: list[str]
    line: int  # line number of its first word, for messages


def read_conll(path: str, tags: tuple[str, ...] | None = TAGS) -> list[Sentence]:
    """Sentences of a CoNLL file; a tag outside `tags` (None: any tag) or a line without a
    tag is an error naming the file and the line."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"CoNLL file {path} does not exist")
    sentences: list[Sentence] = []
    words: list[str] = []
    labels: list[str] = []
    start = 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            fields = line.split()
            if not fields or fields[0] == "-DOCSTART-":
                if words:
                    sentences.append(Sentence(words, labels, start))
                words, labels = [], []
                continue
            if len(fields) < 2:
                raise ValueError(f"{path}:{number}: expected 'word ... TAG', got {line.strip()!r}")
            if tags is not None and fields[-1] not in tags:
                raise ValueError(f"{path}:{number}: tag {fields[-1]!r} is not one of {list(tags)}")
            if not words:
                start = number
            words.append(fields[0])
            labels.append(fields[-1])
    if words:
        sentences.append(Sentence(words, labels, start))
    if not sentences:
        raise ValueError(f"{path}: no sentences (empty split)")
    return sentences


def split_path(data_dir: str, split: str) -> str:
    names = _FILES.get(split, (f"{split}.txt",))
    for name in names:
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    return os.path.join(data_dir, names[0])


@dataclasses.dataclass
class NerMeta:
    sentences: list[Sentence]
    first_piece: list[np.ndarray]  # per sentence: position of each word's first piece, -1 if cut


def featurize(
    sentences: list[Sentence], tokenizer: Any, max_seq_length: int, tags: tuple[str, ...] = TAGS
) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """``[CLS] pieces [SEP]`` rows; ``labels`` hold the tag id at first pieces, else -1."""
    unique = list(dict.fromkeys(w for s in sentences for w in s.words))
    pieces = dict(zip(unique, tokenizer.tokenize(unique), strict=True))
    special, n = tokenizer.special, len(sentences)
    ids = np.full((n, max_seq_length), special.pad, np.int32)
    mask = np.zeros((n, max_seq_length), np.int32)
    targets = np.full((n, max_seq_length), IGNORE, np.int32)
    first_pieces = []
    for i, s in enumerate(sentences):
        row, first = [special.cls], np.full(len(s.words), -1, np.int32)
        for w, (word, tag) in enumerate(zip(s.words, s.tags, strict=True)):
            word_pieces = pieces[word] or [special.unk]  # a word must keep a position
            if len(row) + len(word_pieces) > max_seq_length - 1:
                break
            first[w] = len(row)
            targets[i, len(row)] = tags.index(tag)
            row.extend(word_pieces)
        row.append(special.sep)
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
        first_pieces.append(first)
    arrays = {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids), "labels": targets}
    return arrays, first_pieces


def decode(
    logits: np.ndarray, first_pieces: list[np.ndarray], tags: tuple[str, ...] = TAGS
) -> list[list[str]]:
    """Word-level tags from piece logits [N, S, T]: the first piece's argmax; "O" for cut words."""
    best = np.asarray(logits).argmax(-1)
    return [[tags[best[i, p]] if p >= 0 else "O" for p in first] for i, first in enumerate(first_pieces)]


class NerTask(Task):
    """CoNLL-2003's tags (`TAGS`), or another IOB2 tag set (`tags`)."""

    name = "conll2003"
    main_metric = "f1"
    test_splits = ("test",)

    def __init__(self, tags: tuple[str, ...] = TAGS) -> None:
        self.label_names = tags

    def model(self, bert_config: Any) -> Any:
        return BertForTokenClassification(bert_config, num_labels=len(self.label_names))

    def load(self, data: TaskData, tokenizer: Any, split: str) -> Split:
        sentences = subset(read_conll(split_path(data.data_dir, split), self.label_names), data, split)
        arrays, first = featurize(sentences, tokenizer, data.max_seq_length, self.label_names)
        cut = sum(bool(np.any(f < 0)) for f in first)  # their words past the row count as "O"
        return Split(split, arrays, NerMeta(sentences, first), cut, f"max_seq_length={data.max_seq_length}")

    def loss(self, outputs: Any, batch: dict[str, Any]) -> Any:
        labels = batch["labels"]
        keep = labels != IGNORE
        ce = optax.softmax_cross_entropy_with_integer_labels(outputs, jnp.where(keep, labels, 0))
        return jnp.sum(ce * keep) / jnp.maximum(jnp.sum(keep), 1)

    def loss_weight(self, batch: dict[str, Any]) -> Any:
        return jnp.sum(batch["labels"] != IGNORE)

    def score(self, outputs: Any, split: Split, out_dir: str) -> dict[str, float]:
        meta: NerMeta = split.meta
        predicted = decode(outputs, meta.first_piece, self.label_names)
        self._write(meta, predicted, os.path.join(out_dir, f"{split.name}_predictions.txt"))
        return scorers.entity_f1([s.tags for s in meta.sentences], predicted)

    def write_test(self, outputs: Any, split: Split, out_dir: str) -> str:
        path = os.path.join(out_dir, f"{split.name}_predictions.txt")
        self._write(split.meta, decode(outputs, split.meta.first_piece, self.label_names), path)
        return path

    @staticmethod
    def _write(meta: NerMeta, predicted: list[list[str]], path: str) -> None:
        """``word gold predicted`` per line, blank line per sentence (conlleval's input)."""
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for s, tags in zip(meta.sentences, predicted, strict=True):
                for word, gold, pred in zip(s.words, s.tags, tags, strict=True):
                    f.write(f"{word} {gold} {pred}\n")
                f.write("\n")
