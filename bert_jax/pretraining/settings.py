"""A pre-training run's settings: the typed record of its config.

The config files and flags stay what users write (`configs/pretrain.py` on
`configs/defaults.py`); at the command's edge (`bert_jax.commands.run_settings`, for every
command, the Python API and the benchmarks) they become this frozen record, each key typed
and range-checked beside its field (`bert_jax.setting_fields`), the model built at the
config's vocabulary size. The pre-training job (`Pretraining`, the phases, the
evaluation hook) reads typed fields from here; the engine's share is `TrainingSettings`,
the data layer's `DataSettings`.

A run's settings carry the vocabulary size it trains with (``model.vocab_size=0``: the
tokenizer's, `model_vocab.planned_size`), known without reading any data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bert_jax.data.settings import DataSettings
from bert_jax.model.config import BertConfig
from bert_jax.model.numerics import REMAT_POLICIES
from bert_jax.setting_fields import (
    FRACTION,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    SEQUENCE_LENGTH,
    block,
    flat,
    setting,
)
from bert_jax.training.settings import TrainingSettings


@dataclasses.dataclass(frozen=True)
class Phase:
    """Steps [start, end) at one sequence length (the paper's 128 then 512)."""

    start: int
    end: int
    max_seq_length: int
    max_predictions_per_seq: int


@dataclasses.dataclass(frozen=True)
class PhaseStep:
    """How a phase's train step saves memory: its remat policy and its
    gradient-accumulation micro-batches. Neither changes the step's result."""

    remat_policy: str
    grad_accum_steps: int


def step_words(global_batch_size: int, seq: int, predictions: int, remat: str, accum: int) -> str:
    """A phase's step in words, as `plan` and the run's compile lines print it."""
    return (
        f"{global_batch_size} x {seq} ({predictions} predictions), "
        f"remat {remat}, {accum} micro-batch{'es' if accum > 1 else ''}"
    )


@dataclasses.dataclass(frozen=True)
class PretrainSettings:
    """Everything one pre-training run reads: the keys of `configs/pretrain.py`, whose
    defaults are these fields' (the paper's schedule: 1M steps of 256 x 128, evaluated every
    10,000 steps; the shared training keys and the ``data`` block default to
    `TrainingSettings` and `DataSettings`), its sizes and recipes changing some."""

    model: BertConfig
    num_train_steps: int = setting(1_000_000, POSITIVE_INT)
    global_batch_size: int = setting(256, POSITIVE_INT)
    max_seq_length: int = setting(128, SEQUENCE_LENGTH)
    max_predictions_per_seq: int = setting(20, POSITIVE_INT)
    # > 0: the last share of the steps at phase2_max_seq_length (the paper's 10% at 512).
    phase2_fraction: float = setting(0.0, FRACTION)
    phase2_max_seq_length: int = setting(512, SEQUENCE_LENGTH)
    phase2_max_predictions_per_seq: int = setting(80, POSITIVE_INT)
    phase2_remat_policy: str = setting("", choices=("", *REMAT_POLICIES))  # "": phase 1's
    phase2_grad_accum_steps: int = setting(0, NON_NEGATIVE_INT)  # 0: phase 1's
    eval_every_steps: int = setting(10_000, NON_NEGATIVE_INT)  # 0: no evaluation during the run
    # Batches per evaluation: the first of the held-out order; 0: the whole held-out split.
    eval_steps: int = setting(100, NON_NEGATIVE_INT)
    eval_batch_size: int = setting(0, NON_NEGATIVE_INT)  # 0: global_batch_size (`eval_batch`)
    baseline_batches: int = setting(0, NON_NEGATIVE_INT)  # > 0: the unigram baseline from that many batches
    compilation_cache_dir: str = ""  # "": the workdir's; "none": off (`bert_jax.training.compile_cache`)
    # A checkpoint to continue pre-training from (a Hugging Face folder, an original TF
    # checkpoint, a bert_jax export or workdir): its model and, unless data.vocab_file says
    # otherwise, its vocabulary; its weights at step 0 (`pretraining.init_checkpoint`).
    init_checkpoint: str = ""
    preset: str = ""  # the preset the config was built from (records)
    data: DataSettings = block(DataSettings)
    training: TrainingSettings = flat(TrainingSettings)  # phase 1's remat policy and accumulation
    config: dict[str, Any] = dataclasses.field(default_factory=dict)  # as written (records, hosts' check)

    def __post_init__(self) -> None:
        self._check_positions()
        batch = self.global_batch_size
        if batch % self.training.grad_accum_steps:
            raise ValueError(
                f"config.global_batch_size={batch} does not split into "
                f"config.grad_accum_steps={self.training.grad_accum_steps} micro-batches"
            )
        if self.phase2_grad_accum_steps and batch % self.phase2_grad_accum_steps:
            raise ValueError(
                f"config.phase2_grad_accum_steps={self.phase2_grad_accum_steps} must split "
                f"config.global_batch_size={batch} into equal micro-batches (0: grad_accum_steps)"
            )

    def _check_positions(self) -> None:
        """A learned position table must hold every position of every phase."""
        if self.model.position_embedding_type not in ("learned", "absolute"):
            return
        table = self.model.max_position_embeddings
        keys = ["max_seq_length"] + (["phase2_max_seq_length"] if self.phase2_fraction else [])
        for key in keys:
            if getattr(self, key) > table:
                raise ValueError(
                    f"config.{key}={getattr(self, key)} is longer than the position table "
                    f"(config.model.max_position_embeddings={table}): shorten it or enlarge the table"
                )

    @property
    def seed(self) -> int:
        return self.training.seed

    @property
    def eval_batch(self) -> int:
        """The evaluation batch: ``eval_batch_size``, or with 0 the training batch."""
        return self.eval_batch_size or self.global_batch_size

    def phases(self) -> list[Phase]:
        """Phase 1 at ``max_seq_length``; with ``phase2_fraction`` > 0 the last share of the
        steps at ``phase2_max_seq_length`` (the paper's 90% at 128, then 512)."""
        total = self.num_train_steps
        first = Phase(0, total, self.max_seq_length, self.max_predictions_per_seq)
        if self.phase2_fraction <= 0:
            return [first]
        split = round(total * (1 - self.phase2_fraction))
        return [
            dataclasses.replace(first, end=split),
            Phase(split, total, self.phase2_max_seq_length, self.phase2_max_predictions_per_seq),
        ]

    def phase_step(self, phase: int) -> PhaseStep:
        """Phase 1's or 2's step settings: phase 2's own where set, else the run's."""
        numerics, accum = self.training.numerics, self.training.grad_accum_steps
        if phase == 2:
            return PhaseStep(
                self.phase2_remat_policy or numerics.remat_policy, self.phase2_grad_accum_steps or accum
            )
        return PhaseStep(numerics.remat_policy, accum)

    def for_phase(self, phase: int) -> PretrainSettings:
        """These settings with the phase's step settings as the run's (`self` where they are
        phase 1's)."""
        return self.with_step(self.phase_step(phase))

    def with_step(self, step: PhaseStep) -> PretrainSettings:
        """These settings with `step` as the run's remat policy and accumulation (`self`
        where they are already)."""
        if step == self.phase_step(1):
            return self
        run = self.with_numerics(remat_policy=step.remat_policy)
        return dataclasses.replace(
            run, training=dataclasses.replace(run.training, grad_accum_steps=step.grad_accum_steps)
        )

    def with_numerics(self, **changes: object) -> PretrainSettings:
        """These settings with `changes` to the run's numerics (``layer_loop="scan"``, ...)."""
        numerics = dataclasses.replace(self.training.numerics, **changes)
        return dataclasses.replace(self, training=dataclasses.replace(self.training, numerics=numerics))

    def at_shape(self, phase: Phase) -> PretrainSettings:
        """These settings with the phase's sequence length and prediction count as the run's
        (what `plan` compiles a phase's step from)."""
        return dataclasses.replace(
            self, max_seq_length=phase.max_seq_length, max_predictions_per_seq=phase.max_predictions_per_seq
        )


@dataclasses.dataclass(frozen=True)
class VocabSize:
    """``model.vocab_size`` as written: 0 means the tokenizer's size (`model_vocab`)."""

    vocab_size: int = setting(0, NON_NEGATIVE_INT)


# The keys that set a phase's step, by phase (1 or 2).
PHASE_KEYS = {1: ("remat_policy", "grad_accum_steps"), 2: ("phase2_remat_policy", "phase2_grad_accum_steps")}
