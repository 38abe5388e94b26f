"""`model.attention`: the XLA path is the encoder's own math; splash attention (Pallas,
interpreted on the CPU) equals it within 1e-5, forward and gradients, for padding, packed
rows, causal attention and a local window; the kernel choice and its warnings; the cuDNN
call's masks, and on a GPU cuDNN itself against the XLA path; splash compiled ahead of
time for a TPU topology (libtpu, no TPU)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import attention
from bert_jax.model.attention import AttentionMask, choose_kernel
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertSelfAttention, attention_bias
from bert_jax.model.layers import alibi_bias
from bert_jax.training import sharding
from tests.helpers import attention_cases

B, N, D = 2, 2, 64


def _inputs(s: int, packed: bool, dtype=jnp.float32):
    return attention_cases.inputs(s, packed, dtype, B, N, D)


def _loss_and_grads(fn, q, k, v, mask):
    """`attention_cases.out_and_grads` of ``fn(q, k, v, mask)``."""
    return attention_cases.out_and_grads(lambda q, k, v: fn(q, k, v, mask), q, k, v, mask.input_mask)


def _splash(q, k, v, mask):
    return attention.splash_attention(q, k, v, mask, interpret=True)


@pytest.mark.parametrize(
    ("s", "packed", "causal", "window"),
    [
        (256, False, False, None),  # padding only
        (256, True, False, None),  # packed examples (segment ids)
        (200, False, True, None),  # causal; 200 is padded to 256 for the kernel's blocks
        (256, True, False, 64),  # a local window (±32) smaller than the sequence
    ],
)
def test_splash_in_interpret_mode_equals_the_xla_path(s, packed, causal, window) -> None:
    q, k, v, m = _inputs(s, packed)
    mask = AttentionMask(m, packed=packed, causal=causal, window=window)
    want, want_grads = _loss_and_grads(attention.xla_attention, q, k, v, mask)
    got, got_grads = _loss_and_grads(_splash, q, k, v, mask)
    assert got.shape == want.shape == q.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=True):
        assert float(jnp.abs(w).max()) > 1e-3  # gradients that say something
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-5)
    if window is not None:  # the window changes the result: the comparison can fail
        unwindowed = attention.xla_attention(q, k, v, AttentionMask(m, packed=packed))
        assert float(jnp.abs((unwindowed - want) * (m > 0)[:, :, None, None]).max()) > 1e-2


def test_window_is_modernberts_two_sided_half_window() -> None:
    m = jnp.ones((1, 10), jnp.int32)
    seen = attention.visible(AttentionMask(m, window=4))[0, 0]
    assert seen[5].tolist() == [j in (3, 4, 5, 6, 7) for j in range(10)]  # |i - j| <= 4 // 2
    causal = attention.visible(AttentionMask(m, causal=True, window=4))[0, 0]
    assert causal[5].tolist() == [j in (3, 4, 5) for j in range(10)]
    with pytest.raises(ValueError, match="attention window"):
        AttentionMask(m, window=0)


@pytest.mark.parametrize(
    ("packed", "causal", "alibi"), [(False, False, False), (True, True, False), (True, False, True)]
)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_xla_path_is_bit_identical_to_the_encoders_attention(packed, causal, alibi, dtype) -> None:
    """The encoder's `BertSelfAttention` with its query/key/value projections replaced by
    given q, k, v: the context it feeds its output projection equals `xla_attention`'s."""
    s = 48
    q, k, v, _ = _inputs(s, packed, dtype)
    m = np.zeros((B, s), np.int32)
    m[0, :30], m[1, :45] = 1, 1  # padding after 30 and 45 tokens
    if packed:
        m[0, 20:30], m[1, 10:45] = 2, 2
        m[1, 40:45] = 3
    m = jnp.asarray(m)
    position_ids = jnp.broadcast_to(jnp.arange(s), (B, s))
    extra = alibi_bias(position_ids, N) if alibi else None
    bias = attention_bias(m, causal, packed) + (extra if alibi else 0.0)
    given, seen = {"query": q, "key": k, "value": v}, {}

    def intercept(next_fun, args, kwargs, context):
        name = context.module.name
        if context.method_name == "__call__" and name in given:
            return given[name]
        if context.method_name == "__call__" and name == "output":
            seen["ctx"] = args[0]
        return next_fun(*args, **kwargs)

    config = BertConfig(hidden_size=N * D, num_attention_heads=N, position_embedding_type="absolute")
    module = BertSelfAttention(config)
    x = jnp.zeros((B, s, N * D), jnp.float32)
    params = module.init(jax.random.key(0), x, bias, True)
    with nn.intercept_methods(intercept):
        module.apply(params, x, bias, True)
    mask = AttentionMask(m, packed=packed, causal=causal, extra_bias=extra)
    ours = attention.xla_attention(q, k, v, mask, dtype=jnp.float32)  # the default numerics
    assert seen["ctx"].dtype == ours.dtype
    assert jnp.array_equal(seen["ctx"], ours)


@pytest.mark.parametrize(("packed", "causal"), [(False, False), (True, True)])
def test_the_key_bias_the_layer_leaves_out_changes_nothing(packed, causal) -> None:
    """`BertSelfAttention` does not add the key projection's bias (a parameter still): its
    output equals attention with the bias added, and that bias's gradient through the
    bias-added attention is zero up to rounding (the softmax cancels a score added to
    every key of a query)."""
    s = 128
    _, _, _, m = _inputs(s, packed)
    config = BertConfig(hidden_size=N * D, num_attention_heads=N, position_embedding_type="absolute")
    module = BertSelfAttention(config)
    x = jax.random.normal(jax.random.key(7), (B, s, N * D), jnp.float32)
    mask = AttentionMask(m, packed=packed, causal=causal)
    params = nn.meta.unbox(module.init(jax.random.key(0), x, mask, True)["params"])
    for i, name in enumerate(("query", "key", "value", "output")):  # every bias non-zero
        bias = params[name]["bias"]
        params[name]["bias"] = 0.5 * jax.random.normal(jax.random.key(i), bias.shape)

    def with_key_bias(params):
        def heads(name, h):
            return jnp.einsum("bsh,hnd->bsnd", h, params[name]["kernel"]) + params[name]["bias"]

        ctx = attention.xla_attention(heads("query", x), heads("key", x), heads("value", x), mask)
        return jnp.einsum("bsnd,ndh->bsh", ctx, params["output"]["kernel"]) + params["output"]["bias"]

    ours = lambda params: module.apply({"params": params}, x, mask, True)
    real = (m > 0)[:, :, None]
    np.testing.assert_allclose(ours(params) * real, with_key_bias(params) * real, rtol=0, atol=1e-4)
    loss = lambda f: lambda params: jnp.sum((f(params) * real) ** 2)
    got = jax.grad(loss(ours))(params)
    want = jax.grad(loss(with_key_bias))(params)
    assert not jnp.any(got["key"]["bias"])
    scale = float(jnp.abs(want["key"]["kernel"]).max())
    assert scale > 1e-2 and float(jnp.abs(want["key"]["bias"]).max()) < 1e-4 * scale
    for name in ("query", "key", "value", "output"):
        for leaf in ("kernel", "bias"):
            np.testing.assert_allclose(got[name][leaf], want[name][leaf], rtol=0, atol=2e-4 * scale)


def test_xla_path_applies_dropout_to_the_probabilities() -> None:
    q, k, v, m = _inputs(128, packed=False)
    mask = AttentionMask(m)
    plain = attention.xla_attention(q, k, v, mask)
    assert jnp.array_equal(attention.xla_attention(q, k, v, mask, dropout_fn=lambda p: p), plain)
    halved = attention.xla_attention(q, k, v, mask, dropout_fn=lambda p: p * 0.5)
    np.testing.assert_allclose(halved, plain * 0.5, rtol=1e-6, atol=1e-6)
    assert not jnp.any(attention.xla_attention(q, k, v, mask, dropout_fn=jnp.zeros_like))


def _mask(s=256, **kwargs) -> AttentionMask:
    return AttentionMask(jnp.ones((B, s), jnp.int32), **kwargs)


@pytest.mark.parametrize(
    ("requested", "platform", "mask", "head_dim", "rate", "dtype", "kernel", "warning"),
    [
        ("auto", "cpu", _mask(), 64, 0.0, jnp.float32, "xla", None),
        ("auto", "tpu", _mask(packed=True, window=128), 64, 0.0, jnp.bfloat16, "splash", None),
        ("auto", "tpu", _mask(causal=True), 96, 0.0, jnp.float32, "splash", None),
        ("auto", "tpu", _mask(), 64, 0.1, jnp.bfloat16, "xla", "attention dropout (0.1)"),
        ("splash", "tpu", _mask(), 64, 0.1, jnp.bfloat16, "xla", "attention dropout (0.1)"),
        ("auto", "tpu", _mask(extra_bias=jnp.zeros((1, N, 256, 256))), 64, 0.0, jnp.bfloat16, "xla", "ALiBi"),
        ("splash", "gpu", _mask(), 64, 0.0, jnp.bfloat16, "xla", "not on gpu"),
        ("splash", "cpu", _mask(), 64, 0.0, jnp.float32, "splash", "interpret mode"),
        ("xla", "tpu", _mask(), 64, 0.0, jnp.bfloat16, "xla", None),
        ("auto", "gpu", _mask(causal=True, window=128), 64, 0.0, jnp.bfloat16, "cudnn", None),
        # ModernBERT's local layers: Triton skips the tiles outside the two-sided window...
        ("auto", "gpu", _mask(window=128), 64, 0.0, jnp.bfloat16, "triton", None),
        # ... and where it cannot take them, cuDNN with the window in its mask
        ("auto", "gpu", _mask(window=128), 96, 0.0, jnp.bfloat16, "cudnn", None),
        ("auto", "gpu", _mask(s=200, window=128), 64, 0.0, jnp.bfloat16, "cudnn", None),
        ("auto", "gpu", _mask(), 64, 0.0, jnp.float32, "xla", "bfloat16 or float16, not float32"),
        ("auto", "gpu", _mask(packed=True), 64, 0.1, jnp.bfloat16, "triton", None),  # the paper's dropout
        ("auto", "gpu", _mask(s=200), 64, 0.1, jnp.bfloat16, "xla", "multiple of 16"),
        ("auto", "gpu", _mask(), 96, 0.1, jnp.bfloat16, "xla", "power of two from 16 to 256, not 96"),
        ("cudnn", "gpu", _mask(), 160, 0.0, jnp.bfloat16, "xla", "not 160"),
        ("cudnn", "gpu", _mask(), 20, 0.0, jnp.float16, "xla", "not 20"),
        ("cudnn", "gpu", _mask(s=255), 64, 0.0, jnp.bfloat16, "xla", "even sequence length, not 255"),
        ("cudnn", "tpu", _mask(), 64, 0.0, jnp.bfloat16, "xla", "not on tpu"),
    ],
)
def test_choose_kernel(requested, platform, mask, head_dim, rate, dtype, kernel, warning) -> None:
    got, line = choose_kernel(requested, platform, mask, head_dim, rate, dtype)
    assert got == kernel
    if warning is None:
        assert line is None
    else:
        assert line is not None and warning in line and "\n" not in line
        assert line.startswith(f"attention_kernel={requested}")
        assert got != "xla" or line.endswith("using the XLA attention")


def test_auto_on_a_gpu_keeps_threefry_dropout_on_the_xla_path() -> None:
    got, line = choose_kernel("auto", "gpu", _mask(), 64, 0.1, jnp.bfloat16, hash_dropout=False)
    assert got == "xla" and "dropout_rng=threefry" in line


def test_unknown_kernel_is_one_line_naming_the_key() -> None:
    with pytest.raises(
        ValueError,
        match=r"^attention_kernel='flash' is not one of: auto, xla, splash, cudnn, triton, mosaic$",
    ):
        choose_kernel("flash", "tpu", _mask(), 64, 0.0)


def test_attend_falls_back_with_one_warning_line_once(capsys, monkeypatch) -> None:
    monkeypatch.setattr(attention, "_WARNED", set())
    q, k, v, m = _inputs(128, packed=False)
    mask = AttentionMask(m, extra_bias=alibi_bias(jnp.broadcast_to(jnp.arange(128), (B, 128)), N))
    for _ in range(3):
        out = attention.attend(q, k, v, mask, "splash", platform="tpu")
        assert jnp.array_equal(out, attention.xla_attention(q, k, v, mask))
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "warning: attention_kernel=splash: splash takes no additive bias (ALiBi); using the XLA attention"
    ]


def test_attend_runs_splash_sharded_over_a_mesh(capsys, monkeypatch) -> None:
    """`attend` with splash on the CPU (interpreted) inside a mesh and its rules: the
    shard_map path, equal to the XLA path."""
    monkeypatch.setattr(attention, "_WARNED", set())
    q, k, v, m = _inputs(128, packed=True)
    mask = AttentionMask(m, packed=True, causal=True)
    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.LOGICAL_AXIS_RULES):
        assert attention.target_platform() == "cpu"
        got = jax.jit(lambda q, k, v, mask: attention.attend(q, k, v, mask, "splash"))(q, k, v, mask)
    assert "Pallas interpret mode" in capsys.readouterr().out
    real = (m > 0)[:, :, None, None]
    np.testing.assert_allclose(got * real, attention.xla_attention(q, k, v, mask) * real, rtol=0, atol=1e-5)


def test_cudnn_call_masks_equal_the_xla_path(monkeypatch) -> None:
    """The arguments `cudnn_attention` gives `jax.nn.dot_product_attention`, run by JAX's
    XLA implementation of the same call (no GPU here): equal to `xla_attention` at every
    query, padding ones too. Plain rows go as their lengths (cuDNN's padding mask, no
    [B, 1, S, S] bias and so no bias gradient), causal ones with cuDNN's causal mask and left
    window; packing and a two-sided window as a boolean mask."""
    real_call, calls = jax.nn.dot_product_attention, []

    def as_xla(*args, implementation=None, **kwargs):
        lengths = kwargs["key_value_seq_lengths"]
        calls.append(
            (
                implementation,
                kwargs["mask"] is not None,
                None if lengths is None else lengths.tolist(),
                kwargs["is_causal"],
                kwargs["local_window_size"],
            )
        )
        return real_call(*args, implementation="xla", **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", as_xla)
    q, k, v, m = _inputs(128, packed=True)
    plain = (m > 0).astype(jnp.int32)
    masks = (
        AttentionMask(plain),
        AttentionMask(plain, causal=True),
        AttentionMask(plain, causal=True, window=16),
        AttentionMask(m, packed=True),
        AttentionMask(m, packed=True, causal=True, window=16),
        AttentionMask(m, packed=True, window=16),  # two-sided: ±8
        AttentionMask(plain, window=16),
    )
    for mask in masks:
        got = attention.cudnn_attention(q, k, v, mask)
        np.testing.assert_allclose(got, attention.xla_attention(q, k, v, mask), rtol=0, atol=1e-5)
    lengths = [128 - 37, 128 - 5]
    assert calls == [
        ("cudnn", False, lengths, False, None),
        ("cudnn", False, lengths, True, None),
        ("cudnn", False, lengths, True, (8, 0)),
        ("cudnn", True, None, False, None),
        ("cudnn", True, None, True, (8, 0)),
        ("cudnn", True, None, False, None),
        ("cudnn", True, None, False, None),
    ]
    # A row of padding alone (a batch's filler rows) stays finite: its queries see one key.
    empty = plain.at[1].set(0)
    out = attention.cudnn_attention(q, k, v, AttentionMask(empty))
    assert np.isfinite(np.asarray(out)).all() and calls[-1][2] == [128 - 37, 1]


def test_splash_compiles_ahead_of_time_for_a_tpu_topology() -> None:
    """Forward and backward of `attend` (auto → splash) jitted over a (data 2, tensor 2)
    mesh of v5e:2x2 compile-only devices: the Mosaic kernels are in the program."""
    pytest.importorskip("libtpu")
    from jax.experimental import topologies

    devices = topologies.get_topology_desc(platform="tpu", topology_name="v5e:2x2").devices
    mesh = sharding.make_mesh((2, 1, 2), devices)
    batch, s, heads = 4, 1000, 4  # 1000: padded to 1024 for the kernel
    qkv = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(("data", "fsdp"), None, "tensor", None))
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(("data", "fsdp"), None))

    def grads(q, k, v, m):
        mask = AttentionMask(m, packed=True, window=128)
        loss = lambda q, k, v: attention.attend(q, k, v, mask).astype(jnp.float32).sum()
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    step = jax.jit(grads, in_shardings=(qkv, qkv, qkv, rows), out_shardings=(qkv, qkv, qkv))
    x = jax.ShapeDtypeStruct((batch, s, heads, D), jnp.bfloat16, sharding=qkv)
    m = jax.ShapeDtypeStruct((batch, s), jnp.int32, sharding=rows)
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.LOGICAL_AXIS_RULES):
        assert attention.target_platform() == "tpu"
        compiled = step.lower(x, x, x, m).compile()
    assert compiled.memory_analysis() is not None
    text = compiled.as_text()
    assert text.count("tpu_custom_call") >= 3  # forward, dq and dkv kernels
    assert "bf16[2,2,1024,64]" in text  # each device: half the batch, half the heads


@pytest.mark.skipif(not attention_cases.has_gpu(), reason="needs an NVIDIA GPU (cuDNN)")
@pytest.mark.parametrize(
    ("s", "packed", "causal", "window"),
    [
        (256, False, False, None),  # padding only
        (256, True, False, None),  # packed examples
        (200, False, True, None),  # causal (the LTR ablation)
        (256, True, True, 64),  # a causal window in packed rows
        (1024, False, False, 128),  # ModernBERT's local layers: a two-sided window (±64)
    ],
)
def test_cudnn_on_a_gpu_equals_the_xla_path(s, packed, causal, window) -> None:
    """cuDNN's fused attention against the XLA path in bfloat16 (what cuDNN takes), forward
    and gradients, on the real queries: within bfloat16 rounding (the XLA path rounds the
    probabilities to bfloat16 before the weighted sum, cuDNN keeps them in float32)."""
    q, k, v, m = _inputs(s, packed, dtype=jnp.bfloat16)
    mask = AttentionMask(m, packed=packed, causal=causal, window=window)
    want, want_grads = _loss_and_grads(attention.xla_attention, q, k, v, mask)
    got, got_grads = _loss_and_grads(attention.cudnn_attention, q, k, v, mask)
    text = (
        jax.jit(lambda q, k, v: attention.cudnn_attention(q, k, v, mask)).lower(q, k, v).compile().as_text()
    )
    assert "cudnn" in text.lower()  # the fused kernel ran, not a fallback
    attention_cases.assert_close_in_bfloat16(got, want, got_grads, want_grads)
    # Every query's output is finite, a padding one's and one in a row of padding alone too.
    filler = AttentionMask(m.at[0].set(0), packed=packed, causal=causal, window=window)
    whole = jax.jit(lambda q, k, v: attention.cudnn_attention(q, k, v, filler))
    assert np.isfinite(np.asarray(whole(q, k, v), np.float32)).all()
