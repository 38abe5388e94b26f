"""`model.triton_attention`: the Pallas (Triton) flash attention with in-kernel attention
dropout (interpreted against the XLA path: `test_dropout_kernels.py`). Its kernels lower to
Triton for a CUDA target; the kernel choice; on a GPU (skipped elsewhere): the compiled
kernels against the XLA path in bfloat16."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from bert_jax.model import kernel_tiles, ops, triton_attention
from bert_jax.model.attention import AttentionMask, choose_kernel
from tests.helpers import attention_cases

B, N, D = 2, 2, 32


def _inputs(s: int, packed: bool, dtype=jnp.float32, d: int = D):
    return attention_cases.inputs(s, packed, dtype, B, N, d)


def test_forward_and_backward_lower_to_triton_for_a_cuda_target() -> None:
    """No GPU here: the three kernels (forward, dK/dV, dQ) of BERT-Base's shape at seq 512
    with dropout (one- and two-word index, "hash16") and of ModernBERT's local window
    lower to Triton modules (Pallas's GPU
    lowering; the PTX is compiled by XLA on a GPU)."""
    shape = jax.ShapeDtypeStruct((4, 512, 12, 64), jnp.bfloat16)
    seg = jax.ShapeDtypeStruct((4, 512), jnp.int32)
    for opts in (
        triton_attention.Options(rate=0.1, narrow=True, packed=False),
        triton_attention.Options(rate=0.1),
        triton_attention.Options(rate=0.1, narrow=True, paired=True),
        triton_attention.Options(window=128, causal=False),
    ):

        def loss(q, k, v, seg, key, opts=opts):
            words = kernel_tiles.dropout_words(ops.hash_seeds(key), (4, 12), 12, 512)
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
        # `auto` under attention dropout on a GPU: the Triton kernel (cuDNN draws no masks of ours).
        ("auto", "gpu", AttentionMask(jnp.ones((B, 512), jnp.int32)), 64, 0.1, True, "triton", None),
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
    ours, xla = attention_cases.dropout_pair("triton", mask, rate, jax.random.key(3), interpret=False)
    got, got_grads = attention_cases.out_and_grads(ours, q, k, v, m)
    want, want_grads = attention_cases.out_and_grads(xla, q, k, v, m)
    text = jax.jit(ours).lower(q, k, v).compile().as_text()
    assert "triton" in text.lower()  # the Pallas kernels ran, not a fallback
    attention_cases.assert_close_in_bfloat16(got, want, got_grads, want_grads)
