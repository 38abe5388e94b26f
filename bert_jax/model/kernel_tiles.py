"""What the attention kernels compute per tile, shared by the Triton (GPU) and Mosaic (TPU)
kernels: which keys a query sees and which probabilities attention dropout keeps.

Both rules are `attention.visible` and `ops.dropout_keep_mask` ("hash") evaluated on one
tile of the [B, N, S, S] probabilities, so a kernel trains on the masks the XLA path draws.
Arguments broadcast: a kernel passes [bq, 1] and [1, bk] pieces or whole [bq, bk] tiles.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from bert_jax.model import ops

Array = jax.Array


PADDING = 0  # the segment id of padding, and of positions a kernel adds up to its block


def pad_sequence(
    multiple: int, q: Array, k: Array, v: Array, seg: Array
) -> tuple[Array, Array, Array, Array]:
    """q, k, v [B, S, N, D] and segment ids [B, S] with S padded up to a multiple of
    ``multiple`` by padding positions (segment `PADDING`); unchanged where S is one."""
    pad = -q.shape[1] % multiple
    if not pad:
        return q, k, v, seg
    q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
    return q, k, v, jnp.pad(seg, ((0, 0), (0, pad)), constant_values=PADDING)


def fit_block(size: int, length: int, least: int = 1) -> int:
    """The largest power of two <= ``size`` (itself one) that divides ``length``, at least
    ``least``: a kernel's block along an axis of ``length``."""
    block = size
    while block > least and length % block:
        block //= 2
    return block


def first_index(row: Array, head: Array, heads: int, seq_len: int) -> tuple[Array, Array]:
    """The 64-bit flat index (low, high uint32 words) of element (``row``, ``head``, 0, 0)
    of the [B, ``heads``, S, S] probabilities: where that (row, head)'s masks start."""
    flat = row.astype(jnp.uint32) * jnp.uint32(heads) + head.astype(jnp.uint32)
    return ops.mul_wide(flat, seq_len * seq_len)


def dropout_words(
    seeds: Array,
    local: tuple[int, int],
    heads: int,
    seq_len: int,
    offsets: tuple[Array | int, Array | int] = (0, 0),
) -> Array:
    """uint32 [b, n, 4] for the ``local`` (batch rows, heads) of a shard: the 64-bit flat
    index of each one's element (0, 0) in the global [B, ``heads``, S, S] probabilities
    (low, high words) and the two hash seeds (`ops.hash_seeds`). ``offsets``: the shard's
    first batch row and head."""
    b, n = local
    row = lax.broadcasted_iota(jnp.uint32, (b, n), 0) + jnp.asarray(offsets[0]).astype(jnp.uint32)
    head = lax.broadcasted_iota(jnp.uint32, (b, n), 1) + jnp.asarray(offsets[1]).astype(jnp.uint32)
    low, high = first_index(row, head, heads, seq_len)
    seed0, seed1 = (jnp.broadcast_to(x.astype(jnp.uint32), (b, n)) for x in (seeds[0], seeds[1]))
    return jnp.stack([low, high, seed0, seed1], axis=-1)


def visible(
    seg_q: Array,
    seg_k: Array,
    rows: Array,
    cols: Array,
    causal: bool,
    window: int | None,
    packed: bool = True,
) -> Array:
    """Boolean tile: `attention.visible`'s rule for queries ``rows`` with segment ids
    ``seg_q`` against keys ``cols`` with ``seg_k`` (0 padding, else the example's number).
    Not ``packed`` (ids 0 and 1): every query sees the real keys, a rule of the keys alone
    (from [1, bk] pieces the [1, bk] result: no comparison an element)."""
    see = (seg_k > 0) if not packed else (seg_k > 0) & ((seg_q == seg_k) | (seg_q == 0))
    if causal:
        see = see & (cols <= rows)
    if window is not None:
        half = window // 2
        gap = rows - cols
        see = see & (gap <= half) & (gap >= -half)
    return see


def keep(
    words: tuple[Array, Array, Array, Array],
    rows: Array,
    cols: Array,
    seq_len: int,
    rate: float,
    narrow: bool = False,
    paired: bool = False,
) -> Array:
    """Boolean tile: the dropout keep mask of the probabilities at ``rows`` x ``cols`` of one
    (batch row, head), whose `dropout_words` are ``words`` (low, high, seed0, seed1).
    ``paired``: the ``"hash16"`` masks (`ops.pair_bits`), each element hashing its pair's
    index (`keep_pairs` hashes once for both).

    ``narrow``: the global [B, N, S, S] probabilities hold at most 2**32 elements, so every
    high word is 0 and no low word carries. The same bits then cost one integer addition
    an element before the hash rounds instead of ~8: the first round's input
    ``(low0 + i S + j) * INDEX_MIX + seed0`` is a per-row part plus a per-column part
    (mod 2**32), each computed once for the tile's [bq, 1] rows and [1, bk] columns. On a
    GPU the hash's integer operations, not the tile's matmuls, are the most a dropout
    kernel computes per element."""
    low0, _, seed0, seed1 = words
    rows, cols = rows.astype(jnp.uint32), cols.astype(jnp.uint32)
    if paired:
        low, high = (
            (low0 + rows * jnp.uint32(seq_len) + cols, None) if narrow else _wide(words, rows, cols, seq_len)
        )
        return ops.pair_bits(seed0, seed1, low, high) >= ops.keep_threshold(rate, 16)
    if narrow:
        return _row_col_bits(low0, rows, seq_len, cols, seed0, seed1) >= ops.keep_threshold(rate)
    return ops.index_bits(seed0, seed1, *_wide(words, rows, cols, seq_len)) >= ops.keep_threshold(rate)


def _row_col_bits(base: Array, rows: Array, stride: int, cols: Array, seed0: Array, seed1: Array) -> Array:
    """`ops.index_bits` of the one-word indices ``base + rows * stride + cols``, the first
    round's input built as a per-row part plus a per-column part (mod 2**32)."""
    mix = jnp.uint32(ops.INDEX_MIX)
    per_row = (base + rows.astype(jnp.uint32) * jnp.uint32(stride)) * mix + seed0
    return ops.mix_bits(per_row + cols.astype(jnp.uint32) * mix, seed1)


def _wide(words: tuple[Array, ...], rows: Array, cols: Array, seq_len: int) -> tuple[Array, Array]:
    """The two-word flat index (low, high) of each element of the tile."""
    within = rows * jnp.uint32(seq_len) + cols
    low = words[0] + within
    return low, words[1] + (low < within).astype(jnp.uint32)


def keep_pairs(
    words: tuple[Array, Array, Array, Array], rows: Array, pairs: Array, seq_len: int, rate: float
) -> Array:
    """Boolean [bq, 2 bk']: `keep` with ``narrow`` and ``paired`` for the columns
    2 ``pairs`` and 2 ``pairs`` + 1 (``rows`` [bq, 1], ``pairs`` [1, bk'], an even S),
    one hash for each pair: the halves of [bq, bk'] hashes interleaved into the tile's
    columns. The pair index of element (i, 2m) is (low0 + i S) / 2 + m: low0 (a multiple
    of S * S) and i S are even."""
    low0, _, seed0, seed1 = words
    bits = _row_col_bits(low0 >> 1, rows, seq_len // 2, pairs, seed0, seed1)
    halves = jnp.stack([bits & jnp.uint32(0xFFFF), bits >> 16], axis=-1)
    return halves.reshape(bits.shape[0], 2 * bits.shape[1]) >= ops.keep_threshold(rate, 16)


def narrow_index(batch: int, heads: int, seq_len: int) -> bool:
    """Whether every flat index of the global [B, N, S, S] probabilities fits one uint32
    word (`keep`'s ``narrow``)."""
    return batch * heads * seq_len * seq_len <= 2**32
