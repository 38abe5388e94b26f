"""The settings both jobs share, typed once at the entry point (levanter's `TrainerConfig`
and `OptimizerConfig`, Flax lm1b's one typed config).

The ml-collections files and absl flags stay what users write; the resolver
(`bert_jax.training.resolver`) reads these keys once, at the command's edge, each field
named as its config key, with its default and range beside it; the training layer (the
engine, the loop, checkpoints, the optimizer) reads typed fields from here, never the
`ConfigDict`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import optax

from bert_jax.model.numerics import Numerics
from bert_jax.setting_fields import (
    FRACTION,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    OPEN_PROBABILITY,
    POSITIVE,
    POSITIVE_INT,
    PROBABILITY,
    flat,
    setting,
)
from bert_jax.training.optimizer import OPTIMIZERS, SCHEDULES, create_optimizer


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
    """The optimizer and its schedule (the paper's AdamW, §A.2: no decay on LayerNorm and
    biases, clipping 1.0)."""

    optimizer: str = setting("adamw", choices=OPTIMIZERS)  # lamb: for large batches
    learning_rate: float = setting(1e-4, POSITIVE)
    weight_decay: float = setting(0.01, NON_NEGATIVE)
    adam_b1: float = setting(0.9, FRACTION)
    adam_b2: float = setting(0.999, FRACTION)
    adam_eps: float = setting(1e-6, POSITIVE)
    grad_clip_norm: float = setting(1.0, NON_NEGATIVE)  # 0: no clipping
    # linear (the paper's: warm-up, then linear decay to 0) | one_cycle | wsd (warm-up,
    # stable, then linear decay over the last lr_decay_fraction of steps).
    lr_schedule: str = setting("linear", choices=SCHEDULES)
    lr_decay_fraction: float = setting(0.2, OPEN_PROBABILITY)
    # Warm-up: warmup_proportion of the run's steps when > 0, else warmup_steps.
    warmup_steps: int = setting(0, NON_NEGATIVE_INT)
    warmup_proportion: float = setting(0.0, PROBABILITY)

    def warmup(self, total_steps: int) -> int:
        """The warm-up steps of a run of `total_steps` (one rule for every job)."""
        if self.warmup_proportion > 0:
            return round(self.warmup_proportion * total_steps)
        return self.warmup_steps

    def build(self, total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
        """The optax transformation and its learning-rate schedule for a run's length."""
        return create_optimizer(
            name=self.optimizer,
            learning_rate=self.learning_rate,
            warmup_steps=self.warmup(total_steps),
            total_steps=total_steps,
            weight_decay=self.weight_decay,
            b1=self.adam_b1,
            b2=self.adam_b2,
            eps=self.adam_eps,
            clip_norm=self.grad_clip_norm,
            schedule=self.lr_schedule,
            decay_fraction=self.lr_decay_fraction,
        )


@dataclasses.dataclass(frozen=True)
class CheckpointSettings:
    """When and how a run saves (`loop.TrainingRun`)."""

    checkpoint_every_steps: int = setting(10_000, NON_NEGATIVE_INT)  # 0: only when stopping
    keep_checkpoints: int = setting(3, POSITIVE_INT)
    async_checkpointing: bool = True
    stop_after_step: int = setting(0, NON_NEGATIVE_INT)  # >0: save and stop there (a rerun continues)


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """Everything the training layer reads, for either job: the keys every job's config
    shares, at its top level (`configs/defaults.py: training()` is these defaults)."""

    seed: int = 42
    # How this run computes the model, never saved with it (`bert_jax.model.numerics`):
    # compute_dtype, param_dtype, layer_loop, remat_policy, weight_grad_matmul, bias_grad,
    # dropout_rng, attention_kernel, norm_kernel.
    numerics: Numerics = flat(Numerics)
    # Device mesh (data, fsdp, tensor); -1 takes the remaining devices.
    mesh_shape: tuple[int, int, int] = (-1, 1, 1)
    # Overrides of the logical-axis rules (`bert_jax.training.sharding.LOGICAL_AXIS_RULES`), e.g.
    # --config.sharding_rules="(('embed', None),)" keeps the hidden axis unsharded.
    sharding_rules: tuple[tuple[str, Any], ...] = ()
    optimization: OptimizerSettings = flat(OptimizerSettings)
    grad_accum_steps: int = setting(
        1, POSITIVE_INT
    )  # micro-batches per step: the same gradient in less memory
    checkpoints: CheckpointSettings = flat(CheckpointSettings)
    log_every_steps: int = setting(50, POSITIVE_INT)
