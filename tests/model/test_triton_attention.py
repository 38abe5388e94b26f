"""`model.triton_attention`: the Pallas (Triton) flash attention with in-kernel attention
dropout (interpreted against the XLA path: `test_dropout_kernels.py`). Its kernels lower to
Triton for a CUDA target; the kernel choice; on a GPU (skipped elsewhere): the compiled
kernels against the XLA path in bfloat16."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("rotary", [True, False])
def test_the_stacked_kernels_lower_to_triton_writing_one_gradient(rotary) -> None:
    """No GPU here: `flash_attention_stacked` of ModernBERT-base's local layers (1,024
    positions, a window of 128, 12 heads of 64, rotated inside) and of BERT-Base's at 512
    with dropout and biases lowers to three Triton kernels that read the stacked product in
    place (no slice of it outside them, no pass adding the biases) and write one gradient,
    the dQ kernel into the dK/dV kernel's output (aliased); the biases' gradients come from
    the kernels' column sums (no reduction reads the product's gradient)."""
    s, opts = 1024, triton_attention.Options(window=128, stacked=True, rotary=True, scale=0.125)
    if not rotary:
        s, opts = (
            512,
            triton_attention.Options(
                rate=0.1, narrow=True, packed=False, stacked=True, scale=0.125, bias=True
            ),
        )
    qkv = jax.ShapeDtypeStruct((4, s, 12, 3, 64), jnp.bfloat16)
    table = jax.ShapeDtypeStruct((1, s, 32), jnp.float32) if rotary else None
    bias = None if rotary else jax.ShapeDtypeStruct((12, 3, 64), jnp.bfloat16)
    seg = jax.ShapeDtypeStruct((4, s), jnp.int32)
    words = jax.ShapeDtypeStruct((4, 12, 4), jnp.uint32)

    def loss(qkv, bias, sin, cos, seg, words):
        out = triton_attention.flash_attention_stacked(qkv, bias, sin, cos, seg, words, opts)
        return out.astype(jnp.float32).sum()

    grad = jax.jit(jax.grad(loss, argnums=(0, 1)))
    text = grad.trace(qkv, bias, table, table, seg, words).lower(lowering_platforms=("cuda",))
    text = text.as_text()
    assert text.count("__gpu$xla.gpu.triton") == 3
    assert text.count("output_operand_aliases") == 1
    assert "stablehlo.slice %arg0 " not in text  # the product (the gradient's slots: the biases' sums)
    assert " = stablehlo.add " not in text  # no bias added outside the kernels
    assert not re.search(rf"stablehlo\.reduce\(.*tensor<4x{s}x", text)


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


@pytest.mark.parametrize(
    ("requested", "platform", "window", "rate", "head_dim", "inside"),
    [
        ("auto", "gpu", 128, 0.0, 64, True),  # ModernBERT's local layers
        ("auto", "gpu", None, 0.0, 64, False),  # its global ones: cuDNN
        ("auto", "gpu", None, 0.1, 64, True),  # attention dropout: Triton
        ("triton", "cpu", None, 0.0, 32, True),  # interpreted
        ("triton", "gpu", None, 0.0, 16, False),  # half a head under Triton's smallest dot (unrotated: taken)
        ("auto", "tpu", 128, 0.0, 64, False),  # splash
    ],
)
def test_which_attentions_take_the_stacked_product(
    requested, platform, window, rate, head_dim, inside
) -> None:
    """`attention.takes_stacked`: where the chosen kernel is Triton (and, to rotate inside,
    half a head is a Triton dot); the self-attention layer then hands it the product."""
    from bert_jax.model import attention

    mask = AttentionMask(jnp.ones((2, 1024), jnp.int32), window=window)
    got = attention.takes_stacked(
        requested, mask, head_dim, rate, jnp.bfloat16, True, True, platform=platform
    )
    assert got is inside
    assert (triton_attention.rotary_refusal(head_dim) is None) is (head_dim >= 32)
    unrotated = attention.takes_stacked(requested, mask, head_dim, rate, jnp.bfloat16, True, False, platform)
    assert unrotated is (inside or (head_dim == 16 and platform == "gpu"))


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


@pytest.mark.skipif(not attention_cases.has_gpu(), reason="needs an NVIDIA GPU (Triton)")
@pytest.mark.parametrize(("s", "window", "rate"), [(1024, 128, 0.0), (512, None, 0.1)])
def test_the_stacked_kernels_compiled_on_a_gpu_equal_the_xla_path(s, window, rate) -> None:
    """`attention.attend_stacked` compiled on the GPU (ModernBERT's local layers rotated
    inside; a global one with the paper's dropout and biases, unrotated) against the XLA
    path (biases added and rotated outside), in bfloat16 with the same masks: forward
    within 2e-2, gradients (the biases' too, from the kernels' column sums) within 2% of
    their largest."""
    from bert_jax.model import attention, layers

    q, k, v, m = _inputs(s, False, dtype=jnp.bfloat16, d=64)
    mask = AttentionMask(m, window=window)
    rope = layers.rotary_tables(jnp.arange(s)[None], 64, 10_000.0) if window else None
    bias = None if window else jax.random.normal(jax.random.key(4), (q.shape[2], 3, 64), jnp.bfloat16)
    key = jax.random.key(3)
    _, xla = attention_cases.dropout_pair("triton", mask, rate, key, interpret=False)

    def stack(q, k, v):
        parts = {triton_attention.KEY: k, triton_attention.VALUE: v, triton_attention.QUERY: q}
        return jnp.stack([parts[i] for i in range(3)], axis=3)

    def ours(q, k, v, b=bias):
        seeds = lambda: ops.hash_seeds(key)
        return attention.attend_stacked(
            stack(q, k, v), b, rope, mask, "triton", dropout_rate=rate, dropout_seeds=seeds
        )

    def want(q, k, v, b=bias):
        if rope is None:
            biased = stack(q, k, v) + b
            return xla(
                *(
                    biased[..., i, :]
                    for i in (triton_attention.QUERY, triton_attention.KEY, triton_attention.VALUE)
                )
            )
        return xla(layers.apply_rotary(q, *rope), layers.apply_rotary(k, *rope), v)

    biases = () if bias is None else (bias,)  # its gradient compared too
    got, got_grads = attention_cases.out_and_grads(ours, q, k, v, m, *biases)
    ref, ref_grads = attention_cases.out_and_grads(want, q, k, v, m, *biases)
    assert "triton" in jax.jit(ours).lower(q, k, v).compile().as_text().lower()
    attention_cases.assert_close_in_bfloat16(got, ref, got_grads, ref_grads)
