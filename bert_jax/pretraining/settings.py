"""A pre-training run's settings, resolved once from its config (`PretrainSettings.from_config`).

The config files and flags stay what users write (`configs/pretrain.py` on
`configs/defaults.py`); at the entry point (`pretrain.train_and_evaluate`, `plan`, the
benchmarks) they become this frozen record: checked (`run_config.check`: the job, removed
names, value ranges, each phase's step among them), the eval batch resolved, the model
built at the config's vocabulary size. The pre-training job (`Pretraining`, the phases, the
evaluation hook) reads typed fields from here; the engine's share is `TrainingSettings`,
the data layer's `DataSettings`.

A run's settings carry the vocabulary size it trains with (`model_vocab.resolved`); `plan`
and the cost estimates build them at the size known without data (`model_vocab.planned`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from bert_jax.data.settings import DataSettings
from bert_jax.model.config import BertConfig
from bert_jax.training import run_config
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


@dataclasses.dataclass(frozen=True)
class PretrainSettings:
    """Everything one pre-training run reads."""

    model: BertConfig
    data: DataSettings
    training: TrainingSettings  # phase 1's remat policy and accumulation
    num_train_steps: int
    global_batch_size: int
    eval_batch_size: int  # resolved: never 0
    max_seq_length: int
    max_predictions_per_seq: int
    phase2_fraction: float
    phase2_max_seq_length: int
    phase2_max_predictions_per_seq: int
    phase2_remat_policy: str  # "": phase 1's
    phase2_grad_accum_steps: int  # 0: phase 1's
    eval_every_steps: int
    eval_steps: int  # batches per evaluation; 0: the whole held-out split
    baseline_batches: int  # > 0: the unigram baseline from that many held-out batches
    compilation_cache_dir: str  # "": the workdir's; "none": off (`bert_jax.training.compile_cache`)
    config: dict[str, Any]  # the config as written (records, the hosts' agreement check)

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> PretrainSettings:
        """The settings of `config` at its ``model.vocab_size`` (pass it through
        `model_vocab.resolved` or `planned` first where it may be 0)."""
        run_config.check(config, "pretrain")
        batch = int(config.global_batch_size)
        return cls(
            model=run_config.bert_config(config),
            data=DataSettings.from_config(config.data),
            training=TrainingSettings.from_config(config),
            num_train_steps=int(config.num_train_steps),
            global_batch_size=batch,
            eval_batch_size=int(config.eval_batch_size) or batch,
            max_seq_length=int(config.max_seq_length),
            max_predictions_per_seq=int(config.max_predictions_per_seq),
            phase2_fraction=float(config.phase2_fraction),
            phase2_max_seq_length=int(config.phase2_max_seq_length),
            phase2_max_predictions_per_seq=int(config.phase2_max_predictions_per_seq),
            phase2_remat_policy=str(config.phase2_remat_policy),
            phase2_grad_accum_steps=int(config.phase2_grad_accum_steps),
            eval_every_steps=int(config.eval_every_steps),
            eval_steps=int(config.eval_steps),
            baseline_batches=int(config.baseline_batches),
            compilation_cache_dir=str(config.compilation_cache_dir),
            config=config.to_dict(),
        )

    @property
    def seed(self) -> int:
        return self.training.seed

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
        numerics = dataclasses.replace(self.training.numerics, remat_policy=step.remat_policy)
        training = dataclasses.replace(
            self.training, numerics=numerics, grad_accum_steps=step.grad_accum_steps
        )
        return dataclasses.replace(self, training=training)

    def at_shape(self, phase: Phase) -> PretrainSettings:
        """These settings with the phase's sequence length and prediction count as the run's
        (what `plan` compiles a phase's step from)."""
        return dataclasses.replace(
            self, max_seq_length=phase.max_seq_length, max_predictions_per_seq=phase.max_predictions_per_seq
        )


# The keys that set a phase's step, by phase (1 or 2); their ranges are checked with every
# other setting's (`training.value_ranges`).
PHASE_KEYS = {1: ("remat_policy", "grad_accum_steps"), 2: ("phase2_remat_policy", "phase2_grad_accum_steps")}
