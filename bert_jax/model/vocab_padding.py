"""Padding of the vocabulary axis (`BertConfig.vocab_pad_multiple`) in parameter trees.

Two parameters have a vocabulary axis, their first: the word-embedding table and the MLM
output bias. Checkpoint formats on disk (Hugging Face, TF, bert_jax exports) hold exactly
`vocab_size` rows; a model with padding holds `padded_vocab_size`. `resize_vocab` moves
between the two: it keeps the first `vocab_size` rows (the real ids) and zero-fills the
rest, so that padding is added on load and removed on export, and a round trip is exact.
Optimizer states mirror the parameter paths, so their moments are resized the same way.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from bert_jax.model.param_shapes import path_str

# Path suffixes of the parameters whose axis 0 is the vocabulary.
VOCAB_PARAMS = ("embeddings/word_embeddings/embedding", "mlm/bias")


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
