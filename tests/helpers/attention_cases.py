"""Inputs and comparisons shared by the attention-kernel tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def inputs(s: int, packed: bool, dtype=jnp.float32, batch: int = 2, heads: int = 2, head_dim: int = 64):
    """q, k, v [B, S, N, D] and an input mask: row 0 ends in 37 padding tokens, row 1 in 5;
    packed rows hold three and two examples."""
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(batch, s, heads, head_dim)), dtype) for _ in range(3))
    m = np.zeros((batch, s), np.int32)
    m[0, : s - 37], m[1, : s - 5] = 1, 1
    if packed:
        m[0, 50 : s - 37], m[1, 100 : s - 5] = 2, 2
        m[0, 90 : s - 37] = 3
    return q, k, v, jnp.asarray(m)


def out_and_grads(fn, q, k, v, input_mask, *extra):
    """``fn(q, k, v, *extra)``'s output (float32) on the real (non-padding) queries, and
    d/d(q, k, v, *extra) of a random projection of it: what any loss reads."""
    real = (input_mask > 0)[:, :, None, None].astype(jnp.float32)
    cotangent = jnp.asarray(np.random.default_rng(1).normal(size=q.shape), jnp.float32) * real
    args = (q, k, v, *extra)
    loss = lambda *a: jnp.sum(fn(*a).astype(jnp.float32) * cotangent)
    out = jax.jit(lambda *a: fn(*a).astype(jnp.float32) * real)(*args)
    return out, jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))(*args)


def small_config(**changes):
    """A one-layer BERT of width 64 (2 heads, feed-forward 128, vocabulary 64) with
    ``changes``: the encoder-level kernel tests' model."""
    from bert_jax.model.config import BertConfig

    sizes = dict(
        vocab_size=64, hidden_size=64, num_hidden_layers=1, num_attention_heads=2, intermediate_size=128
    )
    return BertConfig(**{**sizes, **changes})


def has_gpu() -> bool:
    try:
        return bool(jax.devices("gpu"))
    except RuntimeError:
        return False


def assert_close_in_bfloat16(got, want, got_grads, want_grads) -> None:
    """A bfloat16 kernel against the XLA path: outputs within 2e-2, gradients within 2% of
    their largest value (the XLA path rounds the probabilities to bfloat16 before the
    weighted sum; fused kernels keep them in float32)."""
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2)
    for g, w in zip(got_grads, want_grads, strict=True):
        w32 = np.asarray(w, np.float32)
        assert float(np.abs(w32).max()) > 1e-2
        err = np.abs(np.asarray(g, np.float32) - w32).max() / np.abs(w32).max()
        assert err < 2e-2, err


def dropout_pair(kernel: str, mask, rate: float, key: jax.Array, interpret: bool = True, impl: str = "hash"):
    """(``kernel``'s path, the XLA path) as functions of q, k, v, both dropping with
    ``key``'s masks of generator ``impl`` ("hash" or "hash16"; ``kernel``: "triton" or
    "mosaic")."""
    from bert_jax.model import attention, ops

    seeds = ops.hash_seeds(key)
    path = {"triton": attention.triton_path, "mosaic": attention.mosaic_path}[kernel]
    drop = lambda p: ops.inverted_dropout(key, rate, p, impl)

    def ours(q, k, v):
        return path(
            q,
            k,
            v,
            mask,
            dropout_rate=rate,
            dropout_seeds=seeds if rate else None,
            paired_dropout=impl == "hash16",
            interpret=interpret,
        )

    def xla(q, k, v):
        return attention.xla_attention(q, k, v, mask, dropout_fn=drop if rate else None)

    return ours, xla
