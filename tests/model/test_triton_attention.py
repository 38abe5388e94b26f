"""`model.triton_attention`: the Pallas (Triton) flash attention with in-kernel attention
dropout. On the CPU, in Pallas interpret mode: equal to the XLA path with the same dropout
masks (forward and gradients; padding, packed rows, causal, a window), through the encoder's
self-attention with the same dropout key, and sharded over a mesh; its masks are exactly
`ops.dropout_keep_mask`'s; its kernels lower to Triton for a CUDA target. On a GPU (skipped
elsewhere): the compiled kernels against the XLA path in bfloat16."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import attention, ops, triton_attention
from bert_jax.model.attention import AttentionMask, choose_kernel
from bert_jax.model.config import BertConfig
from bert_jax.model.numerics import Numerics
from bert_jax.model.self_attention import BertSelfAttention
from tests.conftest import ROOT
from tests.helpers import attention_cases

B, N, D = 2, 2, 32


def _inputs(s: int, packed: bool, dtype=jnp.float32, d: int = D):
    return attention_cases.inputs(s, packed, dtype, B, N, d)


def _pair(mask: AttentionMask, rate: float, key: jax.Array, interpret: bool = True):
    """(Triton path, XLA path) as functions of q, k, v, both dropping with ``key``'s masks."""
    seeds = ops.hash_seeds(key)
    drop = lambda p: ops.inverted_dropout(key, rate, p)

    def ours(q, k, v):
        return attention.triton_path(
            q, k, v, mask, dropout_rate=rate, dropout_seeds=seeds if rate else None, interpret=interpret
        )

    def xla(q, k, v):
        return attention.xla_attention(q, k, v, mask, dropout_fn=drop if rate else None)

    return ours, xla


@pytest.mark.parametrize(
    ("s", "packed", "causal", "window", "rate"),
    [
        (256, False, False, None, 0.0),  # padding only, no dropout
        (256, True, False, None, 0.1),  # packed examples, the paper's attention dropout
        (192, False, True, None, 0.1),  # causal (the LTR ablation): blocks past the diagonal skipped
        (256, True, False, 64, 0.1),  # a two-sided window (±32): blocks outside it skipped
        (256, True, True, 64, 0.0),  # a causal window
    ],
)
def test_interpreted_kernel_equals_the_xla_path_with_the_same_masks(s, packed, causal, window, rate) -> None:
    q, k, v, m = _inputs(s, packed)
    mask = AttentionMask(m, packed=packed, causal=causal, window=window)
    ours, xla = _pair(mask, rate, jax.random.key(3))
    got, got_grads = attention_cases.out_and_grads(ours, q, k, v, m)
    want, want_grads = attention_cases.out_and_grads(xla, q, k, v, m)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert float(jnp.abs(w).max()) > 1e-3  # gradients that say something
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    if rate:  # the masks matter: another key's differ
        _, other = _pair(mask, rate, jax.random.key(4))
        assert float(jnp.abs(got - attention_cases.out_and_grads(other, q, k, v, m)[0]).max()) > 1e-2


def test_the_kernels_masks_are_dropout_keep_mask() -> None:
    """Uniform probabilities (q = k = 0, one query sees all S keys) over one-hot values
    (v_j = e_j, S = D) make each output row the row of the keep mask times 1 / (S (1 - rate)):
    the kernel's mask read back, against `ops.dropout_keep_mask` of the global [B, N, S, S],
    and its kept fraction."""
    s, rate = 64, 0.25
    q = k = jnp.zeros((B, s, N, s), jnp.float32)
    v = jnp.broadcast_to(jnp.eye(s)[None, :, None, :], (B, s, N, s))
    key = jax.random.key(11)
    mask = AttentionMask(jnp.ones((B, s), jnp.int32))
    out = attention.triton_path(
        q, k, v, mask, dropout_rate=rate, dropout_seeds=ops.hash_seeds(key), interpret=True
    )
    kept = np.asarray(jnp.swapaxes(out, 1, 2)) * s * (1 - rate)  # [B, N, S, S]
    want = np.asarray(ops.dropout_keep_mask(key, rate, (B, N, s, s)))
    np.testing.assert_allclose(kept, want.astype(np.float32), rtol=0, atol=1e-5)
    assert abs(want.mean() - (1 - rate)) < 0.02


def test_the_encoders_attention_draws_the_same_masks_on_either_path(capsys, monkeypatch) -> None:
    """`BertSelfAttention` with attention dropout: ``attention_kernel=triton`` (interpreted)
    gives the XLA path's output under the same dropout key (the layer's `Dropout.seeds`),
    another key's differs; with ``dropout_rng=threefry`` it falls back to XLA, one line."""
    config = BertConfig(
        vocab_size=64,
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=128,
        attention_probs_dropout_prob=0.1,
    )
    x = jax.random.normal(jax.random.key(0), (2, 64, 64))
    m = np.ones((2, 64), np.int32)
    m[0, 40:] = 0
    mask = AttentionMask(jnp.asarray(m))
    params = BertSelfAttention(config).init(jax.random.key(1), x, mask, True)

    def run(numerics: Numerics, key: int) -> np.ndarray:
        out = BertSelfAttention(config, numerics).apply(
            params, x, mask, False, rngs={"dropout": jax.random.key(key)}
        )
        return np.asarray(out)[m > 0]

    xla = run(Numerics(attention_kernel="xla"), 5)
    np.testing.assert_allclose(run(Numerics(attention_kernel="triton"), 5), xla, rtol=0, atol=1e-5)
    assert np.abs(run(Numerics(attention_kernel="xla"), 6) - xla).max() > 1e-3
    monkeypatch.setattr(attention, "_WARNED", set())
    capsys.readouterr()
    threefry = run(Numerics(attention_kernel="triton", dropout_rng="threefry"), 5)
    assert "dropout_rng=threefry runs on the XLA path only" in capsys.readouterr().out
    np.testing.assert_array_equal(threefry, run(Numerics(attention_kernel="xla", dropout_rng="threefry"), 5))


def test_sharded_over_a_mesh_each_shard_draws_its_part_of_the_global_masks() -> None:
    """Under a (data 2, tensor 2) mesh of CPU devices the kernel runs per shard in a
    `shard_map`; each shard's masks are its slice of the global ones (the shard's first
    batch row and head enter the index), so the result is the XLA path's."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    helper = ROOT / "tests" / "helpers" / "triton_sharded.py"
    done = subprocess.run([sys.executable, str(helper)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["same_key"] < 1e-5
    assert result["other_key"] > 1e-2


def test_forward_and_backward_lower_to_triton_for_a_cuda_target() -> None:
    """No GPU here: the three kernels (forward, dK/dV, dQ) of BERT-Base's shape at seq 512
    with dropout and of ModernBERT's local window lower to Triton modules (Pallas's GPU
    lowering; the PTX is compiled by XLA on a GPU)."""
    shape = jax.ShapeDtypeStruct((4, 512, 12, 64), jnp.bfloat16)
    seg = jax.ShapeDtypeStruct((4, 512), jnp.int32)
    for opts in (triton_attention.Options(rate=0.1), triton_attention.Options(window=128, causal=False)):

        def loss(q, k, v, seg, key, opts=opts):
            words = triton_attention.dropout_words(ops.hash_seeds(key), (4, 12), 12, 512)
            return triton_attention.flash_attention(q, k, v, seg, words, opts).astype(jnp.float32).sum()

        grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
        text = (
            grad.trace(shape, shape, shape, seg, jax.random.key(0))
            .lower(lowering_platforms=("cuda",))
            .as_text()
        )
        assert text.count("__gpu$xla.gpu.triton") == 3


@pytest.mark.parametrize(
    ("requested", "platform", "mask", "head_dim", "rate", "hashed", "kernel", "warning"),
    [
        ("triton", "gpu", AttentionMask(jnp.ones((B, 512), jnp.int32)), 64, 0.1, True, "triton", None),
        (
            "triton",
            "gpu",
            AttentionMask(jnp.ones((B, 1024), jnp.int32), window=128),
            64,
            0.0,
            True,
            "triton",
            None,
        ),
        (
            "triton",
            "cpu",
            AttentionMask(jnp.ones((B, 128), jnp.int32)),
            64,
            0.1,
            True,
            "triton",
            "interpret mode",
        ),
        ("triton", "gpu", AttentionMask(jnp.ones((B, 128), jnp.int32)), 64, 0.1, False, "xla", "threefry"),
        ("triton", "tpu", AttentionMask(jnp.ones((B, 128), jnp.int32)), 64, 0.1, True, "xla", "not on tpu"),
        (
            "triton",
            "gpu",
            AttentionMask(jnp.ones((B, 200), jnp.int32)),
            64,
            0.1,
            True,
            "xla",
            "multiple of 16 up to 65536, not 200",
        ),
        ("triton", "gpu", AttentionMask(jnp.ones((B, 128), jnp.int32)), 96, 0.1, True, "xla", "power of two"),
        (
            "auto",
            "gpu",
            AttentionMask(jnp.ones((B, 512), jnp.int32)),
            64,
            0.1,
            True,
            "xla",
            "XLA and Triton paths",
        ),
    ],
)
def test_choose_kernel_for_triton(requested, platform, mask, head_dim, rate, hashed, kernel, warning) -> None:
    got, line = choose_kernel(requested, platform, mask, head_dim, rate, jnp.bfloat16, hash_dropout=hashed)
    assert got == kernel
    if warning is None:
        assert line is None
    else:
        assert line is not None and warning in line and "\n" not in line


@pytest.mark.skipif(not attention_cases.has_gpu(), reason="needs an NVIDIA GPU (Triton)")
@pytest.mark.parametrize(
    ("s", "packed", "causal", "window", "rate"),
    [
        (128, False, False, None, 0.1),  # BERT phase 1 with the paper's attention dropout
        (512, True, False, None, 0.1),  # phase 2, packed rows
        (256, False, True, None, 0.0),  # causal
        (1024, False, False, 128, 0.0),  # ModernBERT's local layers
    ],
)
def test_compiled_on_a_gpu_equals_the_xla_path(s, packed, causal, window, rate) -> None:
    """The kernels compiled by XLA's Triton pipeline on the GPU against the XLA path in
    bfloat16 with the same masks: forward within 2e-2, gradients within 2% of their
    largest value (the XLA path rounds the probabilities to bfloat16 before the weighted
    sum, the kernel keeps them in float32)."""
    q, k, v, m = _inputs(s, packed, dtype=jnp.bfloat16, d=64)
    mask = AttentionMask(m, packed=packed, causal=causal, window=window)
    ours, xla = _pair(mask, rate, jax.random.key(3), interpret=False)
    got, got_grads = attention_cases.out_and_grads(ours, q, k, v, m)
    want, want_grads = attention_cases.out_and_grads(xla, q, k, v, m)
    text = jax.jit(ours).lower(q, k, v).compile().as_text()
    assert "triton" in text.lower()  # the Pallas kernels ran, not a fallback
    attention_cases.assert_close_in_bfloat16(got, want, got_grads, want_grads)
