"""Fine-tuning batches: each epoch's order, and rows cut to the shortest length that holds
them (a few compiled shapes instead of padding every row to ``max_seq_length``), their
outputs padded back. Shared by fine-tuning and the feature-based trainer, so both see the
same rows in the same order."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.model.config import BertConfig
from bert_jax.tasks.base import Split
from bert_jax.training import memory_fit


def bucket_length(input_mask: np.ndarray, buckets: tuple[int, ...], max_len: int) -> int:
    """The shortest bucket (or `max_len`) that holds every row's tokens."""
    longest = int(np.max(np.sum(input_mask.reshape(-1, input_mask.shape[-1]) > 0, axis=-1), initial=1))
    return min([b for b in buckets if longest <= b < max_len] + [max_len])


def shape_words(batch: dict[str, Any], *, packed: bool = False) -> str:
    """A training batch's shape as a run's compile lines say it: ``32 x 64 tokens`` (rows
    cut to a length bucket; a multiple-choice batch ``32 x 4 x 64``), or packed rows."""
    shape = " x ".join(f"{n:,}" for n in batch["input_ids"].shape)
    return f"{shape} tokens" + (" (packed rows)" if packed else "")


def epoch_batch(split: Split, *, seed: int, epoch: int, index: int, batch_size: int) -> dict[str, np.ndarray]:
    """The rows of training batch `index` of `epoch` (1-based): each epoch's order is a
    permutation by (seed, epoch), so any batch is known without replaying; within a batch
    the rows keep the split's order."""
    order = np.random.default_rng([seed, epoch]).permutation(len(split))
    idx = np.sort(order[index * batch_size : (index + 1) * batch_size])
    return {k: v[idx] for k, v in split.arrays.items()}


def cut_to_length(rows: dict[str, np.ndarray], length: int) -> dict[str, np.ndarray]:
    """Every per-token array (the shape of ``input_ids``) cut to `length` positions."""
    shape = rows["input_ids"].shape
    return {k: v[..., :length] if v.shape == shape else v for k, v in rows.items()}


def pad_token_axes(outputs: Any, axes: Any, width: int) -> Any:
    """`outputs` with each leaf's token axis (``axes``: an int or None per leaf) padded to
    `width`: float leaves with a large negative number, others with 0."""

    def pad(x: np.ndarray, axis: int | None) -> np.ndarray:
        if axis is None or x.shape[axis] >= width:
            return x
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, width - x.shape[axis])
        floating = np.issubdtype(x.dtype, np.floating) or x.dtype == jnp.bfloat16
        fill = float(jnp.finfo(x.dtype).min) / 2 if floating else 0
        return np.pad(x, widths, constant_values=fill)

    leaves, treedef = jax.tree.flatten(outputs)
    axis_leaves = jax.tree.leaves(axes, is_leaf=lambda x: x is None)
    return treedef.unflatten([pad(x, a) for x, a in zip(leaves, axis_leaves, strict=True)])


def abstract_at(x: jax.Array, token_shape: tuple[int, ...], width: int) -> jax.ShapeDtypeStruct:
    """`x` as an abstract array, `width` long on its last axis if it is a per-token input."""
    shape = (*x.shape[:-1], width) if x.shape == token_shape else x.shape
    return jax.ShapeDtypeStruct(shape, x.dtype)


def check_batch_memory(key: str, rows: int, tokens: int, config: BertConfig) -> None:
    """Lower bounds, before any data is read: the batch's token ids on the host and one
    layer's input on the devices (`memory_fit`; a size refused here could never run)."""
    setting = f"config.{key}={rows}"
    memory_fit.refuse_above(
        setting, f"a batch of {rows:,}", memory_fit.batch_host_bytes(rows, tokens), memory_fit.HOST,
        f"lower --config.{key}",
    )  # fmt: skip
    need = memory_fit.layer_device_bytes(
        rows, tokens, config.hidden_size, config.num_attention_heads, 2, False, jax.device_count()
    )
    memory_fit.refuse_above(
        setting, f"one layer of activations for {rows:,} rows of {tokens} tokens", need, memory_fit.DEVICE,
        f"lower --config.{key}",
    )  # fmt: skip
