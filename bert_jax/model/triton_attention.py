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

`flash_attention_stacked` takes the query/key/value product as one [B, S, N, 3, D] array
(`self_attention`'s stacked projection), reads the three out of it through its block
specs and writes their gradients into one [B, S, N, 3, D] gradient, the dK/dV kernel the
key's and value's slots and the dQ kernel the query's slot of the same buffer (aliased);
with rotary tables it rotates queries and keys inside, tile by tile as it loads them
("rotate half" in float32, cast back: `layers.apply_rotary`'s numbers; each score the sum
of two dots over half a head), and rotates their gradients back. With a bias, each
backward program also writes its tile's column sums of the gradient it stores (as
stored, in float32), and the bias's gradient is the sum of those [S / block, B, N, D]
partial sums. So the copies of the product apart and of the gradients together, the
rotation, and the bias gradient's read of the whole product gradient, are no passes of
their own (bench/RESULTS.md).

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
import operator

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
    # `flash_attention_stacked`: the product in one array, the scores scaled by `scale`
    # inside; with ``rotary``, queries and keys rotated inside.
    stacked: bool = False
    rotary: bool = False
    scale: float = 1.0
    # `flash_attention_stacked`: a [N, 3, D] bias added to the product's tiles as they load.
    bias: bool = False


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


def rotary_refusal(head_dim: int) -> str | None:
    """Why `flash_attention_stacked` cannot rotate a head of this size (its dots take half
    a head)."""
    if head_dim < 2 * MIN_BLOCK:
        least = 2 * MIN_BLOCK
        return f"rotation inside the Triton attention takes a head size of at least {least}, not {head_dim}"
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


def _load(ref, lines, columns, bias_ref) -> Array:
    """``ref[lines, columns]`` plus the bias's ``columns`` (added in float32 and rounded
    once, as XLA adds two bfloat16 arrays), in the ref's dtype."""
    x = ref[lines, columns]
    if bias_ref is None:
        return x
    return (x.astype(jnp.float32) + bias_ref[columns].astype(jnp.float32)[None, :]).astype(ref.dtype)


def _operand(ref, lines, tables, table_lines, opts: Options, bias_ref=None) -> list[Array]:
    """Rows ``lines`` of a [rows, D] query or key ref (plus its bias) as a dot's operands:
    the tile whole, or (``rotary``) its two halves rotated by the angles of the tables'
    rows ``table_lines`` ("rotate half": `layers.apply_rotary`, in float32, cast back)."""
    if not opts.rotary:
        return [_load(ref, lines, slice(None), bias_ref)]
    half = ref.shape[-1] // 2
    x1, x2 = (_load(ref, lines, pl.ds(i * half, half), bias_ref).astype(jnp.float32) for i in range(2))
    sin, cos = (t[table_lines, :] for t in tables)
    return [(x1 * cos - x2 * sin).astype(ref.dtype), (x2 * cos + x1 * sin).astype(ref.dtype)]


def _inputs(refs: tuple, opts: Options) -> tuple[tuple, tuple, tuple]:
    """A kernel's refs after (q, k, v, seg, words): (rotary tables or (), the query's,
    key's and value's biases or Nones, the rest)."""
    tables, refs = (refs[:2], refs[2:]) if opts.rotary else ((), refs)
    biases, refs = (refs[:3], refs[3:]) if opts.bias else ((None,) * 3, refs)
    return tables, biases, refs


def _gradient(parts: list[Array], tables, table_lines, opts: Options) -> list[Array]:
    """The gradient of a query or key tile from the gradient of its `_operand` parts: the
    scale, and (``rotary``) the rotation's transpose."""
    parts = [p * opts.scale for p in parts] if opts.scale != 1.0 else parts
    if not opts.rotary:
        return parts
    (g1, g2), (sin, cos) = parts, (t[table_lines, :] for t in tables)
    return [g1 * cos + g2 * sin, g2 * cos - g1 * sin]


def _store(ref, parts: list[Array], *index, sums_ref=None) -> None:
    """Writes a tile given as `_operand` parts (whole, or two halves) at ``ref[:, *index]``;
    with ``sums_ref``, its column sums as written (rounded to ``ref``'s dtype, summed in
    float32) at ``sums_ref[*index]``."""
    half = parts[0].shape[-1]
    for i, p in enumerate(parts):
        columns = slice(None) if len(parts) == 1 else pl.ds(i * half, half)
        stored = p.astype(ref.dtype)
        ref[(slice(None), *index, columns)] = stored
        if sums_ref is not None:
            sums_ref[(*index, columns)] = jnp.sum(stored.astype(jnp.float32), axis=0)


def _scores(q: list[Array], k: list[Array], seg_q, seg_k, rows, cols, opts: Options) -> Array:
    """Base-2 scores [bq, bk] of a tile (``q`` and ``k`` as `_operand` parts), hidden keys
    at `MASKED`."""
    s = functools.reduce(operator.add, [plgpu.dot(a, b, trans_b=True) for a, b in zip(q, k, strict=True)])
    s = s * (LOG2E * opts.scale)
    return jnp.where(_visible(seg_q, seg_k, rows, cols, opts), s, MASKED)


def _forward_kernel(q_ref, k_ref, v_ref, seg_ref, words_ref, *refs, opts: Options, bq: int, bk: int):
    tables, (bq_ref, bk_ref, bv_ref), (o_ref, lse_ref) = _inputs(refs, opts)
    seq_len = k_ref.shape[0]
    first = pl.program_id(0) * bq
    rows = first + jnp.arange(bq)
    q = _operand(q_ref, slice(None), tables, pl.ds(first, bq), opts, bq_ref)
    seg_q = seg_ref[pl.ds(first, bq)]

    def body(j, carry):
        m, total, acc = carry
        keys = pl.ds(j * bk, bk)
        cols = j * bk + jnp.arange(bk)
        v = _load(v_ref, keys, slice(None), bv_ref)
        k = _operand(k_ref, keys, tables, keys, opts, bk_ref)
        s = _scores(q, k, seg_q, seg_ref[keys], rows, cols, opts)
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
        jnp.zeros((bq, v_ref.shape[-1]), jnp.float32),
    )
    m, total, acc = lax.fori_loop(lo, hi, body, init)
    o_ref[...] = (acc * (1.0 / ((1.0 - opts.rate) * total))[:, None]).astype(o_ref.dtype)
    lse_ref[...] = m + jnp.log2(total)


def _tile_grads(q, k, v, do, lse, delta, seg_q, seg_k, rows, col0, words_ref, seq_len, opts: Options):
    """(dropped probabilities, score gradient) of the tile of keys from ``col0``, both
    [bq, bk] float32 (``q`` and ``k`` as `_operand` parts)."""
    bk = v.shape[0]
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


def _backward_refs(refs: tuple, opts: Options, aliased: bool = False) -> tuple:
    """A backward kernel's refs after (q, k, v, seg, words): (tables, biases, dO, lse,
    delta, outputs); ``aliased``: an input before the outputs that is the output (unread)."""
    tables, biases, refs = _inputs(refs, opts)
    do_ref, lse_ref, delta_ref, *outs = refs
    return tables, biases, do_ref, lse_ref, delta_ref, outs[1:] if aliased else outs


def _dkv_kernel(q_ref, k_ref, v_ref, seg_ref, words_ref, *refs, opts: Options, bq: int, bk: int):
    tables, (bq_ref, bk_ref, bv_ref), do_ref, lse_ref, delta_ref, outs = _backward_refs(refs, opts)
    seq_len = q_ref.shape[0]
    first = pl.program_id(0) * bk
    keys = pl.ds(first, bk)
    k, v = (
        _operand(k_ref, slice(None), tables, keys, opts, bk_ref),
        _load(v_ref, slice(None), slice(None), bv_ref),
    )
    seg_k = seg_ref[keys]

    def body(i, carry):
        dk, dv = carry
        queries = pl.ds(i * bq, bq)
        rows = i * bq + jnp.arange(bq)
        q, do = _operand(q_ref, queries, tables, queries, opts, bq_ref), do_ref[queries, :]
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
        dk = [g + plgpu.dot(ds.astype(p.dtype), p, trans_a=True) for g, p in zip(dk, q, strict=True)]
        return dk, dv

    lo, hi = _blocks_in_reach(first, bk, bq, seq_len // bq, opts, of_keys=False)
    init = ([jnp.zeros(p.shape, jnp.float32) for p in k], jnp.zeros(v.shape, jnp.float32))
    dk, dv = lax.fori_loop(lo, hi, body, init)
    dk = _gradient(dk, tables, keys, opts)
    if opts.stacked:  # one [bk, 2, D] block of the stacked gradient: the key's slot, the value's
        sums = outs[1] if opts.bias else None  # [2, D]: the bias gradient's part
        _store(outs[0], dk, 0, sums_ref=sums)
        _store(outs[0], [dv], 1, sums_ref=sums)
    else:
        _store(outs[0], dk)
        _store(outs[1], [dv])


def _dq_kernel(q_ref, k_ref, v_ref, seg_ref, words_ref, *refs, opts: Options, bq: int, bk: int):
    refs = _backward_refs(refs, opts, aliased=opts.stacked)
    tables, (bq_ref, bk_ref, bv_ref), do_ref, lse_ref, delta_ref, (dq_ref, *sums) = refs
    seq_len = k_ref.shape[0]
    first = pl.program_id(0) * bq
    rows = first + jnp.arange(bq)
    queries = pl.ds(first, bq)
    q, do = _operand(q_ref, slice(None), tables, queries, opts, bq_ref), do_ref[...]
    lse, delta = lse_ref[...], delta_ref[...]
    seg_q = seg_ref[queries]

    def body(j, dq):
        keys = pl.ds(j * bk, bk)
        k, v = _operand(k_ref, keys, tables, keys, opts, bk_ref), _load(v_ref, keys, slice(None), bv_ref)
        _, ds = _tile_grads(
            q, k, v, do, lse, delta, seg_q, seg_ref[keys], rows, j * bk, words_ref, seq_len, opts
        )
        return [g + plgpu.dot(ds.astype(p.dtype), p) for g, p in zip(dq, k, strict=True)]

    lo, hi = _blocks_in_reach(first, bq, bk, seq_len // bk, opts, of_keys=True)
    dq = lax.fori_loop(lo, hi, body, [jnp.zeros(p.shape, jnp.float32) for p in q])
    # With a bias, sums [D]: the query bias gradient's part.
    _store(dq_ref, _gradient(dq, tables, queries, opts), sums_ref=sums[0] if sums else None)


def _specs(block: int, seq_len: int, head_dim: int, tiled: str, slot: int | None = None):
    """A block spec over grid (tile, batch, head): ``tile``, a tile of ``block`` positions
    of [B, S, N, D] (of slot ``slot`` of a stacked [B, S, N, 3, D]); ``whole``, the head's
    whole sequence; ``row_tile``/``row_whole``, the same of a [B, N, S] row statistic."""
    if tiled.startswith("row_"):
        size, at = (block, lambda t: t) if tiled == "row_tile" else (seq_len, lambda t: 0)
        return pl.BlockSpec((None, None, size), lambda t, b, n: (b, n, at(t)))
    size, at = (block, lambda t: t) if tiled == "tile" else (seq_len, lambda t: 0)
    if slot is None:
        return pl.BlockSpec((None, size, None, head_dim), lambda t, b, n: (b, at(t), n, 0))
    return pl.BlockSpec((None, size, None, None, head_dim), lambda t, b, n: (b, at(t), n, slot, 0))


def _sums(tiles: int, batch: int, heads: int, *block: int) -> tuple[pl.BlockSpec, jax.ShapeDtypeStruct]:
    """(block spec, shape) of the programs' column sums, one ``block`` ([(slots,) D]) a
    program of grid (tile, batch, head) in a float32 [tiles, B, N, *block] array."""
    zeros = (0,) * len(block)
    spec = pl.BlockSpec((None, None, None, *block), lambda t, b, n: (t, b, n, *zeros))
    return spec, jax.ShapeDtypeStruct((tiles, batch, heads, *block), jnp.float32)


def _common_specs(seq_len: int):
    seg = pl.BlockSpec((None, seq_len), lambda t, b, n: (b, 0))
    words = pl.BlockSpec((None, None, 4), lambda t, b, n: (b, n, 0))
    return seg, words


def _table_specs(tables: tuple) -> list:
    """The rotation's (sin, cos) [B or 1, S, D/2], whole per batch row."""
    if not tables:
        return []
    rows, s, half = tables[0].shape
    index = (lambda t, b, n: (b, 0, 0)) if rows > 1 else (lambda t, b, n: (0, 0, 0))
    return [pl.BlockSpec((None, s, half), index)] * 2


def _extras(tables: tuple, bias: Array | None) -> tuple[list, list]:
    """(arrays, block specs) of the inputs after (q, k, v, seg, words): the rotation's
    (sin, cos) [B or 1, S, D/2], whole per batch row, and the [N, 3, D] bias, the query's,
    key's and value's slots of the head."""
    arrays, specs = list(tables), _table_specs(tables)
    if bias is not None:
        d = bias.shape[-1]
        for slot in (QUERY, KEY, VALUE):
            arrays.append(bias)
            specs.append(pl.BlockSpec((None, None, d), lambda t, b, n, slot=slot: (n, slot, 0)))
    return arrays, specs


def _params(opts: Options) -> plgpu.CompilerParams:
    return plgpu.CompilerParams(num_warps=opts.blocks.warps, num_stages=opts.blocks.stages)


# Slots of `flash_attention_stacked`'s product: the key's and the value's first, so
# that one [2, D] block of its gradient is the dK/dV kernel's; then the query's.
KEY, VALUE, QUERY = 0, 1, 2


def _operands(qkv: tuple[Array, ...], opts: Options) -> tuple[tuple[Array, ...], tuple[int | None, ...]]:
    """(q, k, v arrays, their slots): three [B, S, N, D], or the stacked product three times."""
    if opts.stacked:
        return (qkv[0],) * 3, (QUERY, KEY, VALUE)
    return qkv, (None, None, None)


def _forward(
    qkv: tuple, tables: tuple, bias: Array | None, seg: Array, words: Array, opts: Options
) -> tuple[Array, Array]:
    arrays, slots = _operands(qkv, opts)
    extras, extra_specs = _extras(tables, bias)
    b, s, n = arrays[0].shape[:3]
    d = arrays[0].shape[-1]
    bq, bk = (kernel_tiles.fit_block(x, s, MIN_BLOCK) for x in (opts.blocks.q, opts.blocks.k))
    seg_spec, words_spec = _common_specs(s)
    return pl.pallas_call(
        functools.partial(_forward_kernel, opts=opts, bq=bq, bk=bk),
        grid=(s // bq, b, n),
        in_specs=[
            _specs(bq, s, d, "tile", slots[0]),
            _specs(bq, s, d, "whole", slots[1]),
            _specs(bq, s, d, "whole", slots[2]),
            seg_spec,
            words_spec,
            *extra_specs,
        ],
        out_specs=[_specs(bq, s, d, "tile"), _specs(bq, s, d, "row_tile")],
        out_shape=[
            jax.ShapeDtypeStruct((b, s, n, d), arrays[0].dtype),
            jax.ShapeDtypeStruct((b, n, s), jnp.float32),
        ],
        compiler_params=_params(opts),
        interpret=opts.interpret,
        name=f"{_name(opts)}_forward",
    )(*arrays, seg, words, *extras)


def _backward(qkv: tuple, tables: tuple, bias, seg, words, out, lse, do, opts: Options) -> tuple[Array, ...]:
    """(dq, dk, dv), or (``stacked``) the product's gradient and the bias's ([N, 3, D]
    float32, from the programs' partial sums; None without a bias)."""
    arrays, slots = _operands(qkv, opts)
    extras, extra_specs = _extras(tables, bias)
    b, s, n = arrays[0].shape[:3]
    d = arrays[0].shape[-1]
    bq, bk = (kernel_tiles.fit_block(x, s, MIN_BLOCK) for x in (opts.blocks.q_bwd, opts.blocks.k_bwd))
    # D_i = dO_i . O_i: one fused XLA reduction, [B, N, S] like the log-sum-exp.
    delta = jnp.einsum("bsnd,bsnd->bns", out.astype(jnp.float32), do.astype(jnp.float32))
    seg_spec, words_spec = _common_specs(s)
    common = dict(compiler_params=_params(opts), interpret=opts.interpret)
    args = (*arrays, seg, words, *extras, do, lse, delta)

    def in_specs(block: int, query_tiles: bool) -> list:
        """q, k, v, seg, words, (sin, cos), dO, lse, delta: the queries' side in tiles and
        the keys whole (``query_tiles``, the dQ kernel) or the other way round (dK/dV)."""
        ours, theirs = ("tile", "whole") if query_tiles else ("whole", "tile")
        q_side = [_specs(block, s, d, ours, slots[0])]
        k_side = [_specs(block, s, d, theirs, slot) for slot in slots[1:]]
        rows = [_specs(block, s, d, f"row_{ours}")] * 2
        return [
            *q_side,
            *k_side,
            seg_spec,
            words_spec,
            *extra_specs,
            _specs(block, s, d, ours),
            *rows,
        ]

    grad_shape = jax.ShapeDtypeStruct(arrays[0].shape, arrays[0].dtype)
    if opts.stacked:  # the key's and value's slots of the gradient, one [2, D] block
        dkv_specs = pl.BlockSpec((None, bk, None, 2, d), lambda t, b, n: (b, t, n, 0, 0))
        dkv_shapes = grad_shape
        if opts.bias:  # and the column sums of both, [S / bk, B, N, 2, D]
            sums_spec, sums_shape = _sums(s // bk, b, n, 2, d)
            dkv_specs, dkv_shapes = [dkv_specs, sums_spec], [grad_shape, sums_shape]
    else:
        dkv_specs = [_specs(bk, s, d, "tile")] * 2
        dkv_shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays[1:]]
    dkv = pl.pallas_call(
        functools.partial(_dkv_kernel, opts=opts, bq=bq, bk=bk),
        grid=(s // bk, b, n),
        in_specs=in_specs(bk, query_tiles=False),
        out_specs=dkv_specs,
        out_shape=dkv_shapes,
        name=f"{_name(opts)}_dkv",
        **common,
    )(*args)
    dq_spec = _specs(bq, s, d, "tile", slots[0])
    if opts.stacked:  # the query's slot written into the same buffer
        dkv, kv_sums = dkv if opts.bias else (dkv, None)
        q_sums = [_sums(s // bq, b, n, d)] if opts.bias else []  # [S / bq, B, N, D]
        dq = pl.pallas_call(
            functools.partial(_dq_kernel, opts=opts, bq=bq, bk=bk),
            grid=(s // bq, b, n),
            in_specs=[*in_specs(bq, query_tiles=True), dq_spec],
            out_specs=[dq_spec, *(spec for spec, _ in q_sums)],
            out_shape=[grad_shape, *(shape for _, shape in q_sums)],
            input_output_aliases={len(args): 0},
            name=f"{_name(opts)}_dq",
            **common,
        )(*args, dkv)
        if not opts.bias:
            return dq[0], None
        # The bias's gradient, slots in the product's order (`KEY`, `VALUE`, `QUERY`).
        return dq[0], jnp.concatenate([kv_sums.sum((0, 1)), dq[1].sum((0, 1))[:, None]], axis=1)
    dq = pl.pallas_call(
        functools.partial(_dq_kernel, opts=opts, bq=bq, bk=bk),
        grid=(s // bq, b, n),
        in_specs=in_specs(bq, query_tiles=True),
        out_specs=dq_spec,
        out_shape=jax.ShapeDtypeStruct(arrays[0].shape, arrays[0].dtype),
        name=f"{_name(opts)}_dq",
        **common,
    )(*args)
    return (dq, *dkv)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def flash_attention(q: Array, k: Array, v: Array, seg: Array, words: Array, opts: Options) -> Array:
    """[B, S, N, D] ×3 (q already scaled by 1/sqrt(D)), segment ids [B, S] int32 and
    `dropout_words` [B, N, 4] → [B, S, N, D]: softmax(q k^T) with dropout, times v."""
    return _forward((q, k, v), (), None, seg, words, opts)[0]


def _flash_fwd(q, k, v, seg, words, opts):
    out, lse = _forward((q, k, v), (), None, seg, words, opts)
    return out, (q, k, v, seg, words, out, lse)


def _flash_bwd(opts, residuals, do):
    q, k, v, seg, words, out, lse = residuals
    dq, dk, dv = _backward((q, k, v), (), None, seg, words, out, lse, do, opts)
    return dq, dk, dv, None, None


flash_attention.defvjp(_flash_fwd, _flash_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def flash_attention_stacked(
    qkv: Array,
    bias: Array | None,
    sin: Array | None,
    cos: Array | None,
    seg: Array,
    words: Array,
    opts: Options,
) -> Array:
    """`flash_attention` of a stacked product [B, S, N, 3, D] (slots `KEY`, `VALUE`,
    `QUERY`; ``opts.stacked`` set) plus ``bias`` [N, 3, D] (``opts.bias``; else None), its
    scores scaled by ``opts.scale`` inside; with ``opts.rotary``, queries and keys rotated
    inside by the angles of ``sin`` and ``cos`` [B or 1, S, D/2] (float32;
    `layers.rotary_tables`; else None). The product's gradient comes as one [B, S, N, 3, D]
    array; the bias's, its sums over the batch and positions, slot by slot."""
    return _forward((qkv,), _tables(sin, cos), bias, seg, words, opts)[0]


def _tables(sin: Array | None, cos: Array | None) -> tuple:
    return () if sin is None else (sin, cos)


def _stacked_fwd(qkv, bias, sin, cos, seg, words, opts):
    out, lse = _forward((qkv,), _tables(sin, cos), bias, seg, words, opts)
    return out, (qkv, bias, sin, cos, seg, words, out, lse)


def _stacked_bwd(opts, residuals, do):
    qkv, bias, sin, cos, seg, words, out, lse = residuals
    dqkv, dbias = _backward((qkv,), _tables(sin, cos), bias, seg, words, out, lse, do, opts)
    dbias = None if dbias is None else dbias.astype(bias.dtype)
    return dqkv, dbias, None, None, None, None


flash_attention_stacked.defvjp(_stacked_fwd, _stacked_bwd)


def _name(opts: Options) -> str:
    """The kernels' name prefix (in profiles and HLO)."""
    if opts.stacked:
        return "attention_rotary" if opts.rotary else "attention_stacked"
    return "attention_dropout"
