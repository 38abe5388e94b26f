"""Every numeric setting checked against its range at start, one table for every job.

A value out of range is refused before anything is built or written, in one line naming
the key, the value and what is allowed (a zero batch would hang, negative steps would
"succeed", a masking rate above 1 would mask nothing more). Keys a job's config does not
have are skipped, so pre-training and fine-tuning configs share the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_collections

from bert_jax.model import numerics

# key -> (test, what is allowed)
Rule = tuple[Callable[[Any], bool], str]

_POSITIVE_INT: Rule = (lambda v: isinstance(v, int) and v >= 1, "a positive integer")
_NON_NEGATIVE_INT: Rule = (lambda v: isinstance(v, int) and v >= 0, "an integer >= 0")
_PROBABILITY: Rule = (lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")
_OPEN_PROBABILITY: Rule = (lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")
_POSITIVE: Rule = (lambda v: math.isfinite(v) and v > 0, "a positive number")
_NON_NEGATIVE: Rule = (lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
_FRACTION: Rule = (lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")

RULES: dict[str, Rule] = {
    "global_batch_size": _POSITIVE_INT,
    "eval_batch_size": _NON_NEGATIVE_INT,
    "num_train_steps": _POSITIVE_INT,
    "num_epochs": _POSITIVE_INT,
    "pack_row_multiple": _POSITIVE_INT,
    "warmup_steps": _NON_NEGATIVE_INT,
    "warmup_proportion": _PROBABILITY,
    "max_seq_length": (lambda v: isinstance(v, int) and v >= 8, "an integer >= 8"),
    "max_predictions_per_seq": _POSITIVE_INT,
    "phase2_max_seq_length": (lambda v: isinstance(v, int) and v >= 8, "an integer >= 8"),
    "phase2_max_predictions_per_seq": _POSITIVE_INT,
    "phase2_fraction": _FRACTION,
    "grad_accum_steps": _POSITIVE_INT,
    "phase2_grad_accum_steps": _NON_NEGATIVE_INT,  # 0: grad_accum_steps
    "learning_rate": _POSITIVE,
    "weight_decay": _NON_NEGATIVE,
    "grad_clip_norm": _NON_NEGATIVE,
    "adam_b1": _FRACTION,
    "adam_b2": _FRACTION,
    "adam_eps": _POSITIVE,
    "lr_decay_fraction": _PROBABILITY,
    "log_every_steps": _POSITIVE_INT,
    "checkpoint_every_steps": _NON_NEGATIVE_INT,
    "keep_checkpoints": _POSITIVE_INT,
    "stop_after_step": _NON_NEGATIVE_INT,
    "eval_every_steps": _NON_NEGATIVE_INT,
    "eval_steps": _NON_NEGATIVE_INT,
    "max_train_examples": _NON_NEGATIVE_INT,
    "max_eval_examples": _NON_NEGATIVE_INT,
    "data.masked_lm_prob": _OPEN_PROBABILITY,
    "data.mask_token_prob": _PROBABILITY,
    "data.random_token_prob": _PROBABILITY,
    "data.short_seq_prob": _PROBABILITY,
    "data.eval_fraction": _FRACTION,
    "data.dupe_factor": _POSITIVE_INT,
    "model.hidden_dropout_prob": _FRACTION,
    "model.attention_probs_dropout_prob": _FRACTION,
    "model.vocab_pad_multiple": _NON_NEGATIVE_INT,
}

# key -> the values it may take (the run's numerics: `bert_jax.model.numerics`).
CHOICES: dict[str, tuple[str, ...]] = {
    "compute_dtype": numerics.DTYPES,
    "param_dtype": numerics.DTYPES,
    "remat_policy": numerics.REMAT_POLICIES,
    "phase2_remat_policy": ("", *numerics.REMAT_POLICIES),  # "": remat_policy
    "weight_grad_matmul": numerics.WEIGHT_GRAD_MATMULS,
    "dropout_rng": numerics.DROPOUT_RNGS,
    "attention_kernel": numerics.ATTENTION_KERNELS,
}


def _get(config: ml_collections.ConfigDict, dotted: str) -> tuple[bool, Any]:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, ml_collections.ConfigDict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def check(config: ml_collections.ConfigDict) -> None:
    """Raises ValueError (one line) for the first value out of its range, or a pair of
    values that contradict each other."""
    for key, (test, allowed) in RULES.items():
        present, value = _get(config, key)
        if not present or value is None:
            continue
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and test(value)
        if not ok:
            raise ValueError(f"config.{key}={value!r}: must be {allowed}")
    for key, allowed in CHOICES.items():
        present, value = _get(config, key)
        if present and value not in allowed:
            raise ValueError(f"config.{key}={value!r}: must be one of {', '.join(allowed)}")
    _check_mask_mix(config)
    _check_positions(config)
    _check_accumulation(config)


def _check_mask_mix(config: ml_collections.ConfigDict) -> None:
    present, mask = _get(config, "data.mask_token_prob")
    _, rand = _get(config, "data.random_token_prob")
    if present and rand is not None and mask + rand > 1.0 + 1e-9:
        raise ValueError(
            f"config.data.mask_token_prob={mask} + config.data.random_token_prob={rand} exceed 1 "
            "(the rest of the chosen tokens are kept as they are)"
        )


def _check_positions(config: ml_collections.ConfigDict) -> None:
    """A learned position table must hold every position of every phase."""
    present, table = _get(config, "model.max_position_embeddings")
    _, kind = _get(config, "model.position_embedding_type")
    if not present or kind not in (None, "learned", "absolute"):
        return
    _, phase2 = _get(config, "phase2_fraction")
    keys = ["max_seq_length"] + (["phase2_max_seq_length"] if phase2 else [])
    for key in keys:
        found, length = _get(config, key)
        if found and length > table:
            raise ValueError(
                f"config.{key}={length} is longer than the position table "
                f"(config.model.max_position_embeddings={table}): shorten it or enlarge the table"
            )


def _check_accumulation(config: ml_collections.ConfigDict) -> None:
    """Each phase's micro-batches split the global batch (phase 2's before the run starts,
    not when it reaches phase 2; its 0 means the run's)."""
    _, batch = _get(config, "global_batch_size")
    present, accum = _get(config, "grad_accum_steps")
    if present and batch and batch % accum:
        raise ValueError(
            f"config.global_batch_size={batch} does not split into "
            f"config.grad_accum_steps={accum} micro-batches"
        )
    present, accum = _get(config, "phase2_grad_accum_steps")
    if present and accum and batch and batch % accum:
        raise ValueError(
            f"config.phase2_grad_accum_steps={accum} must split config.global_batch_size={batch} into equal "
            "micro-batches (0: grad_accum_steps)"
        )
