"""Flash attention with attention dropout inside the kernel, for NVIDIA GPUs (Pallas on
Triton): the paper's recipe (attention dropout 0.1) without the [B, N, S, S] probabilities.

Why a kernel of our own: cuDNN's fused attention takes a dropout rate, but its seed is a
compile-time constant and XLA advances its random offset each time the kernel runs in the
process, so its masks are not a function of the run's seed and step (a resumed run would
draw other masks than an uninterrupted one). jax's Pallas flash attention
(`jax.experimental.pallas.ops.gpu.attention`) has no dropout. Here the keep mask of
element (b, n, i, j) is `ops.index_bits` of its flat index in [B, N, S, S] under the two
seeds the layer's dropout key gives (`ops.hash_seeds`), drawn block by block inside the
kernel: the very mask the XLA path's `layers.Dropout` applies to the probabilities
(``dropout_rng="hash"``), so the two paths train on the same masks and the backward pass
redraws them instead of storing them.

The algorithm is FlashAttention-2 (Dao, 2023): the forward pass keeps a running maximum and
sum per query (base-2 exponentials, float32) and writes the output and the log-sum-exp;
two backward kernels recompute the probabilities block by block, one accumulating dK and dV
over the queries, one dQ over the keys. Dropout acts on the normalised probabilities, so
the denominator counts every visible key and only the weighted sum sees the mask; the
backward pass's row term ``D_i = dO_i . O_i`` holds with the mask (O is the dropped
output).

Visibility is `attention.visible`'s rule, from segment ids (``input_mask``: 0 padding, else
the example's number): a query sees a real key of its own example, a padding query every
real key; ``causal`` keeps j <= i; ``window`` keeps |i - j| <= window // 2. Blocks that
the causal rule or the window hide are skipped. Shapes: [B, S, N, D] in and out (the
encoder's layout, read in place by the block specs); D a power of two; S a multiple of
the blocks. ``interpret`` runs the kernels in Pallas interpret mode (CPUs: how they are
tested).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from bert_jax.model import kernel_tiles

Array = jax.Array

LOG2E = math.log2(math.e)
MASKED = -1e30  # the (base-2) score of a hidden key: finite, so a row that sees nothing stays finite
MIN_BLOCK = 16  # Triton's smallest dot tile
MAX_SEQ = 2**16  # a tile's index within one (row, head), i * S + j, is one uint32 word


@dataclasses.dataclass(frozen=True)
class Blocks:
    """Tile sizes (powers of two): forward queries x keys, backward queries x keys."""

    q: int = 128
    k: int = 64
    q_bwd: int = 64
    k_bwd: int = 64
    warps: int = 4
    stages: int = 2


@dataclasses.dataclass(frozen=True)
class Options:
    """The static part of one attention: its mask rules, dropout rate and tiles."""

    causal: bool = False
    window: int | None = None
    rate: float = 0.0
    blocks: Blocks = Blocks()
    # Segment ids of several examples a row (`AttentionMask.packed`); else 0 and 1.
    packed: bool = True
    interpret: bool = False
    # Every flat index of the global masks fits one word (`kernel_tiles.narrow_index`).
    narrow: bool = False
    # The "hash16" masks (`ops.pair_bits`) rather than "hash".
    paired: bool = False


def refusal(seq_len: int, head_dim: int) -> str | None:
    """Why these kernels cannot take the shape, or None."""
    if seq_len % MIN_BLOCK or seq_len > MAX_SEQ:
        return (
            f"the Triton attention takes a sequence length that is a multiple of {MIN_BLOCK} "
            f"up to {MAX_SEQ}, not {seq_len}"
        )
    if head_dim < MIN_BLOCK or head_dim & (head_dim - 1) or head_dim > 256:
        return f"the Triton attention takes a head size that is a power of two from 16 to 256, not {head_dim}"
    return None


def _visible(seg_q: Array, seg_k: Array, rows: Array, cols: Array, opts: Options) -> Array:
    """Boolean [bq, bk]: `attention.visible` for one tile."""
    return kernel_tiles.visible(
        seg_q[:, None], seg_k[None, :], rows[:, None], cols[None, :], opts.causal, opts.window, opts.packed
    )


def _keep(words_ref, rows: Array, col0: Array, bk: int, seq_len: int, opts: Options) -> Array:
    """Boolean [bq, bk]: the dropout keep mask of the tile of keys from ``col0``
    (`ops.dropout_keep_mask`'s bits); "hash16" with a one-word index hashes once a pair."""
    words = tuple(words_ref[i] for i in range(4))
    if opts.paired and opts.narrow:
        pairs = lax.div(col0, 2) + jnp.arange(bk // 2)
        return kernel_tiles.keep_pairs(words, rows[:, None], pairs[None, :], seq_len, opts.rate)
    cols = col0 + jnp.arange(bk)
    return kernel_tiles.keep(
        words, rows[:, None], cols[None, :], seq_len, opts.rate, opts.narrow, opts.paired
    )


def _blocks_in_reach(
    first: Array, size: int, block: int, count: int, opts: Options, of_keys: bool
) -> tuple[Array, Array]:
    """[lo, hi) of the blocks of the other axis that a tile of ``size`` positions from
    ``first`` meets: of keys its queries can see (``of_keys``), else of queries that can
    see its keys. The window bounds both sides; the causal rule ends the keys at the
    tile's last query and starts the queries at its first key."""
    last = first + size - 1
    lo, hi = jnp.int32(0), jnp.int32(count)
    if opts.window is not None:
        half = opts.window // 2
        lo = lax.div(jnp.maximum(first - half, 0), block)
        hi = jnp.minimum(hi, lax.div(last + half, block) + 1)
    if opts.causal and of_keys:
        hi = jnp.minimum(hi, lax.div(last, block) + 1)
    elif opts.causal:
        lo = jnp.maximum(lo, lax.div(first, block))
    return lo, hi


def _scores(q: Array, k: Array, seg_q, seg_k, rows, cols, opts: Options) -> Array:
    """Base-2 scores [bq, bk] of a tile, hidden keys at `MASKED`."""
    s = plgpu.dot(q, k, trans_b=True) * LOG2E
    return jnp.where(_visible(seg_q, seg_k, rows, cols, opts), s, MASKED)


def _forward_kernel(
    q_ref, k_ref, v_ref, seg_ref, words_ref, o_ref, lse_ref, *, opts: Options, bq: int, bk: int
):
    seq_len = k_ref.shape[0]
    first = pl.program_id(0) * bq
    rows = first + jnp.arange(bq)
    q = q_ref[...]
    seg_q = seg_ref[pl.ds(first, bq)]

    def body(j, carry):
        m, total, acc = carry
        keys = pl.ds(j * bk, bk)
        cols = j * bk + jnp.arange(bk)
        v = v_ref[keys, :]
        s = _scores(q, k_ref[keys, :], seg_q, seg_ref[keys], rows, cols, opts)
        m_new = jnp.maximum(m, jnp.max(s, axis=1))
        scale = jnp.exp2(m - m_new)
        p = jnp.exp2(s - m_new[:, None])
        total = total * scale + jnp.sum(p, axis=1)
        if opts.rate:
            p = jnp.where(_keep(words_ref, rows, j * bk, bk, seq_len, opts), p, 0.0)
        acc = acc * scale[:, None] + plgpu.dot(p.astype(v.dtype), v)
        return m_new, total, acc

    lo, hi = _blocks_in_reach(first, bq, bk, seq_len // bk, opts, of_keys=True)
    init = (
        jnp.full((bq,), -jnp.inf, jnp.float32),
        jnp.zeros((bq,), jnp.float32),
        jnp.zeros((bq, q.shape[-1]), jnp.float32),
    )
    m, total, acc = lax.fori_loop(lo, hi, body, init)
    o_ref[...] = (acc * (1.0 / ((1.0 - opts.rate) * total))[:, None]).astype(o_ref.dtype)
    lse_ref[...] = m + jnp.log2(total)


def _tile_grads(q, k, v, do, lse, delta, seg_q, seg_k, rows, col0, words_ref, seq_len, opts: Options):
    """(dropped probabilities, score gradient) of the tile of keys from ``col0``, both
    [bq, bk] float32."""
    bk = k.shape[0]
    p = jnp.exp2(_scores(q, k, seg_q, seg_k, rows, col0 + jnp.arange(bk), opts) - lse[:, None])
    dp = plgpu.dot(do, v, trans_b=True)
    if opts.rate:
        keep = _keep(words_ref, rows, col0, bk, seq_len, opts)
        scale = 1.0 / (1.0 - opts.rate)
        dropped = jnp.where(keep, p * scale, 0.0)
        dp = jnp.where(keep, dp * scale, 0.0)
    else:
        dropped = p
    return dropped, p * (dp - delta[:, None])


def _dkv_kernel(
    q_ref, k_ref, v_ref, seg_ref, words_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, *, opts, bq, bk
):
    seq_len = q_ref.shape[0]
    first = pl.program_id(0) * bk
    k, v = k_ref[...], v_ref[...]
    seg_k = seg_ref[pl.ds(first, bk)]

    def body(i, carry):
        dk, dv = carry
        queries = pl.ds(i * bq, bq)
        rows = i * bq + jnp.arange(bq)
        q, do = q_ref[queries, :], do_ref[queries, :]
        dropped, ds = _tile_grads(
            q,
            k,
            v,
            do,
            lse_ref[queries],
            delta_ref[queries],
            seg_ref[queries],
            seg_k,
            rows,
            first,
            words_ref,
            seq_len,
            opts,
        )
        dv = dv + plgpu.dot(dropped.astype(do.dtype), do, trans_a=True)
        dk = dk + plgpu.dot(ds.astype(q.dtype), q, trans_a=True)
        return dk, dv

    lo, hi = _blocks_in_reach(first, bk, bq, seq_len // bq, opts, of_keys=False)
    zeros = jnp.zeros(k.shape, jnp.float32)
    dk, dv = lax.fori_loop(lo, hi, body, (zeros, zeros))
    dk_ref[...] = dk.astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


def _dq_kernel(q_ref, k_ref, v_ref, seg_ref, words_ref, do_ref, lse_ref, delta_ref, dq_ref, *, opts, bq, bk):
    seq_len = k_ref.shape[0]
    first = pl.program_id(0) * bq
    rows = first + jnp.arange(bq)
    q, do = q_ref[...], do_ref[...]
    lse, delta = lse_ref[...], delta_ref[...]
    seg_q = seg_ref[pl.ds(first, bq)]

    def body(j, dq):
        keys = pl.ds(j * bk, bk)
        k = k_ref[keys, :]
        _, ds = _tile_grads(
            q, k, v_ref[keys, :], do, lse, delta, seg_q, seg_ref[keys], rows, j * bk, words_ref, seq_len, opts
        )
        return dq + plgpu.dot(ds.astype(k.dtype), k)

    lo, hi = _blocks_in_reach(first, bq, bk, seq_len // bk, opts, of_keys=True)
    dq = lax.fori_loop(lo, hi, body, jnp.zeros(q.shape, jnp.float32))
    dq_ref[...] = dq.astype(dq_ref.dtype)


def _specs(block: int, seq_len: int, head_dim: int, tiled: str):
    """A block spec over grid (tile, batch, head): ``tile``, a tile of ``block`` positions
    of [B, S, N, D]; ``whole``, the head's whole sequence; ``row_tile``/``row_whole``, the
    same of a [B, N, S] row statistic."""
    tile = pl.BlockSpec((None, block, None, head_dim), lambda t, b, n: (b, t, n, 0))
    whole = pl.BlockSpec((None, seq_len, None, head_dim), lambda t, b, n: (b, 0, n, 0))
    row_tile = pl.BlockSpec((None, None, block), lambda t, b, n: (b, n, t))
    row_whole = pl.BlockSpec((None, None, seq_len), lambda t, b, n: (b, n, 0))
    return {"tile": tile, "whole": whole, "row_tile": row_tile, "row_whole": row_whole}[tiled]


def _common_specs(seq_len: int):
    seg = pl.BlockSpec((None, seq_len), lambda t, b, n: (b, 0))
    words = pl.BlockSpec((None, None, 4), lambda t, b, n: (b, n, 0))
    return seg, words


def _params(opts: Options) -> plgpu.CompilerParams:
    return plgpu.CompilerParams(num_warps=opts.blocks.warps, num_stages=opts.blocks.stages)


def _forward(q: Array, k: Array, v: Array, seg: Array, words: Array, opts: Options) -> tuple[Array, Array]:
    b, s, n, d = q.shape
    bq, bk = (kernel_tiles.fit_block(x, s, MIN_BLOCK) for x in (opts.blocks.q, opts.blocks.k))
    spec = functools.partial(_specs, seq_len=s, head_dim=d)
    seg_spec, words_spec = _common_specs(s)
    return pl.pallas_call(
        functools.partial(_forward_kernel, opts=opts, bq=bq, bk=bk),
        grid=(s // bq, b, n),
        in_specs=[
            spec(bq, tiled="tile"),
            spec(bq, tiled="whole"),
            spec(bq, tiled="whole"),
            seg_spec,
            words_spec,
        ],
        out_specs=[spec(bq, tiled="tile"), spec(bq, tiled="row_tile")],
        out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype), jax.ShapeDtypeStruct((b, n, s), jnp.float32)],
        compiler_params=_params(opts),
        interpret=opts.interpret,
        name="attention_dropout_forward",
    )(q, k, v, seg, words)


def _backward(q, k, v, seg, words, out, lse, do, opts: Options) -> tuple[Array, Array, Array]:
    b, s, n, d = q.shape
    bq, bk = (kernel_tiles.fit_block(x, s, MIN_BLOCK) for x in (opts.blocks.q_bwd, opts.blocks.k_bwd))
    # D_i = dO_i . O_i: one fused XLA reduction, [B, N, S] like the log-sum-exp.
    delta = jnp.einsum("bsnd,bsnd->bns", out.astype(jnp.float32), do.astype(jnp.float32))
    seg_spec, words_spec = _common_specs(s)
    common = dict(compiler_params=_params(opts), interpret=opts.interpret)
    args = (q, k, v, seg, words, do, lse, delta)

    def spec(block: int, tiled: str):
        return _specs(block, s, d, tiled)

    def in_specs(block: int, query_tiles: bool) -> list:
        """q, k, v, seg, words, dO, lse, delta: the queries' side in tiles and the keys
        whole (``query_tiles``, the dQ kernel) or the other way round (dK/dV)."""
        ours, theirs = ("tile", "whole") if query_tiles else ("whole", "tile")
        q_side = [spec(block, ours), spec(block, theirs), spec(block, theirs), seg_spec, words_spec]
        return [*q_side, spec(block, ours), spec(block, f"row_{ours}"), spec(block, f"row_{ours}")]

    dk, dv = pl.pallas_call(
        functools.partial(_dkv_kernel, opts=opts, bq=bq, bk=bk),
        grid=(s // bk, b, n),
        in_specs=in_specs(bk, query_tiles=False),
        out_specs=[spec(bk, "tile"), spec(bk, "tile")],
        out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
        name="attention_dropout_dkv",
        **common,
    )(*args)
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, opts=opts, bq=bq, bk=bk),
        grid=(s // bq, b, n),
        in_specs=in_specs(bq, query_tiles=True),
        out_specs=spec(bq, "tile"),
        out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
        name="attention_dropout_dq",
        **common,
    )(*args)
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def flash_attention(q: Array, k: Array, v: Array, seg: Array, words: Array, opts: Options) -> Array:
    """[B, S, N, D] ×3 (q already scaled by 1/sqrt(D)), segment ids [B, S] int32 and
    `dropout_words` [B, N, 4] → [B, S, N, D]: softmax(q k^T) with dropout, times v."""
    return _forward(q, k, v, seg, words, opts)[0]


def _flash_fwd(q, k, v, seg, words, opts):
    out, lse = _forward(q, k, v, seg, words, opts)
    return out, (q, k, v, seg, words, out, lse)


def _flash_bwd(opts, residuals, do):
    q, k, v, seg, words, out, lse = residuals
    dq, dk, dv = _backward(q, k, v, seg, words, out, lse, do, opts)
    return dq, dk, dv, None, None


flash_attention.defvjp(_flash_fwd, _flash_bwd)
