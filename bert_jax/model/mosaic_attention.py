"""Attention with attention dropout inside the kernel, for TPUs (Pallas on Mosaic): the
paper's recipe (attention dropout 0.1) without the [B, N, S, S] probabilities in HBM.

Why a kernel of our own: splash attention (`jax.experimental.pallas.ops.tpu`) and jax's
TPU flash attention take no dropout, so a run with attention dropout falls back to the XLA
path, which writes the scores, the probabilities and the dropped probabilities of every
layer to HBM and keeps them for the backward pass. Here the keep mask of element
(b, n, i, j) is `ops.index_bits` of its flat index in [B, N, S, S] under the layer's two
hash seeds (`kernel_tiles.keep`): the very mask the XLA path's `layers.Dropout` applies
(``dropout_rng="hash"``), redrawn in the backward pass instead of stored.

The lengths BERT trains at (128 to 512; up to `MAX_SEQ`) let one grid step hold a tile of
queries against the head's whole sequence of keys in VMEM (a [bq, S] float32 tile), so the
softmax is exact per row: no running maximum, and no log-sum-exp to keep. The forward pass
writes the output alone; the backward pass recomputes the probabilities of its query tile,
writes that tile's dQ and adds to dK and dV, which stay in VMEM across the query tiles
(float32) and are written after the last one. Dropout acts on the normalised
probabilities; the row term of the softmax gradient, sum_j p_ij dP_ij with dP the gradient
of the kept probabilities, is summed on the tile. The tiles' vector work is kept to the
exponentials, the masks and the softmax gradient: the row sums' reciprocal and
1 / (1 - rate) scale the [bq, D] output in the forward pass and dO in the backward pass.

Visibility is `attention.visible`'s rule (`kernel_tiles.visible`). Shapes: [B, S, N, D] in
and out like the other kernels (transposed to heads first for the block specs, as splash
is); S up to `MAX_SEQ`, padded to a multiple of 128. ``interpret`` runs the kernels in
Pallas interpret mode (CPUs: how they are tested; `plan` compiles them for a TPU topology).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from bert_jax.model import kernel_tiles

Array = jax.Array

LANES = 128  # a TPU vector register's minor size: S is a multiple of it
MAX_SEQ = 2048  # a [bq, S] float32 tile and dK, dV of the whole sequence stay well inside VMEM
TILE_ELEMENTS = 256 * 512  # the query tile: the most rows (up to 256) with bq x S within this
MASKED = -1e30  # the score of a hidden key: finite, so a row that sees nothing stays finite
NT = (((1,), (1,)), ((), ()))  # a @ b.T
TN = (((0,), (0,)), ((), ()))  # a.T @ b


@dataclasses.dataclass(frozen=True)
class Options:
    """The static part of one attention: its mask rules and dropout rate."""

    causal: bool = False
    window: int | None = None
    rate: float = 0.0
    # Segment ids of several examples a row (`AttentionMask.packed`); else 0 and 1.
    packed: bool = True
    heads: int = 1  # heads of the whole (unsharded) attention: the masks' flat index
    seq_len: int = 0  # the length the masks' flat index counts (before padding); 0: the arrays'
    interpret: bool = False
    # Every flat index of the global masks fits one word (`kernel_tiles.narrow_index`).
    narrow: bool = False
    # The "hash16" masks (`ops.pair_bits`) rather than "hash".
    paired: bool = False


def query_block(seq_len: int) -> int:
    """Rows of a query tile: 256 or fewer (a power of two, at least 8) with the tile
    [bq, S] within `TILE_ELEMENTS`."""
    block = 256
    while block > 8 and (block * seq_len > TILE_ELEMENTS or seq_len % block):
        block //= 2
    return block


def refusal(seq_len: int) -> str | None:
    """Why this kernel cannot take the shape, or None."""
    if seq_len > MAX_SEQ:
        return f"the Mosaic attention takes sequences up to {MAX_SEQ} long, not {seq_len}"
    return None


def _tile_words(scalars_ref, seq_len: int, heads: int) -> tuple[Array, Array, Array, Array]:
    """`kernel_tiles.dropout_words` of this grid step's (batch row, head): ``scalars_ref``
    holds the two seeds and the shard's first row and head (int32 bits)."""
    row = jnp.full((1, 1), scalars_ref[2] + pl.program_id(0), jnp.int32)
    head = jnp.full((1, 1), scalars_ref[3] + pl.program_id(1), jnp.int32)
    low, high = kernel_tiles.first_index(row, head, heads, seq_len)
    seeds = (jnp.full((1, 1), scalars_ref[i], jnp.int32).astype(jnp.uint32) for i in (0, 1))
    return (low, high, *seeds)


def _exponentials(
    q_ref, k_ref, segq_ref, segk_ref, scalars_ref, opts: Options
) -> tuple[Array, Array, Array | None]:
    """(exp(s - max) [bq, S] float32, 1 / its row sums [bq, 1], the dropout keep mask or
    None) of this grid step's query tile against the head's whole sequence. The caller
    scales by the row sums and 1 / (1 - rate) where it costs least."""
    bq, seq_len = q_ref.shape[0], k_ref.shape[0]
    counted = opts.seq_len or seq_len  # the real length: padded positions are hidden
    first = pl.program_id(2) * bq
    rows = lax.broadcasted_iota(jnp.int32, (bq, seq_len), 0) + first
    cols = lax.broadcasted_iota(jnp.int32, (bq, seq_len), 1)
    s = lax.dot_general(q_ref[...], k_ref[...], NT, preferred_element_type=jnp.float32)
    see = kernel_tiles.visible(
        segq_ref[...], segk_ref[...], rows, cols, opts.causal, opts.window, opts.packed
    )
    s = jnp.where(see, s, MASKED)
    e = jnp.exp(s - jnp.max(s, axis=1, keepdims=True))
    inv_sum = 1.0 / jnp.sum(e, axis=1, keepdims=True)
    if not opts.rate:
        return e, inv_sum, None
    words = _tile_words(scalars_ref, counted, opts.heads)
    return e, inv_sum, kernel_tiles.keep(words, rows, cols, counted, opts.rate, opts.narrow, opts.paired)


def _forward_kernel(scalars_ref, q_ref, k_ref, v_ref, segq_ref, segk_ref, o_ref, *, opts: Options):
    e, inv_sum, kept = _exponentials(q_ref, k_ref, segq_ref, segk_ref, scalars_ref, opts)
    if kept is not None:
        e = jnp.where(kept, e, 0.0)
    v = v_ref[...]
    out = jnp.dot(e.astype(v.dtype), v, preferred_element_type=jnp.float32)
    o_ref[...] = (out * (inv_sum * (1.0 / (1.0 - opts.rate)))).astype(o_ref.dtype)


def _backward_kernel(
    scalars_ref,
    q_ref,
    k_ref,
    v_ref,
    segq_ref,
    segk_ref,
    do_ref,
    dq_ref,
    dk_ref,
    dv_ref,
    dk_acc,
    dv_acc,
    *,
    opts,
):
    tile = pl.program_id(2)

    @pl.when(tile == 0)
    def _start():
        dk_acc[...] = jnp.zeros(dk_acc.shape, jnp.float32)
        dv_acc[...] = jnp.zeros(dv_acc.shape, jnp.float32)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    e, inv_sum, kept = _exponentials(q_ref, k_ref, segq_ref, segk_ref, scalars_ref, opts)
    p = e * inv_sum
    # The output is (p * keep / (1 - rate)) v: 1 / (1 - rate) goes on dO ([bq, D]), the
    # mask on the [bq, S] tiles.
    do = do_ref[...]
    if kept is not None:
        do = (do.astype(jnp.float32) * (1.0 / (1.0 - opts.rate))).astype(do.dtype)
    dp = lax.dot_general(do, v, NT, preferred_element_type=jnp.float32)  # of the kept probabilities
    dropped = p
    if kept is not None:
        dropped, dp = jnp.where(kept, p, 0.0), jnp.where(kept, dp, 0.0)
    dv_acc[...] += lax.dot_general(dropped.astype(do.dtype), do, TN, preferred_element_type=jnp.float32)
    ds = p * (dp - jnp.sum(p * dp, axis=1, keepdims=True))
    dq_ref[...] = jnp.dot(ds.astype(k.dtype), k, preferred_element_type=jnp.float32).astype(dq_ref.dtype)
    dk_acc[...] += lax.dot_general(ds.astype(q.dtype), q, TN, preferred_element_type=jnp.float32)

    @pl.when(tile == pl.num_programs(2) - 1)
    def _end():
        dk_ref[...] = dk_acc[...].astype(dk_ref.dtype)
        dv_ref[...] = dv_acc[...].astype(dv_ref.dtype)


def _specs(seq_len: int, head_dim: int, bq: int) -> dict[str, pl.BlockSpec]:
    """Block specs over grid (batch row, head, query tile) of the heads-first [B, N, S, D]
    arrays (``tile``: this step's queries; ``whole``: the head's sequence) and of the
    segment ids as a column [B, S, 1] (``seg_tile``) and a row [B, 1, S] (``seg_whole``)."""
    return {
        "scalars": pl.BlockSpec(memory_space=pltpu.SMEM),
        "tile": pl.BlockSpec((None, None, bq, head_dim), lambda b, n, t: (b, n, t, 0)),
        "whole": pl.BlockSpec((None, None, seq_len, head_dim), lambda b, n, t: (b, n, 0, 0)),
        "seg_tile": pl.BlockSpec((None, bq, 1), lambda b, n, t: (b, t, 0)),
        "seg_whole": pl.BlockSpec((None, 1, seq_len), lambda b, n, t: (b, 0, 0)),
    }


def _cost(q: Array, matmuls: int, arrays: int) -> pl.CostEstimate:
    """What a kernel costs, for XLA's scheduler: ``matmuls`` [S, S, D] products per (batch
    row, head), one exponential per score, ``arrays`` [B, N, S, D] arrays read or written."""
    b, n, s, d = q.shape
    return pl.CostEstimate(
        flops=2 * matmuls * b * n * s * s * d,
        transcendentals=b * n * s * s,
        bytes_accessed=arrays * q.size * q.dtype.itemsize,
    )


def _call(
    body, opts: Options, q: Array, k: Array, v: Array, seg: Array, scalars: Array, *tiles: Array, **how
) -> list[Array]:
    """One `pallas_call` of ``body`` over grid (batch row, head, query tile): the common
    inputs (scalars, q's tile, k and v whole, the segment ids both ways), then ``tiles``
    (arrays of q's shape, by query tile). ``how``: ``outputs``, the outputs' specs ("tile"
    or "whole", shaped like q, k, v in turn); ``scratch``; ``accumulates``, the query tiles
    run in order (the outputs stay in VMEM across them); ``cost`` (`_cost`'s arguments);
    ``name``."""
    b, n, s, d = q.shape
    bq = query_block(s)
    spec = _specs(s, d, bq)
    common = [spec[name] for name in ("scalars", "tile", "whole", "whole", "seg_tile", "seg_whole")]
    outputs = how["outputs"]
    last = "arbitrary" if how.get("accumulates") else "parallel"
    return pl.pallas_call(
        functools.partial(body, opts=opts),
        grid=(b, n, s // bq),
        in_specs=common + [spec["tile"]] * len(tiles),
        out_specs=[spec[o] for o in outputs],
        out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)[: len(outputs)]],
        scratch_shapes=how.get("scratch", ()),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", last)),
        cost_estimate=_cost(q, **how["cost"]),
        interpret=opts.interpret,
        name=how["name"],
    )(scalars, q, k, v, seg[:, :, None], seg[:, None, :], *tiles)


def _forward(q: Array, k: Array, v: Array, seg: Array, scalars: Array, opts: Options) -> Array:
    (out,) = _call(
        _forward_kernel,
        opts,
        q,
        k,
        v,
        seg,
        scalars,
        outputs=("tile",),
        cost=dict(matmuls=2, arrays=4),
        name="attention_dropout_forward",
    )
    return out


def _backward(q, k, v, seg, scalars, do, opts: Options) -> tuple[Array, Array, Array]:
    s, d = q.shape[2:]
    dq, dk, dv = _call(
        _backward_kernel,
        opts,
        q,
        k,
        v,
        seg,
        scalars,
        do,
        outputs=("tile", "whole", "whole"),
        scratch=[pltpu.VMEM((s, d), jnp.float32), pltpu.VMEM((s, d), jnp.float32)],
        accumulates=True,
        cost=dict(matmuls=5, arrays=7),
        name="attention_dropout_backward",
    )
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _heads_first(q: Array, k: Array, v: Array, seg: Array, scalars: Array, opts: Options) -> Array:
    return _forward(q, k, v, seg, scalars, opts)


def _fwd(q, k, v, seg, scalars, opts):
    return _forward(q, k, v, seg, scalars, opts), (q, k, v, seg, scalars)


def _bwd(opts, residuals, do):
    q, k, v, seg, scalars = residuals
    dq, dk, dv = _backward(q, k, v, seg, scalars, do, opts)
    return dq, dk, dv, None, None


_heads_first.defvjp(_fwd, _bwd)


def scalars(seeds: Array, offsets: tuple[Array | int, Array | int] = (0, 0)) -> Array:
    """int32 [4]: the layer's two hash seeds (uint32 bits) and the shard's first batch row
    and head, what the kernels read from SMEM."""
    seed_bits = lax.bitcast_convert_type(jnp.asarray(seeds).astype(jnp.uint32), jnp.int32)
    first = jnp.stack([jnp.asarray(o, jnp.int32) for o in offsets])
    return jnp.concatenate([seed_bits, first])


def attention(q: Array, k: Array, v: Array, seg: Array, scalars: Array, opts: Options) -> Array:
    """[B, S, N, D] ×3 (q already scaled by 1/sqrt(D)), segment ids [B, S] int32 and
    `scalars` → [B, S, N, D]: softmax(q k^T) with dropout at ``opts.rate``, times v. A
    length that is not a multiple of 128 is padded to one with padding positions (segment
    0, seen by no query; their outputs dropped); the masks keep the real length's index."""
    s = q.shape[1]
    q, k, v, seg = kernel_tiles.pad_sequence(LANES, q, k, v, seg)
    if q.shape[1] != s:
        opts = dataclasses.replace(opts, seq_len=s)
    heads_first = lambda x: jnp.swapaxes(x, 1, 2)
    out = _heads_first(heads_first(q), heads_first(k), heads_first(v), seg, scalars, opts)
    return heads_first(out)[:, :s]
