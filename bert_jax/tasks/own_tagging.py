"""Token tagging (named entities, or any IOB2 tags) on a user's own CoNLL files:
``configs/tag.py`` with ``--config.data_dir=DIR``.

DIR holds ``train.txt``, ``dev.txt`` (or ``valid.txt``) and ``test.txt`` to predict, in
the CoNLL layout: one token a line with its tag last (``word TAG``, or ``word POS chunk
TAG`` as CoNLL-2003), a blank line between sentences. The tags are IOB2 (``O``,
``B-TYPE``, ``I-TYPE``) and the types are the train file's (both tags of each); a dev tag
of another type is refused in one line naming the file and line. As CoNLL-2003
(`bert_jax.tasks.ner`): the first WordPiece of each word carries its tag, entity-level F1
(conlleval's chunking), ``<split>_predictions.txt`` with ``word gold predicted`` lines.
"""

from __future__ import annotations

import os
from typing import Any

from bert_jax.tasks import ner
from bert_jax.tasks.base import Split, TaskData

NAME = "tag"


def iob_tags(seen: set[str], path: str) -> tuple[str, ...]:
    """``O`` then ``B-`` and ``I-`` of each type in `seen`, types sorted."""
    bad = sorted(t for t in seen if t != "O" and not (t.startswith(("B-", "I-")) and len(t) > 2))
    if bad:
        raise ValueError(f"{path}: tag {bad[0]!r} is not IOB2 (O, B-TYPE or I-TYPE)")
    types = sorted({t[2:] for t in seen if t != "O"})
    if not types:
        raise ValueError(f"{path}: every tag is O: nothing to tag")
    return ("O", *(f"{prefix}-{t}" for t in types for prefix in "BI"))


class OwnTaggingTask(ner.NerTask):
    """`ner.NerTask` whose tags come from the train file (read at the first `load`: the
    model is made after the splits are read)."""

    name = NAME

    def __init__(self) -> None:
        super().__init__(tags=())
        self.data_dir: str | None = None

    def load(self, data: TaskData, tokenizer: Any, split: str) -> Split:
        if self.data_dir != data.data_dir:
            self._learn_tags(data.data_dir)
        return super().load(data, tokenizer, split)

    def _learn_tags(self, data_dir: str) -> None:
        if not data_dir:
            raise ValueError(f"task {NAME}: set config.data_dir to the folder of your CoNLL files")
        path = ner.split_path(data_dir, "train")
        if not os.path.exists(path) and os.path.exists(ner.split_path(data_dir, "dev")):
            path = ner.split_path(data_dir, "dev")  # scoring a fine-tuned model on dev alone
        seen = {t for s in ner.read_conll(path, tags=None) for t in s.tags}
        self.label_names, self.data_dir = iob_tags(seen, path), data_dir
