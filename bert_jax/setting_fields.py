"""A setting's default and its allowed values, declared once beside its field.

Every typed settings record (`TrainingSettings`, `DataSettings`, `PretrainSettings`,
`FinetuneSettings`, ...) is a frozen dataclass whose field name is the config key users
write (``--config.learning_rate``), whose default is the value a config starts from
(`configs/defaults.py` builds its blocks from these), and whose range or choices sit in the
field's metadata, where the resolver (`bert_jax.training.resolver`) checks them when a
config is read: one line naming the key, the value and what is allowed.

A module of its own, importing nothing of bert_jax, so that the model's `Numerics` and the
data layer's settings declare their fields the same way as the training layer's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

# A range: (test, what is allowed, in words).
Rule = tuple[Callable[[Any], bool], str]

POSITIVE_INT: Rule = (lambda v: v >= 1, "a positive integer")
NON_NEGATIVE_INT: Rule = (lambda v: v >= 0, "an integer >= 0")
SEQUENCE_LENGTH: Rule = (lambda v: v >= 8, "an integer >= 8")
PROBABILITY: Rule = (lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")
OPEN_PROBABILITY: Rule = (lambda v: 0.0 < v <= 1.0, "a number in (0, 1]")
POSITIVE: Rule = (lambda v: math.isfinite(v) and v > 0, "a positive number")
NON_NEGATIVE: Rule = (lambda v: math.isfinite(v) and v >= 0, "a number >= 0")
FRACTION: Rule = (lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")


def setting(default: Any, rule: Rule | None = None, choices: tuple[str, ...] | None = None) -> Any:
    """A field with its default and, optionally, its range (`rule`) or allowed `choices`.
    Tuples and nested records are given as defaults too (copied per instance)."""
    metadata = {"rule": rule} if rule else {"choices": choices} if choices else {}
    if isinstance(default, tuple) or not dataclasses.is_dataclass(default):
        return dataclasses.field(default=default, metadata=metadata)
    return dataclasses.field(default_factory=lambda: default, metadata=metadata)


def flat(default_factory: Callable[[], Any]) -> Any:
    """A nested record whose keys sit at the same level of the config as its parent's
    (``config.adam_b1``, not ``config.optimizer.adam_b1``): how the shared training keys
    are written."""
    return dataclasses.field(default_factory=default_factory, metadata={"flat": True})


def block(default_factory: Callable[[], Any]) -> Any:
    """A nested record read from the config block of the field's name (``config.data``)."""
    return dataclasses.field(default_factory=default_factory, metadata={})
