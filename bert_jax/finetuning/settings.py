"""A fine-tuning run's settings, resolved once from its config (`bert_jax.commands.run_settings`).

The config files and flags stay what users write (`configs/defaults.py: finetuning()` and
the task files); at the command's edge they become this frozen record (the resolver,
`bert_jax.training.resolver`: every key typed and range-checked, each field named as its
key), with the eval batch resolved. Library code reads its typed fields; the engine's
share is `TrainingSettings`, the task's `TaskData` (`task_data`).

Names are the pre-training job's wherever the setting is the same (docs/configs.md):
``global_batch_size`` / ``eval_batch_size`` (0 = the training batch), ``max_seq_length``,
``data.vocab_file`` / ``data.do_lower_case``, ``model.hidden_dropout_prob`` /
``model.attention_probs_dropout_prob`` / ``model.vocab_pad_multiple`` (here: changes to the
checkpoint's model).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from bert_jax.data import tokenization
from bert_jax.setting_fields import (
    FRACTION,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    SEQUENCE_LENGTH,
    block,
    flat,
    setting,
)
from bert_jax.tasks.base import QAWindows, TaskData
from bert_jax.training import resolver
from bert_jax.training.settings import CheckpointSettings, OptimizerSettings, TrainingSettings


@dataclasses.dataclass(frozen=True)
class TextSettings:
    """How a task's text becomes ids (the ``data`` block: pre-training's keys)."""

    vocab_file: str = ""  # empty: the vocabulary beside the checkpoint
    # None: the casing recorded beside that vocabulary (`tokenization.casing`: the
    # tokenizer_config.json `convert`, `transformers` and a pre-training run write), else True.
    do_lower_case: bool | None = None


@dataclasses.dataclass(frozen=True)
class ModelChanges:
    """Changes to the checkpoint's model (the ``model`` block: pre-training's keys): the
    paper's fine-tuning dropout; vocabulary rows padded to a multiple of
    ``vocab_pad_multiple`` (128 lets tensor parallelism of 2..128 split them), 0 keeping the
    checkpoint's own (1 for Hugging Face and TF checkpoints)."""

    hidden_dropout_prob: float = setting(0.1, FRACTION)
    attention_probs_dropout_prob: float = setting(0.1, FRACTION)
    vocab_pad_multiple: int = setting(0, NON_NEGATIVE_INT)


@dataclasses.dataclass(frozen=True)
class SweepGrid:
    """The grid of the ``sweep`` block (the paper's, §A.3): every combination runs once per
    seed. Tuples, so that ``--config.sweep.seeds="(0, 1)"`` overrides them."""

    global_batch_sizes: tuple[int, ...] = setting((16, 32), POSITIVE_INT)
    learning_rates: tuple[float, ...] = setting((5e-5, 4e-5, 3e-5, 2e-5), POSITIVE)
    epochs: tuple[int, ...] = setting((2, 3, 4), POSITIVE_INT)
    seeds: tuple[int, ...] = setting((0, 1, 2), NON_NEGATIVE_INT)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            if not getattr(self, f.name):
                raise ValueError(f"config.sweep.{f.name} must be a non-empty list of values")

    def points(self) -> list[tuple[int, float, int, int]]:
        """(batch, learning rate, epochs, seed) of every run, in grid order."""
        return list(itertools.product(self.global_batch_sizes, self.learning_rates, self.epochs, self.seeds))


def _training() -> TrainingSettings:
    """Fine-tuning's defaults of the shared training keys (the paper's §A.3)."""
    return TrainingSettings(
        seed=0,
        optimization=OptimizerSettings(learning_rate=5e-5, warmup_proportion=0.1),
        checkpoints=CheckpointSettings(checkpoint_every_steps=500, keep_checkpoints=1),  # removed when done
    )


@dataclasses.dataclass(frozen=True)
class FinetuneSettings:
    """Everything one fine-tuning run reads: the keys of `configs/defaults.py: finetuning()`
    (these defaults) and the task files (`glue.py`, `squad.py`, ...)."""

    task: str = "bbc"
    data_dir: str = ""  # task-specific: GLUE folder or "tfds", SQuAD/CoNLL/SWAG folder
    init_checkpoint: str = ""  # empty: the MiniLM BERT bundled for offline use
    # True: init_checkpoint's architecture and vocabulary with freshly initialised weights
    # (seeded by `seed`): the random-init baseline a pre-trained encoder is compared with.
    random_init: bool = False
    # True: after the run, the same fine-tuning from freshly initialised weights into
    # <workdir>/random_init/, printed beside it (`bert_jax.finetuning.baseline`).
    random_init_baseline: bool = False
    # True: train on from init_checkpoint's own task head (a fine-tuned checkpoint of the
    # task's kind; classes matched by name), as the paper's SQuAD system went on from
    # TriviaQA (§4.2); False: a fresh head (`finetuning.checkpoint_head`).
    keep_head: bool = False
    data: TextSettings = block(TextSettings)
    model: ModelChanges = block(ModelChanges)
    max_seq_length: int = setting(128, SEQUENCE_LENGTH)
    # Batches are cut to the shortest of these lengths (<= max_seq_length) that holds
    # their longest row: a few compiled programs instead of padding every row to the
    # maximum. () pads every batch to max_seq_length.
    length_buckets: tuple[int, ...] = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
    # Sentence(-pair) classification and regression: the examples of a batch share rows of
    # max_seq_length (each attends to itself only, positions restart; same logits as alone),
    # so short sentences compute little padding; evaluation packs too. Other tasks use
    # length_buckets.
    pack_examples: bool = True
    # Packed batches hold a varying number of rows and each count compiles a program: >1
    # rounds the count up to a multiple (a few programs an epoch, up to multiple-1 empty rows
    # a batch). 1 suits long runs (no padding); short runs gain (configs/downstream.py: 4).
    pack_row_multiple: int = setting(1, POSITIVE_INT)
    global_batch_size: int = setting(32, POSITIVE_INT)
    eval_batch_size: int = setting(0, NON_NEGATIVE_INT)  # 0 = global_batch_size (`eval_batch`)
    num_epochs: int = setting(3, POSITIVE_INT)
    max_train_examples: int = setting(0, NON_NEGATIVE_INT)  # 0 = all; a seeded random subset otherwise
    max_eval_examples: int = setting(0, NON_NEGATIVE_INT)  # 0 = all; a subset drawn by seed (stratified)
    predict_test: bool = False  # write test-set predictions (GLUE submission files, ...) at the end
    save_best_model: bool = True  # the best epoch's encoder + head in <workdir>/best_model/
    qa: QAWindows | None = flat(lambda: None)  # span tasks' keys (configs/squad.py sets them)
    training: TrainingSettings = flat(_training)
    sweep: SweepGrid = block(SweepGrid)  # `bert-jax finetune --sweep`
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # as written, for ``task.json``

    def for_checkpoint(self, checkpoint: str) -> FinetuneSettings:
        """These settings with the casing decided for `checkpoint`: ``data.do_lower_case``
        as given, else the one recorded beside the vocabulary in use (``data.vocab_file``,
        else the checkpoint's own), else True."""
        if self.data.do_lower_case is not None:
            return self
        lower = tokenization.casing(None, self.data.vocab_file or tokenization.vocab_beside(checkpoint))
        # The config as written says it too, as the run used it (`results.json`, the
        # comparison of a finished run with a rerun's config).
        return resolver.updated(self, {"data.do_lower_case": lower})

    @property
    def task_data(self) -> TaskData:
        """What the task's `Task.load` reads."""
        return TaskData(
            data_dir=self.data_dir,
            max_seq_length=self.max_seq_length,
            max_train_examples=self.max_train_examples,
            max_eval_examples=self.max_eval_examples,
            seed=self.seed,
            do_lower_case=self.data.do_lower_case,
            qa=self.qa,
        )

    @property
    def seed(self) -> int:
        return self.training.seed

    @property
    def eval_batch(self) -> int:
        """The evaluation batch: ``eval_batch_size``, or with 0 the training batch."""
        return self.eval_batch_size or self.global_batch_size

    @property
    def learning_rate(self) -> float:
        return self.training.optimization.learning_rate
