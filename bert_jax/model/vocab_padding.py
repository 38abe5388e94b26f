"""Padding of the vocabulary axis (`BertConfig.vocab_pad_multiple`) in parameter trees.

Two parameters have a vocabulary axis, their first: the word-embedding table and the MLM
output bias. Checkpoint formats on disk (Hugging Face, TF, bert_jax exports) hold exactly
`vocab_size` rows; a model with padding holds `padded_vocab_size`. `resize_vocab` moves
between the two: it keeps the first `vocab_size` rows (the real ids) and zero-fills the
rest, so that padding is added on load and removed on export, and a round trip is exact.
Optimizer states mirror the parameter paths, so their moments are resized the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.model.param_shapes import path_str

# Path suffixes of the parameters whose axis 0 is the vocabulary.
VOCAB_PARAMS = ("embeddings/word_embeddings/embedding", "mlm/bias", "mlm/decoder")


def is_vocab_param(path: str) -> bool:
    """Whether a ``a/b/c`` parameter path (or an optimizer moment of one) has a vocab axis."""
    return any(path == s or path.endswith("/" + s) for s in VOCAB_PARAMS)


def resize_rows(x: Any, vocab_size: int, rows: int) -> np.ndarray:
    """The first `vocab_size` rows of `x`, zero-filled up to `rows` (numpy)."""
    x = np.asarray(x)
    if x.shape[0] < vocab_size:
        raise ValueError(f"a vocabulary axis of {x.shape[0]} rows is shorter than vocab_size={vocab_size}")
    out = np.zeros((rows, *x.shape[1:]), x.dtype)
    out[:vocab_size] = x[:vocab_size]
    return out


def resize_vocab(params: Any, vocab_size: int, rows: int) -> Any:
    """`params` with every vocabulary-axis leaf of at least `vocab_size` rows resized to
    `rows` (`resize_rows`); leaves with fewer rows are left for the shape check to name."""

    def one(path: tuple[Any, ...], x: Any) -> Any:
        if not is_vocab_param(path_str(path)) or np.ndim(x) == 0:
            return x
        if np.shape(x)[0] == rows or np.shape(x)[0] < vocab_size:
            return x
        return resize_rows(x, vocab_size, rows)

    return jax.tree_util.tree_map_with_path(one, params)


@dataclasses.dataclass(frozen=True)
class RowResize:
    """A checkpoint restore transform (`training.checkpoints.RestoreTransform`): leaves of a
    vocabulary axis saved with other padding than the model's (a checkpoint saved before the
    model padded its vocabulary, say) are restored as saved, then their first `vocab_size`
    rows (the real ids) zero-filled to the model's rows."""

    vocab_size: int

    def paths(self, saved: dict[str, tuple[int, ...]], wanted: dict[str, tuple[int, ...]]) -> set[str]:
        """Paths whose saved and wanted shapes differ only in vocabulary padding rows."""
        return {
            k
            for k in saved.keys() & wanted.keys()
            if is_vocab_param(k)
            and len(saved[k]) == len(wanted[k]) > 0
            and saved[k] != wanted[k]
            and saved[k][1:] == wanted[k][1:]
            and min(saved[k][0], wanted[k][0]) >= self.vocab_size
        }

    def apply(self, x: jax.Array, target: Any) -> jax.Array:
        """The real rows of `x`, zero-filled to `target`'s rows, in `target`'s sharding."""
        pad = [(0, target.shape[0] - self.vocab_size)] + [(0, 0)] * (x.ndim - 1)
        fn = lambda a: jnp.pad(a[: self.vocab_size], pad)
        s = getattr(target, "sharding", None)
        return (jax.jit(fn, out_shardings=s) if s is not None else jax.jit(fn))(x)
