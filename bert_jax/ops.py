"""Hot ops with cheaper XLA lowerings than the obvious code: dropout masks, exact GELU,
and the masked-LM output layer with hand-written gradients.

GELU (`gelu`): the exact (erf) form, as BERT and Hugging Face use it. `jax.nn.gelu`
evaluates it through ``erfc`` (two branches, both computed) and differentiates that;
here the forward pass is ``x * Phi(x)`` with one ``erf`` and the backward pass reuses
``Phi(x)``: ``Phi(x) + x * phi(x)``.

Dropout (`dropout_keep_mask`): threefry, JAX's default generator, costs ~80 integer
operations per 32 random bits; on CPU the masks of BERT-mini's ~17M dropped activations
were ~20% of a training step. Dropout needs independent Bernoulli draws, not a
cryptographic stream: here each element's bits are the murmur3 finaliser (applied twice,
with two 32-bit seeds drawn by threefry from the layer's dropout key) of its flat index.
That is a bijection of the index with full avalanche, ~16 operations per element, and a
function of the global index only, so the mask does not depend on how the array is
sharded. The keep rate and independence are tested statistically.

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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


@jax.custom_vjp
def gelu(x: Array) -> Array:
    """Exact GELU, ``x * Phi(x)`` with the standard normal CDF ``Phi``."""
    return _gelu_fwd(x)[0]


def _gelu_fwd(x: Array) -> tuple[Array, tuple[Array, Array]]:
    cdf = 0.5 * (1.0 + jax.lax.erf(x * jnp.asarray(_SQRT_HALF, x.dtype)))
    return x * cdf, (x, cdf)


def _gelu_bwd(res: tuple[Array, Array], g: Array) -> tuple[Array]:
    x, cdf = res
    pdf = jnp.asarray(_INV_SQRT_2PI, x.dtype) * jnp.exp(-0.5 * x * x)
    return (g * (cdf + x * pdf),)


gelu.defvjp(_gelu_fwd, _gelu_bwd)


def _fmix32(x: Array) -> Array:
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def hash_bits(key: Array, shape: tuple[int, ...]) -> Array:
    """uint32 bits of `shape`, a function of (key, flat element index)."""
    seeds = jax.random.bits(key, (2,), jnp.uint32)
    size = 1
    for d in shape:
        size *= d
    index = jax.lax.iota(jnp.uint32, size).reshape(shape)
    return _fmix32(_fmix32(index * jnp.uint32(0x9E3779B9) + seeds[0]) ^ seeds[1])


def dropout_keep_mask(key: Array, rate: float, shape: tuple[int, ...], impl: str = "hash") -> Array:
    """Boolean mask, True with probability ``1 - rate`` per element."""
    if impl == "threefry":
        return jax.random.bernoulli(key, 1.0 - rate, shape)
    threshold = min(round(rate * 2**32), 2**32 - 1)
    return hash_bits(key, shape) >= jnp.uint32(threshold)


@jax.custom_vjp
def tied_logits(h: Array, embedding: Array, bias: Array) -> Array:
    """``[..., H] x [V, H] → [..., V]`` float32 logits plus a float32 ``[V]`` bias."""
    return jnp.einsum("...h,vh->...v", h, embedding, preferred_element_type=jnp.float32) + bias


def _tied_logits_fwd(h: Array, embedding: Array, bias: Array) -> tuple[Array, tuple[Array, Array, Array]]:
    return tied_logits(h, embedding, bias), (h, embedding, bias)


def _tied_logits_bwd(res: tuple[Array, Array, Array], g: Array) -> tuple[Array, Array, Array]:
    h, embedding, bias = res
    g2 = g.reshape(-1, g.shape[-1])  # [N, V] float32
    h2 = h.reshape(-1, h.shape[-1])  # [N, H]
    dh = (g2.astype(embedding.dtype) @ embedding).astype(h.dtype).reshape(h.shape)
    d_embedding = jnp.einsum("nv,nh->vh", g2, h2.astype(jnp.float32)).astype(embedding.dtype)
    # The bias gradient as a matrix-vector product: XLA's CPU column sum is ~10x slower.
    d_bias = (jnp.ones((g2.shape[0],), jnp.float32) @ g2).astype(bias.dtype)
    return dh, d_embedding, d_bias


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
