"""Sizes a command allocates from, checked at start against the memory there is.

A batch size, sequence length or example count is refused before any work, in one line
naming the setting, what it needs and what there is, when a *lower bound* of what it makes
the command hold at once exceeds the memory available: the host's (``MemAvailable``) for
arrays built on the host, one device's (its allocator's limit; the host's on a CPU) for
arrays on a device. The bounds count only arrays that must exist whole:

- on the host, a batch's token ids (int32) and stream positions (int64), and a command's
  whole output (`features`);
- on a device, one layer's activations ``[rows, tokens, hidden]`` and, where the attention
  kernel materializes them (XLA's; not splash or cuDNN), its float32 scores
  ``[rows, heads, tokens, tokens]``, spread evenly over the devices.

So a refused size could never have run; a size that passes can still run out of memory
later (`bert-jax plan` compiles a train step and reports its memory exactly).
"""

from __future__ import annotations

import math
import os

import numpy as np

from bert_jax.data import page_cache
from bert_jax.data.progress import human_bytes

HOST = "host"
DEVICE = "device"


def host_bytes() -> int | None:
    """Memory this host can still give (``MemAvailable``), or None where unknown."""
    available = page_cache.available_bytes()
    if available is not None:
        return available
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def device_bytes() -> tuple[int | None, str]:
    """(memory of one local device, its platform): the allocator's limit on a GPU or TPU,
    the host's available memory on a CPU (or where the runtime does not say)."""
    import jax

    device = jax.local_devices()[0]
    try:
        stats = device.memory_stats() if device.platform != "cpu" else None
    except Exception:  # a runtime without memory statistics
        stats = None
    limit = (stats or {}).get("bytes_limit")
    return (int(limit) if limit else host_bytes()), device.platform


def refuse_above(setting: str, what: str, need: int, where: str, advice: str) -> None:
    """Raises ValueError (one line naming `setting`) when `need` bytes exceed what `where`
    (HOST or DEVICE) has available; does nothing where that is unknown."""
    if where == HOST:
        available, place = host_bytes(), "available on this host"
    else:
        available, platform = device_bytes()
        place = f"one {platform} device holds"
    if available is not None and need > available:
        raise ValueError(
            f"{setting}: {what} needs at least {human_bytes(need)}, "
            f"more than the {human_bytes(available)} {place}: {advice}"
        )


def batch_host_bytes(rows: int, tokens: int) -> int:
    """A host's batch of `rows` sequences: token ids (int32) and stream positions (int64)."""
    return rows * (tokens * 4 + 8)


def layer_device_bytes(
    rows: int, tokens: int, hidden: int, heads: int, dtype_bytes: int, scores: bool, devices: int = 1
) -> int:
    """One layer's activations of `rows` sequences on one of `devices` (evenly spread):
    its input ``[rows, tokens, hidden]`` and, with `scores`, float32 attention scores."""
    total = rows * tokens * hidden * dtype_bytes + (rows * heads * tokens * tokens * 4 if scores else 0)
    return math.ceil(total / max(devices, 1))


def materializes_scores(config, numerics, platform: str = "", dropout: float = 0.0) -> bool:
    """Whether the attention kernel a model gets on `platform` (default: where this process
    computes; `attention.choose_kernel`) writes the score matrix whole: XLA's does, splash,
    cuDNN, Triton and Mosaic do not."""
    from bert_jax.model import attention
    from bert_jax.model.numerics import KERNEL_DROPOUT_RNGS

    platform = platform or attention.target_platform()

    mask = attention.AttentionMask(
        np.ones((1, 128), np.int32), extra_bias=np.zeros(1, np.float32) if config.alibi else None
    )
    kernel, _ = attention.choose_kernel(
        numerics.attention_kernel,
        platform,
        mask,
        config.head_dim,
        dropout,
        numerics.dtype,
        hash_dropout=numerics.dropout_rng in KERNEL_DROPOUT_RNGS,
    )
    return kernel == "xla"
