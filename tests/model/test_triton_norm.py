"""The residual blocks' ends in one Triton kernel pair (`model.triton_norm`, through
`model.residual_norm` under ``norm_kernel=triton``): interpreted on CPU, the kernels equal
``LN(r + dropout(h + b))`` on the XLA path with `ops.dropout_keep_mask`'s masks, and the
pre-LN form the stream and its LayerNorm, forward and every gradient; the encoder layer
(post-LN and pre-LN) gives the XLA path's output and gradients under the same dropout key
with the same parameters; under a mesh each shard draws its part of the global masks;
where they cannot run, XLA's LayerNorm with one warning line; they lower to
Triton for a CUDA target; on a GPU (skipped without one) the compiled kernels equal the
XLA ops."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import ops, triton_norm
from bert_jax.model.attention import AttentionMask
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel, stack_layers
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
    y, pullback = jax.vjp(jax.jit(fn), *args)
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


@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_the_output_taken_twice_has_both_gradients_added_in_the_kernel(rate) -> None:
    """`residual_layer_norm_twice` (a post-LN block's output feeding a matmul and a
    residual): both outputs are the XLA ops' output, and the gradients under two cotangents
    are the XLA ops' under their sum (without the second, r's differs). Lowered for a CUDA
    target at BERT-Base's shape, no XLA add of two [rows, H] arrays is left: the backward
    kernel reads both (the single-output kernel used twice has one)."""
    h, b, r, g, beta, dy = _inputs(64, 96)
    dy2 = jax.random.normal(jax.random.key(12), dy.shape)
    key = jax.random.key(7)
    opts = triton_norm.Options(eps=1e-12, rate=rate, block=16, interpret=True)
    words = triton_norm.words(0, ops.hash_seeds(key))
    twice = jax.jit(lambda *a: triton_norm.residual_layer_norm_twice(*a, words, opts))
    got, pull = jax.vjp(twice, h, b, r, g, beta)
    want, want_pull = jax.vjp(jax.jit(lambda *a: _reference(*a, key, rate, "hash")), h, b, r, g, beta)
    for y in got:
        np.testing.assert_allclose(y, want, rtol=0, atol=2e-5)
    grads, want_grads = pull((dy, dy2)), want_pull(dy + dy2)
    for name, a, w in zip(("h", "b", "r", "scale", "shift"), grads, want_grads, strict=True):
        assert float(jnp.max(jnp.abs(a - w))) <= 1e-5 * float(jnp.max(jnp.abs(w))), name
    alone = pull((dy, jnp.zeros_like(dy2)))[2]
    assert float(jnp.max(jnp.abs(alone - grads[2]))) > 0.5

    x = jax.ShapeDtypeStruct((32768, 768), jnp.bfloat16)
    v = jax.ShapeDtypeStruct((768,), jnp.float32)
    opts = triton_norm.Options(eps=1e-12, rate=0.1)

    def adds(twice: bool) -> int:
        def loss(h, b, r, g, beta):
            words = triton_norm.words(0, jnp.ones((2,), jnp.uint32))
            if twice:
                y1, y2 = triton_norm.residual_layer_norm_twice(h, b, r, g, beta, words, opts)
            else:
                y1 = y2 = triton_norm.residual_layer_norm(h, b, r, g, beta, words, opts)
            return (y1.astype(jnp.float32) * 2.0 + jnp.sin(y2.astype(jnp.float32))).sum()

        grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3, 4)))
        text = grad.trace(x, v, x, v, v).lower(lowering_platforms=("cuda",)).as_text()
        assert text.count("__gpu$xla.gpu.triton") == 2
        return len(re.findall(r"stablehlo.add %\S+, %\S+ : tensor<32768x768x(?:bf16|f32)>", text))

    assert adds(twice=False) >= 1 and adds(twice=True) == 0


def _stream_reference(h, b, r, g, beta, key, rate: float, impl: str) -> tuple[jax.Array, jax.Array]:
    """The pre-LN block's end in XLA ops, as `encoder_layer` computes it: the stream
    ``s = r + dropout(h + b)`` in r's dtype, then its LayerNorm in h's."""
    u = h + b.astype(h.dtype)
    if rate:
        u = ops.inverted_dropout(key, rate, u, impl)
    s = r + u.astype(r.dtype)
    return s, _reference(jnp.zeros_like(s), jnp.zeros_like(b), s, g, beta, key, 0.0, impl).astype(h.dtype)


@pytest.mark.parametrize(
    ("rate", "impl", "dtype"),
    [(0.0, "hash", jnp.float32), (0.1, "hash", jnp.float32), (0.1, "hash16", jnp.bfloat16)],
)
def test_the_stream_kernels_equal_the_xla_ops(rate, impl, dtype) -> None:
    """`stream_layer_norm` (the pre-LN form: the stream's sum and its LayerNorm, both
    written): forward and the gradients of h, b, r, the scale and the shift under
    cotangents for both outputs, against the XLA ops (in bfloat16 within a few of its
    steps: the sum is rounded to the stream's dtype before it is normalised, as there)."""
    h, b, r, g, beta, dy = _inputs(64, 96, dtype)
    ds = jax.random.normal(jax.random.key(11), r.shape, dtype)
    key = jax.random.key(7)
    opts = triton_norm.Options(eps=1e-12, rate=rate, paired=impl == "hash16", block=16, interpret=True)
    words = triton_norm.words(0, ops.hash_seeds(key))

    def ours(h, b, r, g, beta):
        return triton_norm.stream_layer_norm(h, b, r, g, beta, words, opts)

    def xla(h, b, r, g, beta):
        return _stream_reference(h, b, r, g, beta, key, rate, impl)

    got, pull = jax.vjp(jax.jit(ours), h, b, r, g, beta)
    want, want_pull = jax.vjp(jax.jit(xla), h, b, r, g, beta)
    assert [x.dtype for x in got] == [x.dtype for x in want] == [dtype, dtype]
    tol = 1e-5 if dtype == jnp.float32 else 2e-2
    for name, a, w in zip(("stream", "normalised"), got, want, strict=True):
        a, w = a.astype(jnp.float32), w.astype(jnp.float32)
        assert float(jnp.max(jnp.abs(a - w))) <= tol * float(jnp.max(jnp.abs(w))), name
    grads, want_grads = pull((ds, dy)), want_pull((ds, dy))
    for name, a, w in zip(("h", "b", "r", "scale", "shift"), grads, want_grads, strict=True):
        a, w = a.astype(jnp.float32), w.astype(jnp.float32)
        assert float(jnp.max(jnp.abs(a - w))) <= tol * float(jnp.max(jnp.abs(w))), name
    # The stream's own gradient is added: without it the gradient of r differs.
    alone = pull((jnp.zeros_like(ds), dy))[2].astype(jnp.float32)
    assert float(jnp.max(jnp.abs(alone - grads[2].astype(jnp.float32)))) > 0.5


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


def _layer(hidden_dropout: float, **changes) -> tuple[BertConfig, jax.Array, AttentionMask]:
    config = attention_cases.small_config(
        hidden_dropout_prob=hidden_dropout, attention_probs_dropout_prob=0.0, **changes
    )
    x = jax.random.normal(jax.random.key(0), (2, 32, 64))
    m = np.ones((2, 32), np.int32)
    m[1, 20:] = 0
    return config, x, AttentionMask(jnp.asarray(m))


def _assert_same_run(got, got_grads, want, want_grads) -> None:
    """The XLA path's output (within 5e-5) and the same parameter tree with every
    gradient within 1e-4 of its largest value."""
    np.testing.assert_allclose(got, want, rtol=0, atol=5e-5)
    flat_got = jax.tree_util.tree_leaves_with_path(got_grads)
    flat_want = jax.tree_util.tree_leaves_with_path(want_grads)
    assert [p for p, _ in flat_got] == [p for p, _ in flat_want]
    for (path, a), (_, w) in zip(flat_got, flat_want, strict=True):
        scale = float(jnp.max(jnp.abs(w)))
        assert float(jnp.max(jnp.abs(a - w))) <= 1e-4 * scale + 1e-7, jax.tree_util.keystr(path)


@pytest.mark.parametrize(
    ("rate", "pre_ln", "attention_norm"),
    [(0.0, False, True), (0.1, False, True), (0.1, True, True), (0.0, True, False)],
)
def test_the_encoder_layer_equals_the_xla_path(
    rate: float, pre_ln: bool, attention_norm: bool, capsys
) -> None:
    """`BertLayer` (post-LN; pre-LN, also without an attention LayerNorm as ModernBERT's
    layer 0) with ``norm_kernel=triton`` (interpreted): the XLA path's output and every
    parameter's gradient (the dense biases' included) under the same dropout key, float32;
    the parameters are the same tree; one line: interpret mode (on CPU)."""
    config, x, mask = _layer(rate, pre_layer_norm=pre_ln)
    params = BertLayer(config, attention_norm=attention_norm).init(jax.random.key(1), x, mask, True)

    def run(numerics: Numerics):
        def loss(p):
            layer = BertLayer(config, numerics, attention_norm=attention_norm)
            y = layer.apply(p, x, mask, False, rngs={"dropout": jax.random.key(5)})
            return jnp.sum(y * jnp.cos(y)), y

        (_, y), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        return y, grads

    want, want_grads = run(Numerics(norm_kernel="xla"))
    got, got_grads = run(Numerics(norm_kernel="triton"))
    _assert_same_run(got, got_grads, want, want_grads)
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("warning: ")]
    assert all("Pallas interpret mode" in x for x in lines), lines


def _unrolled_encoder_against_xla(config: BertConfig, kinds: tuple[str, ...]) -> tuple[tuple, tuple]:
    """A small encoder with ``norm_kernel=triton``, unrolled, against the XLA path under
    the same dropout key (`_assert_same_run`: the output and every gradient). Returns how
    often each kernel name in ``kinds`` appears in the kernels' gradient program, and
    (params, ids, mask)."""
    ids = jax.random.randint(jax.random.key(0), (2, 32), 0, config.vocab_size)
    m = np.ones((2, 32), np.int32)
    m[1, 20:] = 0
    mask = jnp.asarray(m)
    params = BertModel(config, add_pooler=False).init(jax.random.key(1), ids, mask)

    def run(numerics: Numerics):
        model = BertModel(config, numerics, add_pooler=False)

        def loss(p):
            y = model.apply(p, ids, mask, deterministic=False, rngs={"dropout": jax.random.key(5)})[0]
            return jnp.sum(y * jnp.cos(y)), y

        text = str(jax.make_jaxpr(jax.grad(lambda p: loss(p)[0]))(params))
        (_, y), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        return y, grads, tuple(text.count(k) for k in kinds)

    want, want_grads, _ = run(Numerics(norm_kernel="xla", layer_loop="unroll"))
    got, got_grads, counts = run(Numerics(norm_kernel="triton", layer_loop="unroll"))
    _assert_same_run(got, got_grads, want, want_grads)
    return counts, (params, ids, mask)


def test_a_pre_ln_encoder_hands_each_residual_add_to_the_next_kernel() -> None:
    """A ModernBERT-shaped pre-LN encoder (layer 0 without an attention LayerNorm, GeGLU,
    no biases, a final LayerNorm) with ``norm_kernel=triton``, unrolled: every layer's last
    residual add runs in the next LayerNorm's kernel (the next layer's attention LayerNorm,
    the final one: 2L - 1 stream kernels and one plain), and the output and every
    gradient equal the XLA path's under the same dropout key; scanned, each layer keeps its
    own residual add (one stream kernel in layer 0, one in the scanned body), with the XLA
    path's output (without dropout: scanned layers draw other masks)."""
    config = attention_cases.small_config(
        num_hidden_layers=3,
        pre_layer_norm=True,
        first_layer_attention_norm=False,
        gated_ffn=True,
        use_bias=False,
        norm_bias=False,
        hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.0,
    )
    kinds = ("stream_layer_norm_forward", "residual_layer_norm_forward")
    kernels, (params, ids, mask) = _unrolled_encoder_against_xla(config, kinds)
    assert kernels == (2 * 3 - 1, 1)
    stacked = {"params": stack_layers(nn.meta.unbox(params)["params"], 3, config)}
    model = BertModel(config, Numerics(norm_kernel="triton", layer_loop="scan"), add_pooler=False)
    forward = lambda p: model.apply(p, ids, mask, deterministic=True)[0]
    y = jax.jit(forward)(stacked)
    assert str(jax.make_jaxpr(forward)(stacked)).count("stream_layer_norm_forward") == 2  # layer 0, the body
    plain = BertModel(config, Numerics(layer_loop="unroll"), add_pooler=False)
    np.testing.assert_allclose(y, plain.apply(params, ids, mask, deterministic=True)[0], rtol=0, atol=5e-5)


def test_a_post_ln_encoder_hands_each_output_on_twice() -> None:
    """A BERT-shaped post-LN encoder (biases, hidden dropout 0.1) with ``norm_kernel=triton``,
    unrolled: every LayerNorm output with two uses (the next block's input and its
    residual) is taken twice, so its backward kernel adds the two gradients: 2L - 1 such
    kernels (the last layer's output has one use), one plain; the output and every gradient
    equal the XLA path's under the same dropout key."""
    config = attention_cases.small_config(
        num_hidden_layers=3, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.0
    )
    kinds = ("residual_layer_norm_twice_backward", "residual_layer_norm_backward")
    kernels, _ = _unrolled_encoder_against_xla(config, kinds)
    assert kernels == (2 * 3 - 1, 1)


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
    remat policy (post-LN and pre-LN): XLA's LayerNorm, one warning line naming why, the
    XLA path's output."""
    config, x, mask = _layer(0.1)
    for numerics, why, pre_ln in (
        (Numerics(norm_kernel="triton", dropout_rng="threefry"), "dropout_rng=threefry", False),
        (Numerics(norm_kernel="triton", remat_policy="full"), "remat_policy=full", False),
        (Numerics(norm_kernel="triton", remat_policy="selective"), "remat_policy=selective", True),
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
    """No GPU here: BERT-Base's [32,768, 768] in bfloat16 with dropout (both mask kinds),
    post-LN and pre-LN forms, lowers to two Triton kernels (forward, backward)."""
    x = jax.ShapeDtypeStruct((32768, 768), jnp.bfloat16)
    v = jax.ShapeDtypeStruct((768,), jnp.float32)
    for paired, stream in ((False, False), (True, False), (False, True)):
        opts = triton_norm.Options(eps=1e-12, rate=0.1, paired=paired)

        def loss(h, b, r, g, beta, key, opts=opts, stream=stream):
            words = triton_norm.words(0, ops.hash_seeds(key))
            if stream:
                s, y = triton_norm.stream_layer_norm(h, b, r, g, beta, words, opts)
                return (s.astype(jnp.float32) * y.astype(jnp.float32)).sum()
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
@pytest.mark.parametrize("form", ["plain", "twice", "stream"])
@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_compiled_on_a_gpu_equals_the_xla_ops(rate: float, form: str) -> None:
    """The kernels (``LN(r + dropout(h + b))``; ``twice`` its output twice, under two
    cotangents; ``stream`` the pre-LN form's two outputs, under cotangents for both)
    compiled for the GPU at BERT-Base's width in bfloat16 against the XLA ops with the same
    masks: outputs within 3e-2 + 1% (a bfloat16 step or two), gradients within 2% of their
    largest value (the post-LN XLA ops round the sum to bfloat16 before the statistics,
    those kernels do not)."""
    h, b, r, g, beta, dy = _inputs(4096, 768, jnp.bfloat16)
    key = jax.random.key(7)
    opts = triton_norm.Options(eps=1e-12, rate=rate)
    words = triton_norm.words(0, ops.hash_seeds(key))
    kernel = {
        "plain": triton_norm.residual_layer_norm,
        "twice": triton_norm.residual_layer_norm_twice,
        "stream": triton_norm.stream_layer_norm,
    }[form]
    other = jax.random.normal(jax.random.key(11), r.shape, jnp.bfloat16)
    cotangent = dy if form == "plain" else (other, dy)

    def ours(h, b, r, g, beta):
        return kernel(h, b, r, g, beta, words, opts)

    def xla(h, b, r, g, beta):
        if form == "stream":
            return _stream_reference(h, b, r, g, beta, key, rate, "hash")
        y = _reference(h, b, r, g, beta, key, rate, "hash")
        return (y, y) if form == "twice" else y

    got, pull = jax.vjp(jax.jit(ours), h, b, r, g, beta)
    want, want_pull = jax.vjp(jax.jit(xla), h, b, r, g, beta)
    assert "triton" in jax.jit(ours).lower(h, b, r, g, beta).compile().as_text().lower()
    for a, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(w, np.float32), rtol=1e-2, atol=3e-2)
    for a, w in zip(pull(cotangent), want_pull(cotangent), strict=True):
        a, w = np.asarray(a, np.float32), np.asarray(w, np.float32)
        assert np.max(np.abs(a - w)) <= 2e-2 * np.max(np.abs(w))
