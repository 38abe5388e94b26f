"""The settings both jobs share, typed once at the entry point (levanter's `TrainerConfig`
and `OptimizerConfig`, Flax lm1b's one typed config).

The ml-collections files and absl flags stay what users write; `TrainingSettings.from_config`
reads the keys of `configs/defaults.py`'s ``training()`` block once, after `run_config.check`
has refused unknown keys and out-of-range values, and the training layer (the engine, the
loop, checkpoints, the optimizer) reads typed fields from here, never the `ConfigDict`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections
import optax

from bert_jax.model.numerics import Numerics
from bert_jax.training import optimizer


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
    """The optimizer and its schedule (the paper's AdamW by default, §A.2)."""

    name: str = "adamw"
    learning_rate: float = 1e-4
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    clip_norm: float = 1.0
    schedule: str = "linear"
    decay_fraction: float = 0.2
    warmup_steps: int = 0
    warmup_proportion: float = 0.0  # > 0: this share of the run's steps, not warmup_steps

    def warmup(self, total_steps: int) -> int:
        """The warm-up steps of a run of `total_steps` (one rule for every job)."""
        if self.warmup_proportion > 0:
            return round(self.warmup_proportion * total_steps)
        return self.warmup_steps

    def build(self, total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
        """The optax transformation and its learning-rate schedule for a run's length."""
        fields = dataclasses.asdict(self)
        del fields["warmup_steps"], fields["warmup_proportion"]  # decided here, per run
        return optimizer.create_optimizer(
            **fields, warmup_steps=self.warmup(int(total_steps)), total_steps=int(total_steps)
        )


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    """When and how a run saves (`loop.TrainingRun`)."""

    every_steps: int = 10_000  # 0: only when stopping
    keep: int = 3
    async_save: bool = True
    stop_after_step: int = 0  # >0: save and stop there (a rerun continues)


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """Everything the training layer reads, for either job (defaults: `configs/defaults.py`)."""

    seed: int = 42
    numerics: Numerics = dataclasses.field(default_factory=Numerics)  # "auto": per platform
    mesh_shape: tuple[int, int, int] = (-1, 1, 1)
    sharding_rules: tuple[tuple[str, Any], ...] = ()  # overrides of `sharding.LOGICAL_AXIS_RULES`
    optimizer: OptimizerSettings = OptimizerSettings()
    grad_accum_steps: int = 1
    checkpoints: CheckpointSettings = CheckpointSettings()
    log_every_steps: int = 50

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> TrainingSettings:
        return cls(
            seed=int(config.seed),
            numerics=Numerics(
                compute_dtype=config.compute_dtype,
                param_dtype=config.param_dtype,
                remat_policy=config.remat_policy,
                weight_grad_matmul=config.weight_grad_matmul,
                dropout_rng=config.dropout_rng,
                attention_kernel=config.attention_kernel,
            ),
            mesh_shape=tuple(int(x) for x in config.mesh_shape),
            sharding_rules=tuple(tuple(r) for r in config.sharding_rules),
            optimizer=OptimizerSettings(
                name=config.optimizer,
                learning_rate=float(config.learning_rate),
                weight_decay=float(config.weight_decay),
                b1=float(config.adam_b1),
                b2=float(config.adam_b2),
                eps=float(config.adam_eps),
                clip_norm=float(config.grad_clip_norm),
                schedule=config.lr_schedule,
                decay_fraction=float(config.lr_decay_fraction),
                warmup_steps=int(config.warmup_steps),
                warmup_proportion=float(config.warmup_proportion),
            ),
            grad_accum_steps=int(config.grad_accum_steps),
            checkpoints=CheckpointSettings(
                every_steps=int(config.checkpoint_every_steps),
                keep=int(config.keep_checkpoints),
                async_save=bool(config.async_checkpointing),
                stop_after_step=int(config.stop_after_step),
            ),
            log_every_steps=int(config.log_every_steps),
        )
