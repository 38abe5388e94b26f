"""`kernel_tiles.keep`, the dropout keep mask a kernel computes per tile: the tile of
`ops.dropout_keep_mask`'s global mask, through the one-word index (``narrow``) where the
global probabilities fit it and through the two-word index where they do not."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import kernel_tiles, ops

RATE = 0.3


def _tile(words, b: int, n: int, rows, cols, s: int, narrow: bool, paired: bool = False) -> np.ndarray:
    parts = tuple(words[b, n, i] for i in range(4))
    rows, cols = jnp.asarray(rows)[:, None], jnp.asarray(cols)[None, :]
    return np.asarray(kernel_tiles.keep(parts, rows, cols, s, RATE, narrow, paired))


@pytest.mark.parametrize(
    ("narrow", "impl"), [(True, "hash"), (False, "hash"), (True, "hash16"), (False, "hash16")]
)
def test_a_tile_is_its_part_of_the_global_mask(narrow, impl) -> None:
    b, n, s = 2, 3, 48
    assert kernel_tiles.narrow_index(b, n, s)
    key = jax.random.key(5)
    words = kernel_tiles.dropout_words(ops.hash_seeds(key), (b, n), n, s)
    want = np.asarray(ops.dropout_keep_mask(key, RATE, (b, n, s, s), impl))
    rows, cols = np.arange(16, 32), np.arange(8, 40)
    for row in range(b):
        for head in range(n):
            got = _tile(words, row, head, rows, cols, s, narrow, paired=impl == "hash16")
            np.testing.assert_array_equal(got, want[row, head][16:32, 8:40])
            if impl == "hash16":  # one hash a pair of columns, interleaved into the tile
                parts = tuple(words[row, head, i] for i in range(4))
                pairs = jnp.arange(4, 20)[None, :]
                both = kernel_tiles.keep_pairs(parts, jnp.asarray(rows)[:, None], pairs, s, RATE)
                np.testing.assert_array_equal(np.asarray(both), want[row, head][16:32, 8:40])
    assert 0.6 < want.mean() < 0.8


def test_past_two_to_the_32_the_two_word_index_carries_within_a_tile() -> None:
    """[1,864,136, 1, 48, 48]: the last (row, head)'s 2,304 probabilities start 256 below
    2**32, so its index carries into the high word inside one tile; the narrow index would
    wrap there (and is not chosen for this shape)."""
    rows_total, s = 1_864_136, 48
    assert not kernel_tiles.narrow_index(rows_total, 1, s)
    key = jax.random.key(6)
    seeds = ops.hash_seeds(key)
    last = rows_total - 1
    words = kernel_tiles.dropout_words(seeds, (1, 1), 1, s, offsets=(last, 0))
    assert int(words[0, 0, 0]) == 2**32 - 256 and int(words[0, 0, 1]) == 0
    shape, start, block = (rows_total, 1, s, s), (last, 0, 0, 0), (1, 1, 8, s)
    want = np.asarray(ops.hash_bits(key, shape, start, block))[0, 0] >= int(ops.keep_threshold(RATE))
    rows, cols = np.arange(8), np.arange(s)
    np.testing.assert_array_equal(_tile(words, 0, 0, rows, cols, s, narrow=False), want)
    assert not np.array_equal(_tile(words, 0, 0, rows, cols, s, narrow=True), want)
    low, high = ops.flat_index_words(shape, start, block)
    pairs = ops.pair_bits(seeds[0], seeds[1], low, high)[0, 0] >= int(ops.keep_threshold(RATE, 16))
    np.testing.assert_array_equal(_tile(words, 0, 0, rows, cols, s, narrow=False, paired=True), pairs)
