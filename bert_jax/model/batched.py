"""A jitted function of a model's parameters run over many rows, `batch_size` at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np


def apply_in_batches(
    fn: Callable[..., tuple],
    params: dict,
    rows: Sequence[np.ndarray],
    batch_size: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, ...]:
    """``fn(params, *rows[k:k + batch_size])`` (a jitted function returning a tuple of
    arrays, rows first) for every batch, its outputs concatenated on the host. One compiled
    program: the last batch is padded with zero rows to `batch_size` (when there is more
    than one batch), the parameters placed once and passed as an argument (not constants
    folded into the program). `progress(n)` is told of every `n` rows done."""
    on_device, total, out = jax.device_put(params), len(rows[0]), []
    for start in range(0, total, batch_size):
        part = [r[start : start + batch_size] for r in rows]
        n = len(part[0])
        if n < batch_size < total:
            part = [np.concatenate([r, np.zeros((batch_size - n, *r.shape[1:]), r.dtype)]) for r in part]
        out.append([np.asarray(x[:n]) for x in fn(on_device, *part)])
        if progress is not None:
            progress(n)
    return tuple(np.concatenate(column) for column in zip(*out, strict=True))
