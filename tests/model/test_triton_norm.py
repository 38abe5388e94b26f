"""The post-LN blocks' ends in one Triton kernel pair (`model.triton_norm`, through
`model.residual_norm` under ``norm_kernel=triton``): interpreted on CPU, the kernels equal
``LN(r + dropout(h + b))`` on the XLA path with `ops.dropout_keep_mask`'s masks, forward
and every gradient; the encoder layer gives the XLA path's output and gradients under the
same dropout key with the same parameters; under a mesh each shard draws its part of the
global masks; where they cannot run, XLA's LayerNorm with one warning line; they lower to
Triton for a CUDA target; on a GPU (skipped without one) the compiled kernels equal the
XLA ops."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import ops, triton_norm
from bert_jax.model.attention import AttentionMask
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder_layer import BertLayer
from bert_jax.model.numerics import Numerics
from tests.conftest import ROOT
from tests.helpers import attention_cases


def _inputs(rows: int, width: int, dtype=jnp.float32) -> tuple:
    k = jax.random.split(jax.random.key(0), 6)
    h, r, cotangent = (jax.random.normal(k[i], (rows, width), dtype) for i in range(3))
    b = jax.random.normal(k[3], (width,))
    g = 1.0 + 0.1 * jax.random.normal(k[4], (width,))
    beta = jax.random.normal(k[5], (width,))
    return h, b, r, g, beta, cotangent


def _reference(h, b, r, g, beta, key, rate: float, impl: str, eps: float = 1e-12) -> jax.Array:
    """``LN(r + dropout(h + b))`` in XLA ops, float32 statistics."""
    u = h + b.astype(h.dtype)
    if rate:
        u = ops.inverted_dropout(key, rate, u, impl)
    s = (u + r).astype(jnp.float32)
    mean = s.mean(-1, keepdims=True)
    var = jnp.square(s - mean).mean(-1, keepdims=True)
    return ((s - mean) * jax.lax.rsqrt(var + eps) * g + beta).astype(h.dtype)


def _outputs_and_grads(fn, args, cotangent):
    y, pullback = jax.vjp(fn, *args)
    return y, pullback(cotangent.astype(y.dtype))


@pytest.mark.parametrize(
    ("rows", "width", "block", "rate", "impl"),
    [
        (64, 96, 16, 0.0, "hash"),  # three column chunks of 32, four programs
        (64, 96, 16, 0.1, "hash"),  # the paper's hidden dropout
        (48, 64, 32, 0.1, "hash16"),  # 16-bit masks; 48 rows: 16-row programs
    ],
)
def test_interpreted_kernels_equal_the_xla_ops(rows, width, block, rate, impl) -> None:
    """Forward and the gradients of h, b, r, the scale and the shift, float32, against the
    XLA ops under the same dropout key; the masks are `ops.dropout_keep_mask`'s (a wrong
    key's output differs)."""
    h, b, r, g, beta, cotangent = _inputs(rows, width)
    key = jax.random.key(7)
    opts = triton_norm.Options(eps=1e-12, rate=rate, paired=impl == "hash16", block=block, interpret=True)
    words = triton_norm.words(0, ops.hash_seeds(key))

    def ours(h, b, r, g, beta):
        return triton_norm.residual_layer_norm(h, b, r, g, beta, words, opts)

    def xla(h, b, r, g, beta):
        return _reference(h, b, r, g, beta, key, rate, impl)

    got, got_grads = _outputs_and_grads(ours, (h, b, r, g, beta), cotangent)
    want, want_grads = _outputs_and_grads(xla, (h, b, r, g, beta), cotangent)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
    for name, a, w in zip(("h", "b", "r", "scale", "shift"), got_grads, want_grads, strict=True):
        scale = float(jnp.max(jnp.abs(w)))
        assert float(jnp.max(jnp.abs(a - w))) <= 1e-5 * scale, name
    if rate:
        other = _reference(h, b, r, g, beta, jax.random.key(8), rate, impl)
        assert float(jnp.max(jnp.abs(got - other))) > 0.1


def test_the_first_row_places_a_block_in_the_global_masks() -> None:
    """The rows [16, 48) of a [64, W] input, run alone with their first row's index, draw
    the rows of the whole input's masks (what a shard of the batch does)."""
    h, b, r, g, beta, _ = _inputs(64, 32)
    key = jax.random.key(3)
    opts = triton_norm.Options(eps=1e-12, rate=0.5, block=16, interpret=True)
    whole = triton_norm.residual_layer_norm(h, b, r, g, beta, triton_norm.words(0, ops.hash_seeds(key)), opts)
    part = triton_norm.residual_layer_norm(
        h[16:48], b, r[16:48], g, beta, triton_norm.words(16, ops.hash_seeds(key)), opts
    )
    np.testing.assert_array_equal(part, whole[16:48])


def _layer(hidden_dropout: float) -> tuple[BertConfig, jax.Array, AttentionMask]:
    config = attention_cases.small_config(
        hidden_dropout_prob=hidden_dropout, attention_probs_dropout_prob=0.0
    )
    x = jax.random.normal(jax.random.key(0), (2, 32, 64))
    m = np.ones((2, 32), np.int32)
    m[1, 20:] = 0
    return config, x, AttentionMask(jnp.asarray(m))


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_the_encoder_layer_equals_the_xla_path(rate: float, capsys) -> None:
    """`BertLayer` (post-LN) with ``norm_kernel=triton`` (interpreted): the XLA path's output
    and every parameter's gradient (the dense biases' included) under the same dropout key,
    float32; the parameters are the same tree; one line: interpret mode (on CPU)."""
    config, x, mask = _layer(rate)
    params = BertLayer(config).init(jax.random.key(1), x, mask, True)

    def run(numerics: Numerics):
        def loss(p):
            y = BertLayer(config, numerics).apply(p, x, mask, False, rngs={"dropout": jax.random.key(5)})
            return jnp.sum(y * jnp.cos(y)), y

        (_, y), grads = jax.value_and_grad(loss, has_aux=True)(params)
        return y, grads

    want, want_grads = run(Numerics(norm_kernel="xla"))
    got, got_grads = run(Numerics(norm_kernel="triton"))
    np.testing.assert_allclose(got, want, rtol=0, atol=5e-5)
    flat_got = jax.tree_util.tree_leaves_with_path(got_grads)
    flat_want = jax.tree_util.tree_leaves_with_path(want_grads)
    assert [p for p, _ in flat_got] == [p for p, _ in flat_want]
    for (path, a), (_, w) in zip(flat_got, flat_want, strict=True):
        scale = float(jnp.max(jnp.abs(w)))
        assert float(jnp.max(jnp.abs(a - w))) <= 1e-4 * scale + 1e-7, jax.tree_util.keystr(path)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("warning: ")]
    assert all("Pallas interpret mode" in x for x in lines), lines


def test_sharded_over_a_mesh_each_shard_draws_its_part_of_the_global_masks() -> None:
    """Under a (data 2, tensor 2) mesh of CPU devices the kernels run per batch shard in a
    `shard_map`; each shard's masks are its rows of the global ones, so the layer's output
    is the XLA path's under the same dropout key (another key's differs)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    helper = ROOT / "tests" / "helpers" / "norm_sharded.py"
    done = subprocess.run([sys.executable, str(helper)], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "using XLA's LayerNorm" not in done.stdout  # the kernels ran
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["same_key"] < 5e-5
    assert result["other_key"] > 1e-2


def test_it_falls_back_to_xla_in_one_line_where_the_kernels_cannot_run(capsys) -> None:
    """Hidden dropout with ``dropout_rng=threefry`` (the kernels draw the hash masks), a
    remat policy, a pre-LN layer: XLA's LayerNorm, one warning line naming why, the XLA
    path's output."""
    config, x, mask = _layer(0.1)
    for numerics, why, pre_ln in (
        (Numerics(norm_kernel="triton", dropout_rng="threefry"), "dropout_rng=threefry", False),
        (Numerics(norm_kernel="triton", remat_policy="full"), "remat_policy=full", False),
        (Numerics(norm_kernel="triton"), "pre-LN", True),
    ):
        config = dataclasses.replace(config, pre_layer_norm=pre_ln)
        params = BertLayer(config).init(jax.random.key(1), x, mask, True)
        base = numerics.replace(norm_kernel="xla")
        rngs = {"dropout": jax.random.key(5)}
        got = BertLayer(config, numerics).apply(params, x, mask, False, rngs=rngs)
        want = BertLayer(config, base).apply(params, x, mask, False, rngs=rngs)
        np.testing.assert_array_equal(got, want)
        lines = [x for x in capsys.readouterr().out.splitlines() if "norm_kernel=triton" in x]
        assert len(lines) == 1 and why in lines[0] and lines[0].startswith("warning: ")


def test_forward_and_backward_lower_to_triton_for_a_cuda_target() -> None:
    """No GPU here: BERT-Base's [32,768, 768] in bfloat16 with dropout (both mask kinds)
    lowers to two Triton kernels (forward, backward)."""
    x = jax.ShapeDtypeStruct((32768, 768), jnp.bfloat16)
    v = jax.ShapeDtypeStruct((768,), jnp.float32)
    for paired in (False, True):
        opts = triton_norm.Options(eps=1e-12, rate=0.1, paired=paired)

        def loss(h, b, r, g, beta, key, opts=opts):
            words = triton_norm.words(0, ops.hash_seeds(key))
            return triton_norm.residual_layer_norm(h, b, r, g, beta, words, opts).astype(jnp.float32).sum()

        grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))
        key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
        text = grad.trace(x, v, x, v, v, key).lower(lowering_platforms=("cuda",)).as_text()
        assert text.count("__gpu$xla.gpu.triton") == 2


def test_refusals_name_the_shape() -> None:
    assert triton_norm.refusal(32768, 768) is None
    assert "multiple of 16" in triton_norm.refusal(8, 100)
    assert "2**32" in triton_norm.refusal(2**23, 1024)
    assert triton_norm.chunk(768) == 256 and triton_norm.chunk(1024) == 1024


@pytest.mark.skipif(not attention_cases.has_gpu(), reason="needs an NVIDIA GPU (Triton)")
@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_compiled_on_a_gpu_equals_the_xla_ops(rate: float) -> None:
    """The kernels compiled for the GPU at BERT-Base's width in bfloat16 against the XLA ops
    with the same masks: forward within 3e-2, gradients within 2% of their largest value
    (the XLA ops round the sum to bfloat16 before the statistics, the kernels do not)."""
    h, b, r, g, beta, cotangent = _inputs(4096, 768, jnp.bfloat16)
    key = jax.random.key(7)
    opts = triton_norm.Options(eps=1e-12, rate=rate)
    words = triton_norm.words(0, ops.hash_seeds(key))

    def ours(h, b, r, g, beta):
        return triton_norm.residual_layer_norm(h, b, r, g, beta, words, opts)

    def xla(h, b, r, g, beta):
        return _reference(h, b, r, g, beta, key, rate, "hash")

    got, got_grads = _outputs_and_grads(jax.jit(ours), (h, b, r, g, beta), cotangent)
    want, want_grads = _outputs_and_grads(jax.jit(xla), (h, b, r, g, beta), cotangent)
    text = jax.jit(ours).lower(h, b, r, g, beta).compile().as_text()
    assert "triton" in text.lower()
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=0, atol=3e-2)
    for a, w in zip(got_grads, want_grads, strict=True):
        a, w = np.asarray(a, np.float32), np.asarray(w, np.float32)
        assert np.max(np.abs(a - w)) <= 2e-2 * np.max(np.abs(w))
