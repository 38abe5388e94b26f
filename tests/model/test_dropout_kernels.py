"""The two kernels that apply attention dropout inside themselves, `triton_attention` (GPUs)
and `mosaic_attention` (TPUs), on the CPU in Pallas interpret mode: each equals the XLA path
with the same dropout masks (forward and gradients; padding, packed rows, causal, windows),
its masks read back are exactly `ops.dropout_keep_mask`'s, the encoder's self-attention
gives the XLA path's output under the same dropout key, and under a mesh each shard draws
its part of the global masks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import attention, ops
from bert_jax.model.attention import AttentionMask
from bert_jax.model.numerics import Numerics
from bert_jax.model.self_attention import BertSelfAttention
from tests.conftest import ROOT
from tests.helpers import attention_cases

B, N, D = 2, 2, 32
KERNELS = ("triton", "mosaic")
CASES = [
    (256, False, False, None, 0.0),  # padding only, no dropout
    (256, True, False, None, 0.1),  # packed examples, the paper's attention dropout
    (128, False, True, None, 0.1),  # causal (the LTR ablation)
    (256, True, False, 64, 0.1),  # a two-sided window (±32)
    (256, True, True, 64, 0.0),  # a causal window
]


@pytest.mark.parametrize(
    ("kernel", "s", "packed", "causal", "window", "rate", "impl"),
    [(kernel, *case, "hash") for kernel in KERNELS for case in CASES]
    + [
        (
            "triton",
            192,
            False,
            True,
            None,
            0.1,
            "hash",
        ),  # Triton's tiles of 64: blocks past the diagonal skipped
        ("mosaic", 200, True, False, None, 0.1, "hash"),  # padded to 256: the masks keep S = 200's index
        ("triton", 256, True, False, 64, 0.1, "hash16"),  # one hash for two neighbours
        ("mosaic", 200, True, False, None, 0.1, "hash16"),  # S odd x even: pairs span rows
    ],
)
def test_interpreted_kernel_equals_the_xla_path_with_the_same_masks(
    kernel, s, packed, causal, window, rate, impl
) -> None:
    q, k, v, m = attention_cases.inputs(s, packed, jnp.float32, B, N, D)
    mask = AttentionMask(m, packed=packed, causal=causal, window=window)
    ours, xla = attention_cases.dropout_pair(kernel, mask, rate, jax.random.key(3), impl=impl)
    got, got_grads = attention_cases.out_and_grads(ours, q, k, v, m)
    want, want_grads = attention_cases.out_and_grads(xla, q, k, v, m)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert float(jnp.abs(w).max()) > 1e-3  # gradients that say something
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    if rate:  # the masks matter: another key's differ
        _, other = attention_cases.dropout_pair(kernel, mask, rate, jax.random.key(4))
        assert float(jnp.abs(got - attention_cases.out_and_grads(other, q, k, v, m)[0]).max()) > 1e-2


@pytest.mark.parametrize(("kernel", "impl"), [(k, i) for k in KERNELS for i in ("hash", "hash16")])
def test_the_kernels_masks_are_dropout_keep_mask(kernel, impl) -> None:
    """Uniform probabilities (q = k = 0, one query sees all S keys) over one-hot values
    (v_j = e_j, S = D) make each output row the row of the keep mask times 1 / (S (1 - rate)):
    the kernel's mask read back, against `ops.dropout_keep_mask` of the global [B, N, S, S],
    and its kept fraction."""
    s, rate = 128, 0.25
    q = k = jnp.zeros((B, s, N, s), jnp.float32)
    v = jnp.broadcast_to(jnp.eye(s)[None, :, None, :], (B, s, N, s))
    key = jax.random.key(11)
    mask = AttentionMask(jnp.ones((B, s), jnp.int32))
    ours, _ = attention_cases.dropout_pair(kernel, mask, rate, key, impl=impl)
    kept = np.asarray(jnp.swapaxes(ours(q, k, v), 1, 2)) * s * (1 - rate)  # [B, N, S, S]
    want = np.asarray(ops.dropout_keep_mask(key, rate, (B, N, s, s), impl))
    if impl == "hash16":  # another generator: other masks from the same key
        assert (want != np.asarray(ops.dropout_keep_mask(key, rate, (B, N, s, s)))).mean() > 0.2
    np.testing.assert_allclose(kept, want.astype(np.float32), rtol=0, atol=1e-5)
    assert abs(want.mean() - (1 - rate)) < 0.02


@pytest.mark.parametrize(("kernel", "rng"), [("triton", "hash"), ("mosaic", "hash"), ("triton", "hash16")])
def test_the_encoders_attention_draws_the_same_masks_on_either_path(kernel, rng, capsys, monkeypatch) -> None:
    """`BertSelfAttention` with attention dropout: the kernel (interpreted) gives the XLA
    path's output under the same dropout key (the layer's `Dropout.seeds`) and generator
    (``dropout_rng``), another key's differs; with ``dropout_rng=threefry`` it falls back
    to XLA, one line."""
    config = attention_cases.small_config(attention_probs_dropout_prob=0.1)
    x = jax.random.normal(jax.random.key(0), (2, 128, 64))
    m = np.ones((2, 128), np.int32)
    m[0, 90:] = 0
    mask = AttentionMask(jnp.asarray(m))
    params = BertSelfAttention(config).init(jax.random.key(1), x, mask, True)

    def run(numerics: Numerics, key: int) -> np.ndarray:
        out = BertSelfAttention(config, numerics).apply(
            params, x, mask, False, rngs={"dropout": jax.random.key(key)}
        )
        return np.asarray(out)[m > 0]

    xla = run(Numerics(attention_kernel="xla", dropout_rng=rng), 5)
    np.testing.assert_allclose(
        run(Numerics(attention_kernel=kernel, dropout_rng=rng), 5), xla, rtol=0, atol=1e-5
    )
    assert np.abs(run(Numerics(attention_kernel="xla", dropout_rng=rng), 6) - xla).max() > 1e-3
    if rng == "hash16":  # another generator than "hash": other masks from the same key
        assert np.abs(run(Numerics(attention_kernel="xla"), 5) - xla).max() > 1e-3
    monkeypatch.setattr(attention, "_WARNED", set())
    capsys.readouterr()
    threefry = run(Numerics(attention_kernel=kernel, dropout_rng="threefry"), 5)
    assert "dropout_rng=threefry runs on the XLA path only" in capsys.readouterr().out
    np.testing.assert_array_equal(threefry, run(Numerics(attention_kernel="xla", dropout_rng="threefry"), 5))


@pytest.mark.parametrize(("rotary", "window"), [(True, None), (True, 64), (False, None)])
def test_the_encoders_attention_hands_the_triton_kernel_the_stacked_product(rotary, window) -> None:
    """`BertSelfAttention` with attention dropout under ``attention_kernel=triton``
    (interpreted) hands the kernel the query/key/value product whole
    (`attention.attend_stacked`), which rotates queries and keys inside where the layer
    is rotary: the output and the gradients of the input and of every parameter are the
    XLA path's (three products, rotated outside, same masks)."""
    from bert_jax.model import layers

    positions = "rotary" if rotary else "absolute"
    config = attention_cases.small_config(attention_probs_dropout_prob=0.1, position_embedding_type=positions)
    x = jax.random.normal(jax.random.key(0), (2, 128, 64))
    m = np.ones((2, 128), np.int32)
    m[0, 90:] = 0
    mask = AttentionMask(jnp.asarray(m), window=window)
    rope = layers.rotary_tables(jnp.arange(128)[None], config.head_dim, 10_000.0) if rotary else None
    params = BertSelfAttention(config).init(jax.random.key(1), x, mask, True, rope)
    real = jnp.asarray(m > 0, jnp.float32)[:, :, None]
    cotangent = jax.random.normal(jax.random.key(2), x.shape) * real

    def loss(params, x, kernel: str):
        out = BertSelfAttention(config, Numerics(attention_kernel=kernel, dropout_rng="hash")).apply(
            params, x, mask, False, rope, rngs={"dropout": jax.random.key(5)}
        )
        return jnp.sum(out * cotangent), out * real

    fns = {
        k: jax.jit(jax.value_and_grad(lambda p, x, k=k: loss(p, x, k), argnums=(0, 1), has_aux=True))
        for k in ("triton", "xla")
    }
    text = str(jax.make_jaxpr(lambda p, x: loss(p, x, "triton"))(params, x))
    assert f"attention_{'rotary' if rotary else 'stacked'}_forward" in text
    assert "attention_dropout_forward" not in text
    (_, got), got_grads = fns["triton"](params, x)
    (_, want), want_grads = fns["xla"](params, x)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    for g, w in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", [*KERNELS, "triton-stacked", "triton-rotary"])
def test_sharded_over_a_mesh_each_shard_draws_its_part_of_the_global_masks(kernel) -> None:
    """Under a (data 2, tensor 2) mesh of CPU devices the kernel runs per shard in a
    `shard_map`; each shard's masks are its slice of the global ones (the shard's first
    batch row and head enter the index), so the result is the XLA path's. ``triton-stacked``:
    the product whole; ``triton-rotary``: rotated inside, the rotary tables of each row's
    own positions split with the batch."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    helper = ROOT / "tests" / "helpers" / "kernel_sharded.py"
    done = subprocess.run(
        [sys.executable, str(helper), kernel], capture_output=True, text=True, env=env, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["same_key"] < 1e-5
    assert result["other_key"] > 1e-2
