"""A fine-tuning run's settings, resolved once from its config (`FinetuneSettings.from_config`).

The config files and flags stay what users write (`configs/defaults.py: finetuning()` and
the task files); at the entry point (`finetune.finetune`, `feature_based.train`, the
benchmarks) they become this frozen record, checked (`run_config.check`: the job, removed
names, value ranges) and with the eval batch resolved. Library code reads its typed
fields; the engine's share is `TrainingSettings`, the task's `TaskData`.

Names are the pre-training job's wherever the setting is the same (docs/configs.md):
``global_batch_size`` / ``eval_batch_size`` (0 = the training batch), ``max_seq_length``,
``data.vocab_file`` / ``data.do_lower_case``, ``model.hidden_dropout_prob`` /
``model.attention_probs_dropout_prob`` / ``model.vocab_pad_multiple`` (here: changes to the
checkpoint's model).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from bert_jax.tasks.base import TaskData
from bert_jax.training import run_config
from bert_jax.training.settings import TrainingSettings


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
    """Everything one fine-tuning run reads."""

    task: str
    init_checkpoint: str  # empty: the bundled MiniLM BERT
    random_init: bool  # the checkpoint's architecture, fresh seeded weights (the baseline)
    random_init_baseline: bool  # after the run, the random-init run beside it (`baseline`)
    vocab_file: str  # empty: the vocabulary beside the checkpoint
    do_lower_case: bool
    hidden_dropout_prob: float
    attention_probs_dropout_prob: float
    vocab_pad_multiple: int  # 0: the checkpoint's own
    max_seq_length: int
    length_buckets: tuple[int, ...]
    pack_examples: bool
    pack_row_multiple: int  # packed rows a batch rounded up to a multiple of this
    global_batch_size: int
    eval_batch_size: int  # resolved: never 0
    num_epochs: int
    predict_test: bool
    save_best_model: bool
    data: TaskData
    training: TrainingSettings
    config: dict[str, Any]  # the config as written, for the records (``task.json``)

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> FinetuneSettings:
        run_config.check(config, "finetune")
        batch = int(config.global_batch_size)
        return cls(
            task=str(config.task),
            init_checkpoint=str(config.init_checkpoint),
            random_init=bool(config.random_init),
            random_init_baseline=bool(config.random_init_baseline),
            vocab_file=str(config.data.vocab_file),
            do_lower_case=bool(config.data.do_lower_case),
            hidden_dropout_prob=float(config.model.hidden_dropout_prob),
            attention_probs_dropout_prob=float(config.model.attention_probs_dropout_prob),
            vocab_pad_multiple=int(config.model.vocab_pad_multiple),
            max_seq_length=int(config.max_seq_length),
            length_buckets=tuple(int(b) for b in config.length_buckets),
            pack_examples=bool(config.pack_examples),
            pack_row_multiple=int(config.pack_row_multiple),
            global_batch_size=batch,
            eval_batch_size=int(config.eval_batch_size) or batch,
            num_epochs=int(config.num_epochs),
            predict_test=bool(config.predict_test),
            save_best_model=bool(config.save_best_model),
            data=TaskData.from_config(config),
            training=TrainingSettings.from_config(config),
            config=config.to_dict(),
        )

    @property
    def seed(self) -> int:
        return self.training.seed

    @property
    def learning_rate(self) -> float:
        return self.training.optimizer.learning_rate
