"""Hot ops with cheaper XLA lowerings than the obvious code: dense layers, dropout masks,
exact GELU, and the masked-LM output layer with hand-written gradients.

Dense (`dense`): ``x @ kernel + bias`` on 2-D views. A layer's weight gradient is
``x^T @ g``, a dot whose left operand is contracted along its rows. XLA:CPU gives such a
dot to Eigen, which jaxlib compiles for its AVX baseline (no FMA, 256-bit), and row-major
dots to YNNPACK, which picks AVX-512 FMA kernels at run time. On a core whose AVX-512
units are full width (512-bit FMA) Eigen then reaches at most half of the peak, on a
third of a training step's FLOPs. ``weight_grad="copy_x"`` writes ``x^T`` once (a copy of
one activation, ~1 ms for BERT-Base's [1024, 3072]) and multiplies row-major;
``"copy_g"`` transposes ``g`` and the product instead, for an ``x`` that XLA would
recompute column by column inside its copy (the GELU output: 6x slower than a copy).
Measured on a Zen 4 host (256-bit FMA units, where AVX and AVX-512 peak alike): the
BERT-Base step is as fast either way, within this machine's noise. The bias gradient
(`bias_grad`, `BIAS_GRADS`) is a matrix-vector product, ``"matvec"`` (XLA's CPU column
sum is ~10x slower), or a float32 reduction, ``"sum"``, which XLA:GPU fuses into the
kernel that writes the gradient instead of reading ``[N, M]`` again in a matmul.

GELU (`gelu`): the exact (erf) form, as BERT and Hugging Face use it. `jax.nn.gelu`
evaluates it through ``erfc`` (two branches, both computed) and differentiates that;
here the forward pass is ``x * Phi(x)`` with one ``erf``, and the backward pass
recomputes ``Phi(x)`` from ``x`` (``Phi(x) + x * phi(x)``): keeping only ``x`` makes
the forward pass one fusion, and ``Phi(x)`` is never written out.

Dropout (`dropout_keep_mask`): threefry, JAX's default generator, costs ~80 integer
operations per 32 random bits; on CPU the masks of BERT-mini's ~17M dropped activations
were ~20% of a training step. Dropout needs independent Bernoulli draws, not a
cryptographic stream: here each element's bits are the murmur3 finaliser (applied twice,
with two 32-bit seeds drawn by threefry from the layer's dropout key) of its flat index.
That is a bijection of the index with full avalanche, ~16 operations per element, and a
function of the global index only, so the mask does not depend on how the array is
sharded. The index is 64-bit (two words; the high one is mixed into the second round
and is zero below 2**32 elements): BERT-Large's [4096, 512, 4096] activations have 8.6e9
elements, and a 32-bit index would repeat their mask every 2**32. The keep rate and
independence are tested statistically, and the bits of blocks of larger shapes
(`hash_bits`'s `start` and `block`) against a NumPy reference of the 64-bit index.
``"hash16"`` (`pair_bits`) takes 16 bits an element, the two halves of the hash of
``index // 2``: the rate is rounded to a multiple of 2**-16, and a kernel holding both
neighbours in its tile hashes once for two elements. On a GPU the in-kernel hash, not the
tile's matmuls, is most of what an attention-dropout kernel computes per element.

At BERT-mini scale the vocabulary projection (`[P, H] x [V, H]`, V = 30,522) and its
softmax are about a third of a training step on CPU, and XLA's autodiff of them is
wasteful there: the bias gradient becomes a slow column reduction, the embedding
gradient a transposing copy of the `[P, V]` logit gradient, the integer-label
cross-entropy a scatter, and the accuracy an argmax (a variadic reduction). These
versions compute the same values (tests compare them with plain autodiff):

- `tied_logits(h, embedding, bias)`: ``h @ embedding.T + bias``; the backward pass takes
  the bias gradient as a matrix-vector product instead of a column sum.
- `softmax_cross_entropy(logits, labels)`: per-row loss and "label is the arg-max"
  (``label logit >= max logit``, from the max the softmax needs anyway); the backward
  pass is one fused elementwise pass, ``softmax - one_hot``.
- `masked_lm_cross_entropy(h, table, bias, labels, vocab_size)`: both in one op, as
  pre-training's loss takes them: the logits are written once (without their bias) and
  their gradient once, in the compute dtype; the label's logit is a masked sum that XLA
  fuses into the softmax's pass. Compiled for an H100 (`bench/gpu_compile.py`), ModernBERT-
  base's step at 1,024 x 32 (9,856 predictions x 50,432 columns) moves 150.1 GB a step
  against 158.0, BERT-Base's at 128 x 256 93.1 against 95.0.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

Array = jax.Array


WEIGHT_GRADS = ("direct", "copy_x", "copy_g")
BIAS_GRADS = ("matvec", "sum")


def _weight_grad(x: Array, g: Array, how: str) -> Array:
    """``x^T @ g`` for ``x: [N, K]``, ``g: [N, M]``, accumulated in float32.

    ``direct``: one dot contracting both operands along their rows (Eigen on XLA:CPU).
    ``copy_x``: ``copy(x^T) @ g``; ``copy_g``: ``copy(copy(g^T) @ x)^T``, for an ``x``
    that XLA would recompute inside its copy. The barriers keep XLA from folding the
    transposes back into the dot (they are removed after that pass).
    """
    barrier = jax.lax.optimization_barrier
    f32 = jnp.float32
    if how == "copy_x":
        return jnp.matmul(barrier(x.T), g, preferred_element_type=f32)
    if how == "copy_g":
        return barrier(jnp.matmul(barrier(g.T), x, preferred_element_type=f32)).T
    return jnp.matmul(x.T, g, preferred_element_type=f32)


def _column_sum(g: Array, how: str = "matvec") -> Array:
    """Sum over rows of a 2-D array in float32: a matrix-vector product (``"matvec"``) or a
    reduction (``"sum"``)."""
    if how == "sum":
        return jnp.sum(g, axis=0, dtype=jnp.float32)
    return jnp.matmul(jnp.ones((g.shape[0],), g.dtype), g, preferred_element_type=jnp.float32)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def dense(
    x: Array, kernel: Array, bias: Array | None, weight_grad: str = "direct", bias_grad: str = "matvec"
) -> Array:
    """``[N, K] @ [K, M] + [M]`` (no bias when `bias` is None); `weight_grad`
    (`WEIGHT_GRADS`) and `bias_grad` (`BIAS_GRADS`): see the module docstring."""
    return _affine(x, kernel, bias)


def _affine(x: Array, kernel: Array, bias: Array | None) -> Array:
    y = x @ kernel
    return y if bias is None else y + bias


def _dense_fwd(
    x: Array, kernel: Array, bias: Array | None, weight_grad: str, bias_grad: str
) -> tuple[Array, tuple]:
    return _affine(x, kernel, bias), (x, kernel, bias)


def _dense_bwd(weight_grad: str, bias_grad: str, res: tuple, g: Array) -> tuple[Array, Array, Array | None]:
    x, kernel, bias = res
    dx = (g @ kernel.T).astype(x.dtype)
    dk = _weight_grad(x, g, weight_grad).astype(kernel.dtype)
    return dx, dk, None if bias is None else _column_sum(g, bias_grad).astype(bias.dtype)


dense.defvjp(_dense_fwd, _dense_bwd)


_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


@jax.custom_vjp
def gelu(x: Array) -> Array:
    """Exact GELU, ``x * Phi(x)`` with the standard normal CDF ``Phi``."""
    return x * _normal_cdf(x)


def _normal_cdf(x: Array) -> Array:
    return 0.5 * (1.0 + jax.lax.erf(x * jnp.asarray(_SQRT_HALF, x.dtype)))


def _gelu_fwd(x: Array) -> tuple[Array, Array]:
    # Only x is kept: the output is then one fusion (erf included) that XLA does not
    # duplicate into its consumers, such as the transposed copy of `dense`'s backward.
    return x * _normal_cdf(x), x


def _gelu_bwd(x: Array, g: Array) -> tuple[Array]:
    pdf = jnp.asarray(_INV_SQRT_2PI, x.dtype) * jnp.exp(-0.5 * x * x)
    return (g * (_normal_cdf(x) + x * pdf),)


gelu.defvjp(_gelu_fwd, _gelu_bwd)


def _fmix32(x: Array) -> Array:
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


_WORD = 2**32
_HIGH_MIX = 0x632BE5AB  # odd: the high word's multiplier before it enters the second round
INDEX_MIX = 0x9E3779B9  # odd: the low word's multiplier before the first round


def hash_bits(
    key: Array,
    shape: tuple[int, ...],
    start: tuple[int, ...] | None = None,
    block: tuple[int, ...] | None = None,
) -> Array:
    """uint32 bits of `shape`, a function of (key, flat element index), or only of its
    `block` at `start` (the same values as slicing the whole; nothing else is computed).

    The flat index is taken as two 32-bit words ``(low, high)``; ``high`` enters the
    second round, so arrays of 2**32 elements or more do not repeat their bits, and an
    array smaller than that gets the bits it had with a 32-bit index."""
    seeds = hash_seeds(key)
    low, high = flat_index_words(tuple(shape), start, block)
    return index_bits(seeds[0], seeds[1], low, high)


def hash_seeds(key: Array) -> Array:
    """The two uint32 seeds `hash_bits` draws from ``key`` (threefry)."""
    return jax.random.bits(key, (2,), jnp.uint32)


def index_bits(seed0: Array, seed1: Array, low: Array, high: Array | None) -> Array:
    """uint32 bits of the flat indices ``(low, high)`` (uint32 words; ``high`` None where it
    is 0) under two seeds: what `hash_bits` gives each element, and what a kernel that
    draws the same masks block by block (`triton_attention`) computes in place."""
    return mix_bits(low * jnp.uint32(INDEX_MIX) + seed0, seed1, high)


def mix_bits(first: Array, seed1: Array, high: Array | None = None) -> Array:
    """`index_bits` from its first round's input, ``low * INDEX_MIX + seed0`` (mod 2**32):
    a kernel that builds that input from per-row and per-column parts (one addition an
    element) calls this."""
    x = _fmix32(first) ^ seed1
    if high is not None:
        x = x ^ (high * jnp.uint32(_HIGH_MIX))
    return _fmix32(x)


def flat_index_words(
    shape: tuple[int, ...], start: tuple[int, ...] | None = None, block: tuple[int, ...] | None = None
) -> tuple[Array, Array | None]:
    """Row-major flat index of each element of `block` at `start` in an array of `shape`,
    as uint32 words (low, high); high is None where no index reaches 2**32.

    The trailing axes whose product fits a word give the low part directly; each leading
    axis adds its index times its stride as a 64-bit product (16-bit limbs), computed on
    that axis alone and broadcast: an element costs a few integer operations more."""
    start = (0,) * len(shape) if start is None else tuple(start)
    block = shape if block is None else tuple(block)
    _check_block(shape, start, block)
    size = math.prod(shape)
    if size <= _WORD and block == shape:
        return jax.lax.iota(jnp.uint32, size).reshape(shape), None
    k = len(shape)  # shape[k:] is the longest suffix whose indices fit one word
    while k and math.prod(shape[k - 1 :]) <= _WORD:
        k -= 1
    low = jnp.zeros(block, jnp.uint32)
    for axis in range(k, len(shape)):
        stride = math.prod(shape[axis + 1 :])
        low = low + _axis_index(block, start, axis) * jnp.uint32(stride % _WORD)
    if k == 0:
        return low, None
    off_low = off_high = jnp.zeros((), jnp.uint32)
    for axis in range(k):
        term = mul_wide(_axis_index(block, start, axis), math.prod(shape[axis + 1 :]))
        off_low, off_high = add_wide((off_low, off_high), term)
    return add_wide((off_low, off_high), (low, jnp.zeros((), jnp.uint32)))


def _check_block(shape: tuple[int, ...], start: tuple[int, ...], block: tuple[int, ...]) -> None:
    if not (len(start) == len(block) == len(shape)):
        raise ValueError(f"start {start} and block {block} need one entry per axis of {shape}")
    if any(s < 0 or b < 0 or s + b > d for s, b, d in zip(start, block, shape, strict=True)):
        raise ValueError(f"block {block} at {start} is not inside shape {shape}")
    if any(d > _WORD for d in shape) or math.prod(shape) > _WORD**2:
        raise ValueError(f"shape {shape}: an axis over 2**32 or over 2**64 elements in all")


def _axis_index(block: tuple[int, ...], start: tuple[int, ...], axis: int) -> Array:
    """The `axis` index of a block's elements (uint32), shaped to broadcast against it."""
    dims = tuple(n if a == axis else 1 for a, n in enumerate(block))
    return jax.lax.broadcasted_iota(jnp.uint32, dims, axis) + jnp.uint32(start[axis])


def mul_wide(a: Array, c: int) -> tuple[Array, Array]:
    """``a * c mod 2**64`` as (low, high) uint32 words, for uint32 `a` and ``0 <= c < 2**64``."""
    c_low, c_high = c % _WORD, c // _WORD % _WORD
    b0, b1 = jnp.uint32(c_low & 0xFFFF), jnp.uint32(c_low >> 16)
    a0, a1 = a & jnp.uint32(0xFFFF), a >> 16
    t = a0 * b0
    u = a1 * b0 + (t >> 16)
    v = a0 * b1 + (u & jnp.uint32(0xFFFF))
    carry_high = a1 * b1 + (u >> 16) + (v >> 16)  # the high word of a * c_low
    return a * jnp.uint32(c_low), carry_high + a * jnp.uint32(c_high)


def add_wide(x: tuple[Array, Array], y: tuple[Array, Array]) -> tuple[Array, Array]:
    """64-bit sum of (low, high) uint32 pairs, modulo 2**64."""
    low = x[0] + y[0]
    return low, x[1] + y[1] + (low < y[0]).astype(jnp.uint32)


def dropout_keep_mask(key: Array, rate: float, shape: tuple[int, ...], impl: str = "hash") -> Array:
    """Boolean mask, True with probability ``1 - rate`` per element (``hash16``: ``1 - rate``
    rounded to a multiple of 2**-16)."""
    if impl == "threefry":
        return jax.random.bernoulli(key, 1.0 - rate, shape)
    if impl == "hash16":
        seeds = hash_seeds(key)
        low, high = flat_index_words(tuple(shape))
        return pair_bits(seeds[0], seeds[1], low, high) >= keep_threshold(rate, 16)
    return hash_bits(key, shape) >= keep_threshold(rate)


def pair_bits(seed0: Array, seed1: Array, low: Array, high: Array | None) -> Array:
    """16 bits (a uint32 below 2**16) of each flat index ``(low, high)``: the elements at
    2p and 2p + 1 take the low and the high half of `index_bits` of p. One hash serves two
    neighbours (the ``"hash16"`` masks): a kernel that holds both in its tile computes it
    once (`kernel_tiles.keep_pairs`); here each element computes its pair's."""
    pair_low = low >> 1 if high is None else (low >> 1) | (high << 31)
    bits = index_bits(seed0, seed1, pair_low, None if high is None else high >> 1)
    return jnp.where((low & 1) == 1, bits >> 16, bits & jnp.uint32(0xFFFF))


def inverted_dropout(key: Array, rate: float, x: Array, impl: str = "hash") -> Array:
    """``x`` with the elements of `dropout_keep_mask` kept and scaled by ``1 / (1 - rate)``,
    the others 0 (`layers.Dropout`; what the Triton and Mosaic attention kernels apply in place)."""
    keep = dropout_keep_mask(key, rate, x.shape, impl)
    return jnp.where(keep, x / jnp.asarray(1.0 - rate, x.dtype), jnp.zeros_like(x))


def keep_threshold(rate: float, bits: int = 32) -> Array:
    """The uint32 at or above which `hash_bits` (``bits`` 32) or `pair_bits` (16) keeps an
    element under dropout ``rate``."""
    return jnp.uint32(min(round(rate * 2**bits), 2**bits - 1))


def _logits(h: Array, embedding: Array, bias: Array) -> Array:
    return jnp.einsum("...h,vh->...v", h, embedding, preferred_element_type=jnp.float32) + bias


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def tied_logits(
    h: Array, embedding: Array, bias: Array, weight_grad: str = "direct", bias_grad: str = "matvec"
) -> Array:
    """``[..., H] x [V, H] → [..., V]`` float32 logits plus a float32 ``[V]`` bias."""
    return _logits(h, embedding, bias)


def _tied_logits_fwd(
    h: Array, embedding: Array, bias: Array, weight_grad: str, bias_grad: str
) -> tuple[Array, tuple[Array, Array, Array]]:
    return _logits(h, embedding, bias), (h, embedding, bias)


def _tied_logits_bwd(
    weight_grad: str, bias_grad: str, res: tuple[Array, Array, Array], g: Array
) -> tuple[Array, Array, Array]:
    h, embedding, bias = res
    g2 = g.reshape(-1, g.shape[-1])  # [N, V] float32
    h2 = h.reshape(-1, h.shape[-1])  # [N, H]
    dh = (g2.astype(embedding.dtype) @ embedding).astype(h.dtype).reshape(h.shape)
    # [V, N] @ [N, H]: the embedding gradient is a weight gradient (see `dense`).
    d_embedding = _weight_grad(g2, h2.astype(jnp.float32), weight_grad).astype(embedding.dtype)
    return dh, d_embedding, _column_sum(g2, bias_grad).astype(bias.dtype)


tied_logits.defvjp(_tied_logits_fwd, _tied_logits_bwd)


@jax.custom_vjp
def softmax_cross_entropy(logits: Array, labels: Array) -> tuple[Array, Array]:
    """Per-row cross-entropy of integer `labels` and whether the label has the top logit."""
    return _xent_fwd(logits, labels)[0]


def _xent_fwd(logits: Array, labels: Array) -> tuple[tuple[Array, Array], tuple[Array, Array, Array]]:
    logits = logits.astype(jnp.float32)
    top = jnp.max(logits, axis=-1, keepdims=True)
    lse = top + jnp.log(jnp.sum(jnp.exp(logits - top), axis=-1, keepdims=True))
    label_logit = jnp.take_along_axis(logits, labels[..., None].astype(jnp.int32), axis=-1)
    loss = (lse - label_logit)[..., 0]
    correct = (label_logit >= top)[..., 0]
    return (loss, correct), (logits, lse, labels)


def _xent_bwd(res: tuple[Array, Array, Array], g: tuple[Array, Array]) -> tuple[Array, None]:
    logits, lse, labels = res
    g_loss = g[0][..., None]
    vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
    one_hot = (vocab == labels[..., None].astype(jnp.int32)).astype(jnp.float32)
    return g_loss * (jnp.exp(logits - lse) - one_hot), None


softmax_cross_entropy.defvjp(_xent_fwd, _xent_bwd)


def _identity(x: Array) -> Array:
    return x


def mask_padding_columns(logits: Array, vocab_size: int) -> Array:
    """The logits of padding columns (ids >= `vocab_size`) set to the dtype's minimum: they
    get no probability, are never the arg-max and pass no gradient. A no-op without them."""
    if vocab_size >= logits.shape[-1]:
        return logits
    real = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1) < vocab_size
    return jnp.where(real, logits, jnp.finfo(logits.dtype).min)


def _vocab_logits(z: Array, bias: Array, vocab_size: int) -> Array:
    """Float32 logits from the matmul's output: bias added, padding columns masked."""
    return mask_padding_columns(z + bias.astype(jnp.float32), vocab_size)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def masked_lm_cross_entropy(
    h: Array,
    table: Array,
    bias: Array,
    labels: Array,
    vocab_size: int,
    weight_grad: str = "direct",
    constrain=_identity,
    bias_grad: str = "matvec",
) -> tuple[Array, Array]:
    """`tied_logits` then `softmax_cross_entropy`, with the padding columns (ids >=
    `vocab_size`) masked, in one op: per-row cross-entropy and "label is the arg-max".

    Only the matmul's float32 output is kept for the backward pass; the bias, the padding
    mask and the softmax are recomputed inside the passes that read it, so the
    ``[..., V]`` logits are written once forward, not once more with the bias added and
    again masked. The backward pass writes the logit gradient once, in ``table``'s dtype
    (the compute dtype; float32 stays float32), and both matmuls and the bias gradient
    read that. `constrain` is applied to the ``[..., V]`` arrays (a sharding constraint
    naming the vocabulary axis)."""
    return _mlm_xent_fwd(h, table, bias, labels, vocab_size, weight_grad, constrain, bias_grad)[0]


def _mlm_xent_fwd(
    h: Array,
    table: Array,
    bias: Array,
    labels: Array,
    vocab_size: int,
    weight_grad: str,
    constrain,
    bias_grad: str,
) -> tuple[tuple[Array, Array], tuple[Array, ...]]:
    z = constrain(jnp.einsum("...h,vh->...v", h, table, preferred_element_type=jnp.float32))
    logits = _vocab_logits(z, bias, vocab_size)
    top = jnp.max(logits, axis=-1, keepdims=True)
    lse = top + jnp.log(jnp.sum(jnp.exp(logits - top), axis=-1, keepdims=True))
    # The label's logit as a masked sum, not a gather: a reduction over the same rows as
    # the softmax's, which XLA fuses with it (a gather of [..., V] read all of it again).
    vocab = jax.lax.broadcasted_iota(jnp.int32, z.shape, z.ndim - 1)
    label_logit = jnp.sum(jnp.where(vocab == labels[..., None], logits, 0.0), axis=-1, keepdims=True)
    loss = (lse - label_logit)[..., 0]
    correct = (label_logit >= top)[..., 0]
    return (loss, correct), (h, table, bias, labels, z, lse)


def _mlm_xent_bwd(
    vocab_size: int,
    weight_grad: str,
    constrain,
    bias_grad: str,
    res: tuple[Array, ...],
    g: tuple[Array, Array],
) -> tuple[Array, Array, Array, None]:
    h, table, bias, labels, z, lse = res
    vocab = jax.lax.broadcasted_iota(jnp.int32, z.shape, z.ndim - 1)
    one_hot = (vocab == labels[..., None].astype(jnp.int32)).astype(jnp.float32)
    probs = jnp.exp(_vocab_logits(z, bias, vocab_size) - lse)
    d = constrain((g[0][..., None] * (probs - one_hot)).astype(table.dtype))
    d2 = d.reshape(-1, d.shape[-1])  # [N, V]
    h2 = h.reshape(-1, h.shape[-1]).astype(table.dtype)  # [N, H]
    dh = jnp.matmul(d2, table, preferred_element_type=jnp.float32).astype(h.dtype).reshape(h.shape)
    d_table = _weight_grad(d2, h2, weight_grad).astype(table.dtype)
    return dh, d_table, _column_sum(d2, bias_grad).astype(bias.dtype), None


masked_lm_cross_entropy.defvjp(_mlm_xent_fwd, _mlm_xent_bwd)
