"""Any fine-tuning task with a randomly initialised BiLSTM between the encoder and its
output layer (Table 5's "+ BiLSTM" row): the task ``<name>+bilstm``.

`BiLSTMTask` reads, scores and computes the loss exactly as the task it wraps; only its
model differs (`bert_jax.model.bilstm`), with outputs of the same shapes. `bert_jax.tasks.registry.get_task`
resolves ``<task>+bilstm`` names to it.
"""

from __future__ import annotations

from typing import Any

from bert_jax.model import bilstm, heads
from bert_jax.tasks.base import Task

SUFFIX = "+bilstm"


class BiLSTMTask(Task):
    def __init__(self, inner: Task, lstm_size: int = 0, lstm_layers: int = 1) -> None:
        self.inner, self.lstm_size, self.lstm_layers = inner, lstm_size, lstm_layers
        self.name = inner.name + SUFFIX
        self.eval_splits = inner.eval_splits
        self.test_splits = inner.test_splits

    @property
    def main_metric(self) -> str:  # the inner task's, also once its data has set it
        return self.inner.main_metric

    @property
    def label_names(self) -> tuple[str, ...]:  # the inner task's (own data: once it is read)
        return self.inner.label_names

    def model(self, bert_config: Any) -> Any:
        base = self.inner.model(bert_config)
        size = dict(lstm_size=self.lstm_size, lstm_layers=self.lstm_layers)
        if isinstance(base, heads.BertForSequenceClassification):
            return bilstm.BertBiLSTMForSequenceClassification(bert_config, base.num_labels, **size)
        if isinstance(base, heads.BertForTokenClassification):
            return bilstm.BertBiLSTMForTokenClassification(bert_config, base.num_labels, **size)
        if isinstance(base, heads.BertForQuestionAnswering):
            return bilstm.BertBiLSTMForQuestionAnswering(bert_config, **size)
        if isinstance(base, heads.BertForMultipleChoice):
            return bilstm.BertBiLSTMForMultipleChoice(bert_config, **size)
        raise ValueError(f"task {self.inner.name}: no BiLSTM variant of {type(base).__name__}")

    def load(self, data: Any, tokenizer: Any, split: str) -> Any:
        return self.inner.load(data, tokenizer, split)

    def loss(self, outputs: Any, batch: dict[str, Any]) -> Any:
        return self.inner.loss(outputs, batch)

    def loss_weight(self, batch: dict[str, Any]) -> Any:
        return self.inner.loss_weight(batch)

    def score(self, outputs: Any, split: Any, out_dir: str) -> dict[str, float]:
        return self.inner.score(outputs, split, out_dir)

    def write_test(self, outputs: Any, split: Any, out_dir: str) -> str:
        return self.inner.write_test(outputs, split, out_dir)
