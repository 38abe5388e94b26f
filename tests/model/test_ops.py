"""`bert_jax.model.ops`: the hand-written gradients equal autodiff of the plain formulas, and the
hash dropout masks are Bernoulli(1 - rate), independent across elements, layers and steps, and
their bits follow the 64-bit flat index (no repetition past 2**32 elements)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

from bert_jax.model import ops
from bert_jax.model.layers import Dropout
from bert_jax.model.numerics import Numerics


@pytest.mark.parametrize("weight_grad", ops.WEIGHT_GRADS)
@pytest.mark.parametrize("bias_grad", ops.BIAS_GRADS)
def test_dense_gradients_match_autodiff(weight_grad: str, bias_grad: str) -> None:
    k = jax.random.split(jax.random.key(3), 4)
    x = jax.random.normal(k[0], (24, 16))
    kernel = jax.random.normal(k[1], (16, 40)) * 0.2
    bias = jax.random.normal(k[2], (40,))
    cot = jax.random.normal(k[3], (24, 40))

    def ours(x, kernel, bias):
        return jnp.sum(jnp.tanh(ops.dense(x, kernel, bias, weight_grad, bias_grad)) * cot)

    def plain(x, kernel, bias):
        return jnp.sum(jnp.tanh(x @ kernel + bias) * cot)

    g1 = jax.jit(jax.grad(ours, argnums=(0, 1, 2)))(x, kernel, bias)
    g2 = jax.grad(plain, argnums=(0, 1, 2))(x, kernel, bias)
    np.testing.assert_allclose(ours(x, kernel, bias), plain(x, kernel, bias), rtol=1e-6)
    for a, b in zip(g1, g2, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _check_against_autodiff(loss_and_top, words: int) -> None:
    """`loss_and_top(h, table, bias, labels)` (per-row loss, label is the arg-max) against
    autodiff of the plain formulas over 50 columns of which the first `words` are words:
    the padding columns get no probability, are never the arg-max and pass no gradient."""
    k = jax.random.split(jax.random.key(words), 4)
    h = jax.random.normal(k[0], (4, 5, 16))
    table = jax.random.normal(k[1], (50, 16)) * 0.3
    bias = jax.random.normal(k[2], (50,)) * 0.1 + jnp.where(jnp.arange(50) >= words, 9.0, 0.0)
    labels = jax.random.randint(k[3], (4, 5), 0, words)
    weights = jnp.linspace(0.0, 1.0, 20).reshape(4, 5)

    def ours(h, table, bias):
        loss, top = loss_and_top(h, table, bias, labels)
        return jnp.sum(loss * weights), top

    def plain(h, table, bias):
        logits = jnp.einsum("bph,vh->bpv", h, table) + bias
        logits = jnp.where(jnp.arange(50) < words, logits, jnp.finfo(jnp.float32).min)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return jnp.sum(loss * weights), jnp.argmax(logits, -1) == labels

    (v1, top1), g1 = jax.jit(jax.value_and_grad(ours, argnums=(0, 1, 2), has_aux=True))(h, table, bias)
    (v2, top2), g2 = jax.value_and_grad(plain, argnums=(0, 1, 2), has_aux=True)(h, table, bias)
    np.testing.assert_allclose(v1, v2, rtol=1e-6)
    np.testing.assert_array_equal(top1, top2)
    for a, b in zip(g1, g2, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(g1[2][words:]).max(initial=0.0)) == 0.0
    # Labels equal to the arg-max are counted as correct.
    best = jnp.argmax(jnp.einsum("bph,vh->bpv", h, table)[..., :words] + bias[:words], -1)
    assert bool(loss_and_top(h, table, bias, best)[1].all())


@pytest.mark.parametrize("weight_grad", ops.WEIGHT_GRADS)
@pytest.mark.parametrize("bias_grad", ops.BIAS_GRADS)
def test_tied_logits_and_cross_entropy_match_autodiff(weight_grad: str, bias_grad: str) -> None:
    def loss_and_top(h, table, bias, labels):
        logits = ops.tied_logits(h, table, bias, weight_grad, bias_grad)
        return ops.softmax_cross_entropy(logits, labels)

    _check_against_autodiff(loss_and_top, 50)


@pytest.mark.parametrize("weight_grad", ops.WEIGHT_GRADS)
@pytest.mark.parametrize("bias_grad", ops.BIAS_GRADS)
def test_masked_lm_cross_entropy_matches_autodiff_of_masked_logits(weight_grad: str, bias_grad: str) -> None:
    def loss_and_top(h, table, bias, labels):
        return ops.masked_lm_cross_entropy(h, table, bias, labels, 43, weight_grad, bias_grad=bias_grad)

    _check_against_autodiff(loss_and_top, 43)


def test_masked_lm_cross_entropy_in_bfloat16_is_float32_within_rounding() -> None:
    # bfloat16 inputs (the logit gradient then bfloat16 too): the gradients within
    # bfloat16's rounding of the float32 reference, each in its input's dtype.
    k = jax.random.split(jax.random.key(2), 4)
    h = jax.random.normal(k[0], (64, 32))
    table = jax.random.normal(k[1], (256, 32)) * 0.3
    bias = jax.random.normal(k[2], (256,)) * 0.1
    labels = jax.random.randint(k[3], (64,), 0, 256)

    def loss(h, table, bias):
        return jnp.mean(ops.masked_lm_cross_entropy(h, table, bias, labels, 256)[0])

    bf = jnp.bfloat16
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    ours, want = grad(h.astype(bf), table.astype(bf), bias), grad(h, table, bias)
    for a, b in zip(ours, want, strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), b, atol=0.02 * float(jnp.abs(b).max()))
    assert [a.dtype for a in ours] == [bf, bf, jnp.float32]


def test_gelu_matches_the_exact_erf_form_and_its_gradient() -> None:
    x = jnp.linspace(-10.0, 10.0, 20001)
    np.testing.assert_allclose(ops.gelu(x), jax.nn.gelu(x, approximate=False), atol=2e-6)
    grad = jax.vmap(jax.grad(ops.gelu))(x)
    want = jax.vmap(jax.grad(lambda t: jax.nn.gelu(t, approximate=False)))(x)
    np.testing.assert_allclose(grad, want, atol=2e-6)


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_hash_dropout_is_bernoulli_and_independent(rate: float) -> None:
    shape = (64, 128, 128)  # ~1M draws
    keep = np.asarray(ops.dropout_keep_mask(jax.random.key(1), rate, shape))
    n = keep.size
    p = 1.0 - rate
    assert abs(keep.mean() - p) < 5 * np.sqrt(p * (1 - p) / n)
    # Neighbours along each axis (and the flat order) are uncorrelated.
    flat = keep.reshape(-1).astype(np.float64)
    for a, b in ((flat[:-1], flat[1:]), (keep[:, :, :-1], keep[:, :, 1:]), (keep[:, :-1], keep[:, 1:])):
        r = np.corrcoef(np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64))[0, 1]
        assert abs(r) < 5 / np.sqrt(n), r
    # The top byte of the bits is uniform (chi-square over 256 bins).
    bits = np.asarray(ops.hash_bits(jax.random.key(2), (1 << 20,)))
    counts = np.bincount(bits >> 24, minlength=256)
    assert stats.chisquare(counts).pvalue > 1e-4
    # Another key (another layer or step) gives an independent mask: agreement p^2 + q^2.
    other = np.asarray(ops.dropout_keep_mask(jax.random.key(3), rate, shape))
    agree = (keep == other).mean()
    want = p * p + rate * rate
    assert abs(agree - want) < 5 * np.sqrt(want * (1 - want) / n)
    # The same key gives the same mask (reproducible runs).
    np.testing.assert_array_equal(keep, np.asarray(ops.dropout_keep_mask(jax.random.key(1), rate, shape)))


@pytest.mark.parametrize("rate", [0.1, 0.5])
def test_hash16_dropout_is_bernoulli_and_independent(rate: float) -> None:
    """The "hash16" masks: each 32-bit hash gives two neighbours 16 bits each; the keep
    rate is 1 - rate to 2**-16, neighbours (the two halves of one hash among them) and
    two keys' masks are uncorrelated."""
    shape = (64, 128, 128)
    keep = np.asarray(ops.dropout_keep_mask(jax.random.key(1), rate, shape, "hash16"))
    n, p = keep.size, 1.0 - rate
    assert abs(keep.mean() - p) < 5 * np.sqrt(p * (1 - p) / n)
    flat = keep.reshape(-1).astype(np.float64)
    pairs = flat.reshape(-1, 2)
    for a, b in ((pairs[:, 0], pairs[:, 1]), (flat[1:-1:2], flat[2::2]), (keep[:, :-1], keep[:, 1:])):
        r = np.corrcoef(np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64))[0, 1]
        assert abs(r) < 5 / np.sqrt(a.size), r
    other = np.asarray(ops.dropout_keep_mask(jax.random.key(3), rate, shape, "hash16"))
    agree, want = (keep == other).mean(), p * p + rate * rate
    assert abs(agree - want) < 5 * np.sqrt(want * (1 - want) / n)
    np.testing.assert_array_equal(
        keep, np.asarray(ops.dropout_keep_mask(jax.random.key(1), rate, shape, "hash16"))
    )
    # The 16 bits are uniform (chi-square of the top 8 over 256 bins, low and high halves).
    low, high = ops.flat_index_words((1 << 20,))
    seeds = ops.hash_seeds(jax.random.key(2))
    bits = np.asarray(ops.pair_bits(seeds[0], seeds[1], low, high))
    assert bits.max() < 2**16
    for half in (bits[0::2], bits[1::2]):
        assert stats.chisquare(np.bincount(half >> 8, minlength=256)).pvalue > 1e-4


_M32 = np.uint64(2**32 - 1)


def _fmix32_np(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x85EBCA6B)) & _M32
    x = x ^ (x >> np.uint64(13))
    x = (x * np.uint64(0xC2B2AE35)) & _M32
    return x ^ (x >> np.uint64(16))


def _flat_np(shape, start, block) -> np.ndarray:
    """The uint64 flat index of each element of ``block`` at ``start`` in ``shape``."""
    index = np.meshgrid(
        *[np.arange(s, s + b, dtype=np.uint64) for s, b in zip(start, block, strict=True)], indexing="ij"
    )
    return sum(i * np.uint64(int(np.prod(shape[a + 1 :], dtype=object))) for a, i in enumerate(index))


def _index_bits_np(key, flat: np.ndarray) -> np.ndarray:
    """NumPy reference: the murmur3 rounds of 64-bit indices computed in uint64."""
    seeds = np.asarray(jax.random.bits(key, (2,), jnp.uint32)).astype(np.uint64)
    low, high = flat & _M32, flat >> np.uint64(32)
    x = _fmix32_np((low * np.uint64(0x9E3779B9) + seeds[0]) & _M32) ^ seeds[1]
    return _fmix32_np(x ^ ((high * np.uint64(ops._HIGH_MIX)) & _M32))


def _hash_bits_np(key, shape, start, block) -> np.ndarray:
    return _index_bits_np(key, _flat_np(shape, start, block)).astype(np.uint32)


def test_hash_bits_of_a_block_are_the_block_of_the_whole() -> None:
    key = jax.random.key(5)
    whole = np.asarray(ops.hash_bits(key, (6, 7, 8)))
    block = np.asarray(ops.hash_bits(key, (6, 7, 8), start=(1, 2, 3), block=(3, 4, 5)))
    np.testing.assert_array_equal(block, whole[1:4, 2:6, 3:8])
    # Below 2**32 elements the bits are those of the 32-bit index (high word zero).
    np.testing.assert_array_equal(whole, _hash_bits_np(key, (6, 7, 8), (0, 0, 0), (6, 7, 8)))
    with pytest.raises(ValueError, match="not inside"):
        ops.hash_bits(key, (6, 7, 8), start=(4, 0, 0), block=(3, 7, 8))


@pytest.mark.parametrize(
    "shape,start,block",
    [
        ((3, 2**31), (1, 2**31 - 16), (2, 16)),  # the last elements below 2**32, the row past it
        ((5, 2**31 + 8), (1, 2**31 - 20), (3, 28)),  # 2**32 inside a row; just past 2 * 2**32
        ((2, 3, 2**31), (1, 1, 2**31 - 5), (1, 2, 5)),  # a leading stride over 2**32
        ((2**20, 2**20), (2**12 - 1, 2**20 - 8), (3, 8)),  # carries between words
        ((4096, 512, 4096), (2047, 511, 4000), (2, 1, 96)),  # BERT-Large at batch 4096
    ],
)
def test_hash_bits_follow_the_64_bit_flat_index(shape, start, block) -> None:
    key = jax.random.key(9)
    got = np.asarray(ops.hash_bits(key, shape, start=start, block=block))
    np.testing.assert_array_equal(got, _hash_bits_np(key, shape, start, block))
    # "hash16": element f takes half f % 2 of the 64-bit hash of f // 2.
    seeds = ops.hash_seeds(key)
    paired = np.asarray(ops.pair_bits(seeds[0], seeds[1], *ops.flat_index_words(shape, start, block)))
    np.testing.assert_array_equal(paired, _pair_bits_np(key, shape, start, block))


def _pair_bits_np(key, shape, start, block) -> np.ndarray:
    flat = _flat_np(shape, start, block)
    bits = _index_bits_np(key, flat >> np.uint64(1))
    return np.where(flat & np.uint64(1), bits >> np.uint64(16), bits & np.uint64(0xFFFF)).astype(np.uint32)


def test_masks_past_2_pow_32_elements_do_not_repeat_the_first() -> None:
    """Rows 0, 2 and 4 of a (5, 2**31) array share the low word of their flat index (they
    are 2**32 elements apart), which is all a 32-bit index would see."""
    key, n, rate = jax.random.key(11), 1 << 18, 0.1
    rows = [np.asarray(ops.hash_bits(key, (5, 2**31), start=(r, 0), block=(1, n)))[0] for r in (0, 2, 4)]
    threshold = np.uint32(round(rate * 2**32))
    p, want = 1 - rate, (1 - rate) ** 2 + rate**2
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert not np.array_equal(rows[a], rows[b])
        agree = ((rows[a] >= threshold) == (rows[b] >= threshold)).mean()
        assert abs(agree - want) < 5 * np.sqrt(want * (1 - want) / n), (a, b, agree)
        # Half of the bits differ between the rows, as between independent draws.
        flips = np.unpackbits((rows[a] ^ rows[b]).view(np.uint8)).mean()
        assert abs(flips - 0.5) < 5 * np.sqrt(0.25 / (32 * n))
    assert abs((rows[2] >= threshold).mean() - p) < 5 * np.sqrt(p * rate / n)


def test_dropout_module_scales_kept_values_and_is_identity_when_deterministic() -> None:
    x = jnp.ones((256, 512))
    for impl in ("hash", "threefry"):
        layer = Dropout(0.1, impl)
        y = layer.apply({}, x, False, rngs={"dropout": jax.random.key(0)})
        kept = np.asarray(y) != 0
        np.testing.assert_allclose(np.asarray(y)[kept], 1 / 0.9, rtol=1e-6)
        assert abs(kept.mean() - 0.9) < 0.005
        assert (layer.apply({}, x, True) == x).all()
    with pytest.raises(ValueError, match="dropout_rng='philox'"):
        Numerics(dropout_rng="philox")
