"""The optimizer of the paper (§A.2): AdamW, linear warmup then linear decay, clipping.

β1 0.9, β2 0.999, ε 1e-6, weight decay 0.01 on every weight matrix but none on
LayerNorm parameters and biases (as the original `AdamWeightDecayOptimizer`), global-norm
clipping at 1.0. LAMB (You et al., 2020) is the option for large batches. Gradient
accumulation is done in the train step (`train.py`), not with `optax.MultiSteps`, so that
the micro-batch loop stays inside one compiled program.
"""

from __future__ import annotations

from typing import Any

import jax
import ml_collections
import optax


def learning_rate_schedule(
    peak: float, warmup_steps: int, total_steps: int, end_value: float = 0.0
) -> optax.Schedule:
    """Linear warmup from 0 to `peak` over `warmup_steps`, then linear decay to `end_value`."""
    warmup_steps = max(0, min(int(warmup_steps), int(total_steps)))
    return optax.join_schedules(
        [
            optax.linear_schedule(0.0, peak, max(warmup_steps, 1)),
            optax.linear_schedule(peak, end_value, max(int(total_steps) - warmup_steps, 1)),
        ],
        boundaries=[warmup_steps],
    )


def decay_mask(params: Any) -> Any:
    """True for parameters that get weight decay: every kernel/embedding, no bias or LayerNorm.

    Decided by the leaf's path: a leaf named ``bias`` or living under a module whose name
    contains ``LayerNorm`` is excluded (``scale`` only exists in LayerNorms).
    """

    def decays(path: tuple[Any, ...], _: Any) -> bool:
        # Dict keys only: a Partitioned box adds an attribute key (`.value`) to the path.
        names = [str(k.key) for k in path if hasattr(k, "key")]
        if names[-1] in ("bias", "scale"):
            return False
        return not any("LayerNorm" in n for n in names)

    return jax.tree_util.tree_map_with_path(decays, params)


def create_optimizer(
    config: ml_collections.ConfigDict, total_steps: int | None = None
) -> tuple[optax.GradientTransformation, optax.Schedule]:
    """The optax chain and its learning-rate schedule, from a run config.

    Reads ``optimizer`` ("adamw" | "lamb"), ``learning_rate``, ``warmup_steps``,
    ``num_train_steps``, ``weight_decay``, ``adam_b1``, ``adam_b2``, ``adam_eps`` and
    ``grad_clip_norm`` (0 disables clipping).
    """
    total = int(total_steps if total_steps is not None else config.num_train_steps)
    schedule = learning_rate_schedule(config.learning_rate, config.warmup_steps, total)
    kwargs = dict(
        learning_rate=schedule,
        b1=config.adam_b1,
        b2=config.adam_b2,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
        mask=decay_mask,
    )
    if config.optimizer == "adamw":
        tx = optax.adamw(**kwargs)
    elif config.optimizer == "lamb":
        tx = optax.lamb(**kwargs)
    else:
        raise ValueError(f"config.optimizer={config.optimizer!r}: choose 'adamw' or 'lamb'")
    if config.grad_clip_norm and config.grad_clip_norm > 0:
        tx = optax.chain(optax.clip_by_global_norm(config.grad_clip_norm), tx)
    return tx, schedule
