"""The end of a post-LayerNorm residual block as one kernel pair for NVIDIA GPUs (Pallas on
Triton): ``LN(r + dropout(h + b))``, BERT's ``output_LayerNorm`` and ``attention_LayerNorm``
with the bias of the dense layer before them, its hidden dropout and the residual add.

Why a kernel: XLA computes this block in separate passes over [rows, H]: the statistics
(with the bias, dropout and residual add fused in, writing the sum), the normalisation
(reading the sum again), and in the backward pass two more over the sum and the incoming
gradient, a tiny one between them, and the dense layer's bias gradient (reading the
gradient once more, in two kernels). Compiled for an H100 that is ~500 MB and 9-10
kernels per LayerNorm of BERT-Base at 128 x 256. Here the forward kernel reads h and r
and writes y (and the rows' mean and 1/std); the backward kernel recomputes the sum from
h and r, and writes the gradient of h and of r (the same array without dropout) and, per
block of rows, partial column sums for the LayerNorm's scale and shift and the dense
layer's bias (XLA adds the blocks' partials up).

Pre-LayerNorm blocks (`stream_layer_norm`) keep the sum: it is the residual stream, and
its LayerNorm the next sub-layer's input. The forward kernel writes both; the backward
kernel reads the sum back instead of h and r and adds the stream's own incoming gradient
(from the layers after) to the LayerNorm's.

Dropout draws `ops.dropout_keep_mask`'s masks (``"hash"``, or ``"hash16"`` with
``paired``) of the [rows, H] array, the masks `layers.Dropout` draws on the XLA path: the
flat index of element (i, j) is ``i H + j`` (the global row i under a `shard_map`: the
shard's first row comes in ``words``), one uint32 word (`refusal`: at most 2**32 elements).
Statistics, the sum and the normalisation in float32; two-pass variance.

A row block is loaded in column chunks of a power of two (Triton's tensors are powers of
two; H = 768 is three chunks of 256), held in registers for the statistics, the
normalisation and the gradient. ``interpret`` runs the kernels in Pallas interpret mode
(CPUs: how they are tested).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from bert_jax.model import kernel_tiles

Array = jax.Array

MIN_CHUNK = 16  # the narrowest column chunk (a width must be a multiple of it)
MAX_CHUNK = 1024


@dataclasses.dataclass(frozen=True)
class Options:
    """The static part of one call: LayerNorm epsilon, dropout and the kernels' tiles."""

    eps: float
    rate: float = 0.0
    # The "hash16" masks (`ops.pair_bits`) rather than "hash".
    paired: bool = False
    # Rows a program holds in registers at once (a power of two; fewer where they do not
    # divide): a forward program's rows.
    rows: int = 4
    # Rows a backward program takes, `rows` at a time: each writes one partial column sum.
    block: int = 32
    warps: int = 4
    interpret: bool = False


def chunk(width: int) -> int:
    """The column chunk: the largest power of two dividing ``width``, at most `MAX_CHUNK`."""
    return min(width & -width, MAX_CHUNK)


def refusal(rows: int, width: int) -> str | None:
    """Why these kernels cannot take [rows, width], or None."""
    if chunk(width) < MIN_CHUNK:
        return f"the Triton LayerNorm takes a width that is a multiple of {MIN_CHUNK}, not {width}"
    if rows * width > 2**32:
        return f"the Triton LayerNorm draws dropout masks of at most 2**32 elements, not {rows} x {width}"
    return None


def _keep(words_ref, start: Array, rows: int, col0: int, width: int, cols: int, opts: Options) -> Array:
    """The keep mask of ``rows`` rows from the global row ``start`` x the columns
    [col0, col0 + cols)."""
    row = start + lax.broadcasted_iota(jnp.uint32, (rows, 1), 0)
    columns = jnp.uint32(col0) + lax.broadcasted_iota(jnp.uint32, (1, cols), 1)
    words = (jnp.uint32(0), jnp.uint32(0), words_ref[1], words_ref[2])
    return kernel_tiles.keep(words, row, columns, width, opts.rate, narrow=True, paired=opts.paired)


def _chunks(words_ref, base: Array, first: Array, rows: int, width: int, opts: Options) -> list:
    """Per column chunk of ``rows`` rows from the block's row ``first`` (global row ``base``
    + ``first``): (row slice, columns, keep mask or None)."""
    size = chunk(width)
    lines = pl.ds(first, rows)
    out = []
    for c in range(width // size):
        keep = None
        if opts.rate:
            keep = _keep(words_ref, base + first.astype(jnp.uint32), rows, c * size, width, size, opts)
        out.append((lines, pl.ds(c * size, size), keep))
    return out


def _sums(
    h_ref, b_ref, r_ref, words_ref, base: Array, first: Array, rows: int, width: int, opts: Options
) -> list:
    """`_chunks` with r + dropout(h + b) in float32: (columns, keep mask or None, sum)."""
    out = []
    for lines, cols, keep in _chunks(words_ref, base, first, rows, width, opts):
        u = h_ref[lines, cols].astype(jnp.float32) + b_ref[cols].astype(jnp.float32)[None, :]
        if keep is not None:
            u = jnp.where(keep, u * (1.0 / (1.0 - opts.rate)), 0.0)
        out.append((cols, keep, u + r_ref[lines, cols].astype(jnp.float32)))
    return out


def _forward_kernel(h_ref, b_ref, r_ref, g_ref, beta_ref, words_ref, *out_refs, opts, width):
    y_ref, *s_ref, mean_ref, rstd_ref = out_refs  # s_ref: the stream's sum (`stream_layer_norm`)
    step = _step(opts, y_ref.shape[0])
    base = _first_row(words_ref, y_ref.shape[0])

    def rows(i: Array, carry: None) -> None:
        first = pl.multiple_of(i * step, step)
        lines = pl.ds(first, step)
        parts = _sums(h_ref, b_ref, r_ref, words_ref, base, first, step, width, opts)
        if s_ref:  # the sum as the stream holds it, normalised as the XLA path does
            rounded = [(cols, keep, s.astype(s_ref[0].dtype)) for cols, keep, s in parts]
            for cols, _, s in rounded:
                s_ref[0][lines, cols] = s
            parts = [(cols, keep, s.astype(jnp.float32)) for cols, keep, s in rounded]
        mean = sum(jnp.sum(s, axis=1) for _, _, s in parts) / width
        var = sum(jnp.sum(jnp.square(s - mean[:, None]), axis=1) for _, _, s in parts) / width
        rstd = lax.rsqrt(var + opts.eps)
        for cols, _, s in parts:
            scale = g_ref[cols].astype(jnp.float32)[None, :]
            shift = beta_ref[cols].astype(jnp.float32)[None, :]
            y = (s - mean[:, None]) * rstd[:, None] * scale + shift
            y_ref[lines, cols] = y.astype(y_ref.dtype)
        mean_ref[lines] = mean
        rstd_ref[lines] = rstd

    lax.fori_loop(0, y_ref.shape[0] // step, rows, None)


def _backward_kernel(*refs, opts, width, stream, twice=False):
    """The gradients of `_forward_kernel`'s sum: from h, b and r (``stream`` False) or from
    the stream's sum as the forward wrote it plus the stream's own incoming gradient.
    ``twice``: the output's gradient comes in two parts (`residual_layer_norm_twice`),
    added here."""
    if stream:
        s_ref, g_ref, words_ref, mean_ref, rstd_ref, dy_ref, ds_ref, *out_refs = refs
    else:
        h_ref, b_ref, r_ref, g_ref, words_ref, mean_ref, rstd_ref, dy_ref, *out_refs = refs
    dy2_ref = out_refs.pop(0) if twice else None
    dh_ref, *dr_ref, sums_ref = out_refs
    step, size = _step(opts, dh_ref.shape[0]), chunk(width)
    base = _first_row(words_ref, dh_ref.shape[0])

    def rows(i: Array, sums: tuple) -> tuple:
        first = pl.multiple_of(i * step, step)
        lines = pl.ds(first, step)
        if stream:
            parts = _stream_parts(s_ref, words_ref, base, first, step, width, opts)
        else:
            parts = _sums(h_ref, b_ref, r_ref, words_ref, base, first, step, width, opts)
        mean, rstd = mean_ref[lines][:, None], rstd_ref[lines][:, None]
        pieces = []
        for cols, keep, s in parts:
            xhat = (s - mean) * rstd
            dy = dy_ref[lines, cols].astype(jnp.float32)
            if dy2_ref is not None:
                dy = dy + dy2_ref[lines, cols].astype(jnp.float32)
            pieces.append((cols, keep, xhat, dy, dy * g_ref[cols].astype(jnp.float32)[None, :]))
        c1 = sum(jnp.sum(gdy * xhat, axis=1) for _, _, xhat, _, gdy in pieces)[:, None] / width
        c2 = sum(jnp.sum(gdy, axis=1) for *_, gdy in pieces)[:, None] / width
        out = []
        for (cols, keep, xhat, dy, gdy), (dg, dbeta, db) in zip(pieces, sums, strict=True):
            ds = rstd * (gdy - xhat * c1 - c2)  # the gradient of the sum: of r and of dropout's output
            if stream:  # and the stream's own, from the layers after
                ds = ds + ds_ref[lines, cols].astype(jnp.float32)
            dh = ds if keep is None else jnp.where(keep, ds * (1.0 / (1.0 - opts.rate)), 0.0)
            dh_ref[lines, cols] = dh.astype(dh_ref.dtype)
            if dr_ref:
                dr_ref[0][lines, cols] = ds.astype(dr_ref[0].dtype)
            out.append(
                (dg + jnp.sum(dy * xhat, axis=0), dbeta + jnp.sum(dy, axis=0), db + jnp.sum(dh, axis=0))
            )
        return tuple(out)

    zero = jnp.zeros((size,), jnp.float32)
    sums = lax.fori_loop(0, dh_ref.shape[0] // step, rows, ((zero, zero, zero),) * (width // size))
    for c, column_sums in enumerate(sums):
        for k, total in enumerate(column_sums):  # the scale's, the shift's, the bias's
            sums_ref[0, k, pl.ds(c * size, size)] = total


def _stream_parts(s_ref, words_ref, base: Array, first: Array, rows: int, width: int, opts: Options) -> list:
    """`_sums`' chunks read back from the stream's sum: (columns, keep mask or None, the sum
    in float32)."""
    chunks = _chunks(words_ref, base, first, rows, width, opts)
    return [(cols, keep, s_ref[lines, cols].astype(jnp.float32)) for lines, cols, keep in chunks]


def _first_row(words_ref, block: int) -> Array:
    """The global index of the program's first row (uint32)."""
    return words_ref[0] + (pl.program_id(0) * block).astype(jnp.uint32)


def _step(opts: Options, block: int) -> int:
    """Rows a program holds in registers at once ([step, width] float32 arrays)."""
    return min(opts.rows, block)


def _specs(block: int, width: int) -> tuple:
    rows = pl.BlockSpec((block, width), lambda i: (i, 0))
    vector = pl.BlockSpec((width,), lambda i: (0,))
    words = pl.BlockSpec((4,), lambda i: (0,))
    stats = pl.BlockSpec((block,), lambda i: (i,))
    partial = pl.BlockSpec((1, 3, width), lambda i: (i, 0, 0))
    return rows, vector, words, stats, partial


def _compiler(opts: Options) -> dict:
    return dict(
        compiler_params=plgpu.CompilerParams(num_warps=opts.warps, num_stages=1), interpret=opts.interpret
    )


def _forward(h, b, r, g, beta, words, opts: Options, stream: bool = False) -> tuple[Array, ...]:
    """(y, [the stream's sum,] mean, 1/std)."""
    n, width = h.shape
    block = kernel_tiles.fit_block(opts.rows, n)
    rows, vector, words_spec, stats, _ = _specs(block, width)
    sums = [jax.ShapeDtypeStruct(r.shape, r.dtype)] if stream else []
    return pl.pallas_call(
        functools.partial(_forward_kernel, opts=opts, width=width),
        grid=(n // block,),
        in_specs=[rows, vector, rows, vector, vector, words_spec],
        out_specs=[rows] * (1 + len(sums)) + [stats, stats],
        out_shape=[
            jax.ShapeDtypeStruct(h.shape, h.dtype),
            *sums,
            jax.ShapeDtypeStruct((n,), jnp.float32),
            jax.ShapeDtypeStruct((n,), jnp.float32),
        ],
        name="stream_layer_norm_forward" if stream else "residual_layer_norm_forward",
        **_compiler(opts),
    )(h, b, r, g, beta, words)


def _backward(
    inputs: tuple, dy: Array, opts: Options, stream: bool = False, dy2: Array | None = None
) -> tuple[Array, ...]:
    """``inputs``: (h, b, r, g, words, mean, rstd), or with ``stream`` (s, g, words, mean,
    rstd, ds), s the stream's sum and ds its incoming gradient; ``dy2``: a second part of
    the output's gradient (read and added by the kernel). Returns (dh, dr, dg, dbeta, db)."""
    n, width = dy.shape
    dtype, stream_dtype = (dy.dtype, inputs[0].dtype) if stream else (inputs[0].dtype, inputs[2].dtype)
    block = kernel_tiles.fit_block(opts.block, n)
    rows, vector, words_spec, stats, partial = _specs(block, width)
    programs = n // block
    grads = [jax.ShapeDtypeStruct((n, width), dtype)]
    if opts.rate:  # dropout: the gradient of r differs from that of h
        grads.append(jax.ShapeDtypeStruct((n, width), stream_dtype))
    # Per program the column sums of the scale's, the shift's and the bias's gradient,
    # added up by one XLA reduction.
    sums = jax.ShapeDtypeStruct((programs, 3, width), jnp.float32)
    if stream:
        in_specs = [rows, vector, words_spec, stats, stats, rows, rows]
        operands = (*inputs[:5], dy, inputs[5])
    else:
        in_specs = [rows, vector, rows, vector, words_spec, stats, stats, rows]
        operands = (*inputs, dy)
    if dy2 is not None:
        in_specs, operands = [*in_specs, rows], (*operands, dy2)
    out = pl.pallas_call(
        functools.partial(_backward_kernel, opts=opts, width=width, stream=stream, twice=dy2 is not None),
        grid=(programs,),
        in_specs=in_specs,
        out_specs=[rows] * len(grads) + [partial],
        out_shape=[*grads, sums],
        name="stream_layer_norm_backward"
        if stream
        else f"residual_layer_norm{'_twice' if dy2 is not None else ''}_backward",
        **_compiler(opts),
    )(*operands)
    dh = out[0]
    dr = out[1] if opts.rate else dh.astype(stream_dtype)
    dg, dbeta, db = out[-1].sum(axis=0)
    return dh, dr, dg, dbeta, db


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def residual_layer_norm(
    h: Array, b: Array, r: Array, g: Array, beta: Array, words: Array, opts: Options
) -> Array:
    """``LN(r + dropout(h + b))`` of [rows, H] arrays ``h`` and ``r`` with the vectors
    ``b`` (bias), ``g`` and ``beta`` (the LayerNorm's scale and shift), in ``h``'s dtype.
    ``words``: uint32 [4], (the first row's global index, seed0, seed1, 0)."""
    return _forward(h, b, r, g, beta, words, opts)[0]


def _fwd(h, b, r, g, beta, words, opts):
    y, mean, rstd = _forward(h, b, r, g, beta, words, opts)
    return y, (h, b, r, g, beta, words, mean, rstd)


def _bwd(opts, residuals, dy, dy2=None):
    """``dy2``: the second output's gradient (`residual_layer_norm_twice`)."""
    h, b, r, g, beta, words, mean, rstd = residuals
    dh, dr, dg, dbeta, db = _backward((h, b, r, g, words, mean, rstd), dy, opts, dy2=dy2)
    return dh, db.astype(b.dtype), dr, dg.astype(g.dtype), dbeta.astype(beta.dtype), None


residual_layer_norm.defvjp(_fwd, _bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def residual_layer_norm_twice(
    h: Array, b: Array, r: Array, g: Array, beta: Array, words: Array, opts: Options
) -> tuple[Array, Array]:
    """`residual_layer_norm`'s output twice, for two consumers (a post-LN block's output
    feeds the next block's matmul and its residual add): the backward kernel reads the two
    gradients and adds them as it loads them, instead of XLA adding them in a pass of its
    own (reading two [rows, H] arrays and writing one) before the kernel reads the sum."""
    y = _forward(h, b, r, g, beta, words, opts)[0]
    return y, y


def _twice_fwd(h, b, r, g, beta, words, opts):
    y, residuals = _fwd(h, b, r, g, beta, words, opts)
    return (y, y), residuals


def _twice_bwd(opts, residuals, grads):
    return _bwd(opts, residuals, *grads)


residual_layer_norm_twice.defvjp(_twice_fwd, _twice_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(6,))
def stream_layer_norm(
    h: Array, b: Array, r: Array, g: Array, beta: Array, words: Array, opts: Options
) -> tuple[Array, Array]:
    """The pre-LayerNorm block's residual add and the next LayerNorm: (s, LN(s)) with
    ``s = r + dropout(h + b)`` in ``r``'s dtype (the residual stream) and LN(s) in ``h``'s,
    of [rows, H] arrays; the arguments are `residual_layer_norm`'s. The forward kernel
    writes both, the backward kernel reads s back (not h and r) and adds the stream's own
    incoming gradient to the LayerNorm's."""
    y, s, _, _ = _forward(h, b, r, g, beta, words, opts, stream=True)
    return s, y


def _stream_fwd(h, b, r, g, beta, words, opts):
    y, s, mean, rstd = _forward(h, b, r, g, beta, words, opts, stream=True)
    return (s, y), (s, b, g, beta, words, mean, rstd)


def _stream_bwd(opts, residuals, grads):
    s, b, g, beta, words, mean, rstd = residuals
    ds, dy = grads  # in the dtypes of s and of y (h's)
    dh, dr, dg, dbeta, db = _backward((s, g, words, mean, rstd, ds), dy, opts, stream=True)
    return dh, db.astype(b.dtype), dr, dg.astype(g.dtype), dbeta.astype(beta.dtype), None


stream_layer_norm.defvjp(_stream_fwd, _stream_bwd)


def words(first_row: Array | int, seeds: Array | None) -> Array:
    """The uint32 [4] ``words`` of `residual_layer_norm`: the first row's global index and
    the dropout layer's two hash seeds (`layers.Dropout.seeds`; zeros without dropout)."""
    seeds = jnp.zeros((2,), jnp.uint32) if seeds is None else seeds.astype(jnp.uint32)
    first = jnp.asarray(first_row).astype(jnp.uint32).reshape(1)
    return jnp.concatenate([first, seeds, jnp.zeros((1,), jnp.uint32)])
