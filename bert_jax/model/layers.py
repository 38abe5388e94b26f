"""The parameterised building blocks of `encoder.py` and `heads.py`: dense layers,
LayerNorm, dropout and activations, every parameter tagged with its logical axes
(`nn.with_logical_partitioning`) so that `sharding.py` places it from the rules alone.
How a run computes them (dtypes, weight-gradient form, dropout masks) is its `Numerics`,
passed to each block beside the model's `BertConfig`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model import ops
from bert_jax.model.config import BertConfig
from bert_jax.model.initialization import init_std
from bert_jax.model.numerics import Numerics

Array = jax.Array


def normal_init(config: BertConfig, axes: tuple[str | None, ...], kind: str = "in") -> Callable[..., Any]:
    """Normal init truncated at two stds, tagged with logical axes: std 0.02 as the original,
    or ModernBERT's std of `kind` for a model of that family (`initialization.init_std`)."""
    return nn.with_logical_partitioning(nn.initializers.truncated_normal(stddev=init_std(config, kind)), axes)


def zeros_init(axes: tuple[str | None, ...]) -> Callable[..., Any]:
    return nn.with_logical_partitioning(nn.initializers.zeros_init(), axes)


def ones_init(axes: tuple[str | None, ...]) -> Callable[..., Any]:
    return nn.with_logical_partitioning(nn.initializers.ones_init(), axes)


def activation(name: str) -> Callable[[Array], Array]:
    """GELU exact (erf) by default; the TF1 release's tanh approximation as an option."""
    if name == "gelu":
        return ops.gelu
    if name == "gelu_tanh":
        return functools.partial(jax.nn.gelu, approximate=True)
    if name == "relu":
        return jax.nn.relu
    raise ValueError(f"Unknown activation {name!r}")


class Dropout(nn.Module):
    """Inverted dropout with the run's mask generator (`ops.dropout_keep_mask`)."""

    rate: float
    impl: str = "hash"

    @nn.compact
    def __call__(self, x: Array, deterministic: bool) -> Array:
        if deterministic or self.rate == 0.0:
            return x
        if self.rate >= 1.0:
            return jnp.zeros_like(x)
        return ops.inverted_dropout(self.make_rng("dropout"), self.rate, x, self.impl)

    def seeds(self) -> Array:
        """The two uint32 seeds of the ``"hash"`` mask this layer would draw instead of being
        called (`ops.hash_seeds` of the same dropout key): a kernel that draws that mask
        block by block in place (`triton_attention`, `mosaic_attention`) takes them."""
        return ops.hash_seeds(self.make_rng("dropout"))


def dropout(numerics: Numerics, rate: float, name: str | None = None) -> Dropout:
    return Dropout(rate, numerics.dropout_rng, name=name)


def layer_norm(config: BertConfig, numerics: Numerics, name: str) -> nn.LayerNorm:
    """LayerNorm with the config's eps (1e-12; ModernBERT's 1e-5) and float32 statistics;
    with ``norm_bias=False`` a scale only (flax's ``use_bias=False``: no ``bias`` leaf)."""
    return nn.LayerNorm(
        epsilon=config.layer_norm_eps,
        use_bias=config.norm_bias,
        dtype=numerics.dtype,
        param_dtype=numerics.params,
        scale_init=ones_init(("norm",)),
        bias_init=zeros_init(("norm",)),
        name=name,
    )


class Dense(nn.Module):
    """A dense layer (``kernel [in, out]``, ``bias [out]``, as `nn.Dense`) computed by
    `ops.dense` on a 2-D ``[-1, in]`` view of its input (a free reshape).

    On ``[B, S, in]`` arrays XLA's CPU backend copies the activation gradient into a
    transposed layout for every weight gradient (measured 3-7% of a BERT-Base step);
    on the 2-D view the weight gradient is a plain matmul.
    """

    config: BertConfig
    numerics: Numerics
    features: int
    axes: tuple[str | None, str | None]
    # Which operand the weight gradient transposes when the run asks for copies
    # (`ops.dense`): "copy_g" where the input is an elementwise result (the GELU output)
    # that XLA would recompute, column by column, inside its copy (~6x slower).
    copy: str = "copy_x"
    use_bias: bool = True
    # The kernel's initialisation kind (`initialization.KINDS`): "in", "out" (into the
    # residual stream, or a prediction head's dense) or "final_out" (a task classifier).
    init: str = "in"
    # True: returns (the product without the bias, the bias in the compute dtype or None),
    # for a kernel that adds it (`residual_norm`).
    defer_bias: bool = False

    def __call__(self, inputs: Array) -> Array | tuple[Array, Array | None]:
        kernel, bias = self.weights(inputs.shape[-1])
        deferred, bias = (bias, None) if self.defer_bias else (None, bias)
        x2 = inputs.reshape(-1, inputs.shape[-1]).astype(self.numerics.dtype)
        num = self.numerics
        y = ops.dense(x2, kernel, bias, num.weight_grad(*kernel.shape, self.copy), num.bias_grad_form)
        y = y.reshape(*inputs.shape[:-1], self.features)
        return (y, deferred) if self.defer_bias else y

    @nn.compact
    def weights(self, in_features: int) -> tuple[Array, Array | None]:
        """(kernel [in, out], bias [out] or None), in the compute dtype: for a caller that
        multiplies by several layers' kernels at once (`BertLayer`'s GeGLU)."""
        c, num = self.config, self.numerics
        shape = (in_features, self.features)
        kernel = self.param("kernel", normal_init(c, self.axes, self.init), shape, num.params)
        bias = None
        if self.use_bias:
            bias = self.param("bias", zeros_init(self.axes[1:]), (self.features,), num.params).astype(
                num.dtype
            )
        return kernel.astype(num.dtype), bias


def dense(
    config: BertConfig,
    numerics: Numerics,
    features: int,
    axes: tuple[str | None, str | None],
    name: str,
    copy: str = "copy_x",
    use_bias: bool = True,
    init: str = "in",
    defer_bias: bool = False,
) -> Dense:
    """A `Dense` layer; ``use_bias=False`` leaves out its bias (`BertConfig.use_bias`);
    `init` is its kernel's initialisation kind (`initialization.init_std`); ``defer_bias``:
    see `Dense`."""
    return Dense(config, numerics, features, axes, copy, use_bias, init, defer_bias, name=name)


def rotary_tables(position_ids: Array, head_dim: int, base: float) -> tuple[Array, Array]:
    """(sin, cos) of rotary position embeddings (Su et al., 2021), each [B, S, D/2] float32:
    angle ``position * base^(-2i/D)`` for frequency i of the head's D/2 pairs."""
    inv_freq = base ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)  # [D/2]
    angles = position_ids.astype(jnp.float32)[..., None] * inv_freq  # [B, S, D/2]
    return jnp.sin(angles), jnp.cos(angles)


def sinusoid_table(position_ids: Array, width: int, base: float = 10_000.0) -> Array:
    """The fixed sinusoids of Vaswani et al. (2017), [B, S, width] float32: features 2i and
    2i+1 are sin and cos of ``position * base^(-2i/width)`` (the angles of `rotary_tables`,
    interleaved)."""
    sin, cos = rotary_tables(position_ids, width, base)  # each [B, S, W/2]
    return jnp.stack([sin, cos], axis=-1).reshape(*sin.shape[:-1], width)


def alibi_slopes(num_heads: int) -> Array:
    """ALiBi's per-head slopes (Press et al., 2022, §3): the geometric sequence
    2^(-8/n), 2^(-16/n), ... for n heads a power of two; otherwise those of the power of
    two below, then every other slope of the power of two above."""

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    below = 1 << (num_heads.bit_length() - 1)
    slopes = geometric(below) + geometric(2 * below)[0::2][: num_heads - below]
    return jnp.asarray(slopes, jnp.float32)


def alibi_bias(position_ids: Array, num_heads: int) -> Array:
    """[B, N, S, S] float32: -m_n |p_q - p_k| (symmetric: every query sees both sides, as
    MosaicBERT's bidirectional ALiBi); positions restart in packed rows."""
    pos = position_ids.astype(jnp.float32)
    distance = jnp.abs(pos[:, None, :, None] - pos[:, None, None, :])  # [B, 1, S, S]
    return -alibi_slopes(num_heads)[None, :, None, None] * distance


def apply_rotary(x: Array, sin: Array, cos: Array) -> Array:
    """Rotates each pair (x_i, x_{i+D/2}) of ``x [B, S, N, D]`` by its angle (the "rotate
    half" pairing of GPT-NeoX, Hugging Face and ModernBERT), in float32."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    s, c = sin[:, :, None, :], cos[:, :, None, :]  # broadcast over heads
    return jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).astype(x.dtype)
