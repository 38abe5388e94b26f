"""SQuAD v1.1 / v2.0 (paper §4.2, §4.3) as a fine-tuning task: official JSON → spans.

The steps follow the original ``run_squad.py``, one module each:
`squad_examples` reads the official JSON into one `SquadExample` per question (the
paragraph split into whitespace words); `squad_windows` turns each question into
``[CLS] question [SEP] window [SEP]`` rows over document-stride windows of the passage's
WordPieces, noting where each piece has its best ("max") context; `squad_answers` picks
the best n-best span (at most `max_answer_length` pieces) and projects it back onto the
original words, for v2.0 answering "" when the [CLS] "null" score beats the best span by
more than a threshold, tuned on dev (`scorers.best_null_threshold`). Their public names
are importable from here too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.model.heads import BertForQuestionAnswering
from bert_jax.storage import atomic_files
from bert_jax.tasks import scorers
from bert_jax.tasks.base import Split, Task, TaskData, subset
from bert_jax.tasks.squad_answers import predict_answers
from bert_jax.tasks.squad_examples import SquadExample, load_json, read_examples, restrict, split_words
from bert_jax.tasks.squad_windows import Windows, featurize

__all__ = [
    "SquadExample",
    "SquadMeta",
    "SquadTask",
    "Windows",
    "featurize",
    "load_json",
    "predict_answers",
    "read_examples",
    "restrict",
    "split_words",
    "write_json",
]


@dataclasses.dataclass
class SquadMeta:
    data: list[dict[str, Any]]  # the raw "data" list, for the official scores
    examples: list[SquadExample]
    windows: Windows
    vocab: Sequence[str]
    options: dict[str, Any]  # do_lower_case, n_best_size, max_answer_length, threshold


def _cross_entropy(logits: Any, positions: Any) -> Any:
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, positions[:, None], axis=-1))


class SquadTask(Task):
    """SQuAD as a fine-tuning task; data files ``<data_dir>/{train,dev}-v{1.1,2.0}.json``
    (the official names) unless ``train_file`` / ``dev_file`` (`QAWindows`) name them."""

    def __init__(self, version_2: bool) -> None:
        self.version_2 = version_2
        self.name = "squad2.0" if version_2 else "squad1.1"
        self.main_metric = "best_f1" if version_2 else "f1"

    def model(self, bert_config: Any) -> Any:
        return BertForQuestionAnswering(bert_config)

    def path(self, data: TaskData, split: str) -> str:
        explicit = {"train": data.windows(self.name).train_file, "dev": data.windows(self.name).dev_file}.get(
            split
        )
        if explicit:
            return explicit
        version = "2.0" if self.version_2 else "1.1"
        return os.path.join(data.data_dir, f"{split}-v{version}.json")

    def load(self, data: TaskData, tokenizer: Any, split: str) -> Split:
        qa = data.windows(self.name)
        dataset, examples = read_examples(self.path(data, split), self.version_2)
        kept = subset(examples, data, split)
        if len(kept) < len(examples):  # score only the questions kept
            dataset, examples = restrict(dataset, {e.qas_id for e in kept}), kept
        training = split == "train"
        arrays, windows = featurize(
            examples, tokenizer, data.max_seq_length, qa.doc_stride, qa.max_query_length, training
        )
        options = {
            "do_lower_case": data.do_lower_case,
            "n_best_size": qa.n_best_size,
            "max_answer_length": qa.max_answer_length,
            "null_score_diff_threshold": qa.null_score_diff_threshold,
        }
        meta = SquadMeta(dataset, examples, windows, tokenizer.vocab, options)
        return Split(split, arrays, meta, windows.questions_cut, f"max_query_length={qa.max_query_length}")

    def loss(self, outputs: Any, batch: dict[str, Any]) -> Any:
        start, end = outputs
        return (
            _cross_entropy(start, batch["start_positions"]) + _cross_entropy(end, batch["end_positions"])
        ) / 2

    def score(self, outputs: Any, split: Split, out_dir: str) -> dict[str, float]:
        """Writes ``predictions.json`` and ``nbest_predictions.json`` (v2.0 also
        ``null_odds.json`` and ``predictions_tuned.json``, at the threshold tuned on this
        split as in the paper's §4.3) into `out_dir`; returns the official scores."""
        meta: SquadMeta = split.meta
        predictions, null_odds, nbest = predict_answers(
            meta.examples,
            meta.windows,
            split.arrays["input_ids"],
            np.asarray(outputs[0]),
            np.asarray(outputs[1]),
            meta.vocab,
            version_2=self.version_2,
            **meta.options,
        )
        os.makedirs(out_dir, exist_ok=True)
        write_json(os.path.join(out_dir, "predictions.json"), predictions)
        write_json(os.path.join(out_dir, "nbest_predictions.json"), nbest)
        if not self.version_2:
            return scorers.squad_v1(meta.data, predictions)
        write_json(os.path.join(out_dir, "null_odds.json"), null_odds)
        scores = scorers.squad_v2(meta.data, predictions, null_odds)
        best_text = {q: next((c["text"] for c in n if c["text"]), "") for q, n in nbest.items()}
        threshold = scores["best_f1_thresh"]
        tuned = {q: "" if null_odds[q] > threshold else best_text[q] for q in predictions}
        write_json(os.path.join(out_dir, "predictions_tuned.json"), tuned)
        return {k: float(v) for k, v in scores.items()}


def write_json(path: str, obj: Any) -> None:
    atomic_files.write_json(path, obj, indent=2, ensure_ascii=False)
