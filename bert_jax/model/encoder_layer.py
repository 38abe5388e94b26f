"""One Transformer encoder layer (Devlin et al., 2019, §3; Vaswani et al., 2017, §3.1):
self-attention and a feed-forward block, each with a residual connection and LayerNorm.

Post-LayerNorm, ``LN(x + f(x))``, is the paper's; ``pre_layer_norm`` gives ``x + f(LN(x))``
(Xiong et al., 2020). A layer built with ``attention_norm=False`` has no attention
LayerNorm (ModernBERT's layer 0, whose attention reads the embedding LayerNorm's output,
Warner et al., 2024), and one with a ``window`` attends only to keys within ``window // 2``
positions (ModernBERT's local layers). The feed-forward block is ``act(x W_in) W_out`` or,
with ``gated_ffn``, GeGLU ``(act(x W_gate) * x W_in) W_out`` (Shazeer, 2020).

Parameter names are the same in both LayerNorm placements (each LayerNorm named by the
sub-layer it belongs to) and whether XLA or `residual_norm`'s kernels compute the blocks'
ends (``norm_kernel``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from bert_jax.model import attention, residual_norm
from bert_jax.model.attention import AttentionMask
from bert_jax.model.config import BertConfig
from bert_jax.model.layers import Dense, activation, dense, dropout, layer_norm
from bert_jax.model.numerics import DEFAULT, Numerics
from bert_jax.model.self_attention import BertSelfAttention, as_mask

Array = jax.Array


class BertLayer(nn.Module):
    """One encoder layer. `window`: this layer's local attention window (None: global);
    `attention_norm`: whether it has an attention LayerNorm (pre-LN only may lack one)."""

    config: BertConfig
    numerics: Numerics = DEFAULT
    window: int | None = None
    attention_norm: bool = True

    @nn.compact
    def __call__(
        self,
        x: Array,
        mask: AttentionMask | Array,
        deterministic: bool,
        rope: tuple[Array, Array] | None = None,
        pending: Array | None = None,
        defer: bool = False,
    ) -> Array | tuple[Array, Array]:
        """The layer's output, [B, S, H]. Layers chained through the LayerNorm kernels
        (`residual_norm.chains_layers`) take and hand on more: a pre-LN layer may take its
        input as ``x + pending`` (the previous layer's last residual add, left to this
        layer's attention LayerNorm kernel) and, with ``defer``, returns (x, h) for x + h,
        leaving its own to the next; a post-LN layer may take ``pending``, a second copy of
        ``x``, as its residual (so each use has its own gradient) and, with ``defer``,
        returns its output twice (the next layer's attention input and residual)."""
        c, num = self.config, self.numerics
        mask = as_mask(mask, x)
        if self.window is not None:
            mask = mask.replace(window=self.window)
        attention = BertSelfAttention(c, num, name="attention")
        if self._norm_kernel(x, deterministic):
            # The attention block without its output layer's bias (the kernel adds it).
            attend = lambda h: attention(h, mask, deterministic, rope, defer_bias=True)
            blocks = self._pre_norm_kernels if c.pre_layer_norm else self._post_norm_kernels
            return blocks(attend, x, deterministic, pending, defer)
        if pending is not None or defer:
            raise ValueError("a layer outside the LayerNorm kernels takes and returns whole outputs")
        output_norm = layer_norm(c, num, "output_LayerNorm")
        if c.pre_layer_norm:  # x + f(LN(x)): the residual stream is never normalised
            h = layer_norm(c, num, "attention_LayerNorm")(x) if self.attention_norm else x
            attn = attention(h, mask, deterministic, rope)
            x = checkpoint_name(x + dropout(num, c.hidden_dropout_prob)(attn, deterministic), "norm_input")
            h = dropout(num, c.hidden_dropout_prob)(self.feed_forward(output_norm(x)), deterministic)
            x = x + h
        else:  # LN(x + f(x))
            attn = attention(x, mask, deterministic, rope)
            attn = dropout(num, c.hidden_dropout_prob)(attn, deterministic)
            x = layer_norm(c, num, "attention_LayerNorm")(checkpoint_name(x + attn, "norm_input"))
            h = dropout(num, c.hidden_dropout_prob)(self.feed_forward(x), deterministic)
            x = output_norm(checkpoint_name(x + h, "norm_input"))
        return nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_embed"))

    def _norm_kernel(self, x: Array, deterministic: bool) -> bool:
        """Whether the blocks' ends run in `residual_norm`'s kernels (``norm_kernel``;
        one warning line where it asks for them and they cannot run)."""
        if self.numerics.norm_kernel == "xla" or self.is_initializing():
            return False
        why = residual_norm.kernel_refusal(self.config, self.numerics, x.shape, not deterministic)
        if why:
            attention.warn_once(f"norm_kernel=triton: {why}; using XLA's LayerNorm")
        elif attention.target_platform() == "cpu":
            attention.warn_once("norm_kernel=triton on cpu: Pallas interpret mode (slow; for tests)")
        return why is None

    def _post_norm_kernels(
        self, attend: Callable, x: Array, deterministic: bool, pending: Array | None, defer: bool
    ) -> Array | tuple[Array, Array]:
        """The post-LN layer, LN(x + f(x)), with each block's end (the bias of f's last dense
        layer, hidden dropout, residual add, LayerNorm) in `residual_norm`'s kernels. A
        LayerNorm's output with two uses (the next block's input and its residual) is taken
        twice, so its backward kernel adds their gradients (`triton_norm.
        residual_layer_norm_twice`); ``pending``/``defer``: the layer's input and output
        (`__call__`). The parameters and dropout layers are the XLA path's, created in the
        same order, so the kernels draw the XLA path's masks."""
        c, num = self.config, self.numerics
        rate = 0.0 if deterministic else c.hidden_dropout_prob

        def seeds() -> Array | None:
            return dropout(num, rate).seeds() if rate else None

        residual = x if pending is None else pending
        attn, bias = attend(x)
        norm = residual_norm.ResidualLayerNorm(c, num, form="twice", name="attention_LayerNorm")
        x, residual = norm(attn, bias, residual, rate, seeds())
        h, bias = self.feed_forward(x, defer_bias=True)
        norm = residual_norm.ResidualLayerNorm(
            c, num, form="twice" if defer else "plain", name="output_LayerNorm"
        )
        out = norm(h, bias, residual, rate, seeds())
        constrain = functools.partial(
            nn.with_logical_constraint,
            logical_axis_resources=("activation_batch", "activation_length", "activation_embed"),
        )
        return tuple(map(constrain, out)) if defer else constrain(out)

    def _pre_norm_kernels(
        self, attend: Callable, x: Array, deterministic: bool, pending: Array | None, defer: bool
    ) -> Array | tuple[Array, Array]:
        """The pre-LN layer, x + f(LN(x)), with the attention block's end (its output
        layer's bias, hidden dropout, the residual add) and the feed-forward block's
        LayerNorm in one `residual_norm` kernel pair, which writes the stream and the
        normalised input; with ``pending`` the attention LayerNorm too (the previous
        layer's residual add in it); the rest as on the XLA path, with its parameters and
        dropout layers in the same order."""
        c, num = self.config, self.numerics
        rate = 0.0 if deterministic else c.hidden_dropout_prob
        if pending is not None:
            if not self.attention_norm:
                raise ValueError("a layer without an attention LayerNorm takes its input whole")
            norm = residual_norm.ResidualLayerNorm(c, num, form="stream", name="attention_LayerNorm")
            x, h = norm(pending, None, x, 0.0, None)
        else:
            h = layer_norm(c, num, "attention_LayerNorm")(x) if self.attention_norm else x
        attn, bias = attend(h)
        seeds = dropout(num, rate).seeds() if rate else None
        norm = residual_norm.ResidualLayerNorm(c, num, form="stream", name="output_LayerNorm")
        x, h = norm(attn, bias, x, rate, seeds)
        h = dropout(num, c.hidden_dropout_prob)(self.feed_forward(h), deterministic)
        if defer:
            return x, h
        x = x + h
        return nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_embed"))

    def feed_forward(self, x: Array, defer_bias: bool = False) -> Array | tuple[Array, Array | None]:
        """[B, S, H] → [B, S, H]: act(x W_in) W_out, or act(x W_gate) * (x W_in) W_out
        (`gated_ffn`: GeGLU with gelu). The two GeGLU halves are separate kernels, so
        which half of a fused matrix is activated (ModernBERT's ``Wi``: the first) is a
        matter of conversion (`convert.modernbert_names`), not of the model; they are
        multiplied as one (`_gated_hidden`)."""
        c, num = self.config, self.numerics
        up = dense(c, num, c.intermediate_size, ("embed", "mlp"), "intermediate", use_bias=c.use_bias)
        if c.gated_ffn:
            gate = dense(
                c, num, c.intermediate_size, ("embed", "mlp"), "intermediate_gate", use_bias=c.use_bias
            )
            h = _gated_hidden(c, num, x, gate, up)
        else:
            h = nn.with_logical_constraint(up(x), ("activation_batch", "activation_length", "activation_mlp"))
            h = activation(c.hidden_act)(checkpoint_name(h, "ffn_hidden"))  # [B, S, F]
        h = checkpoint_name(h, "ffn_activated")
        out = dense(
            c, num, c.hidden_size, ("mlp", "embed"), "output", "copy_g", c.use_bias, "out", defer_bias
        )
        return out(h)


def _gated_hidden(c: BertConfig, num: Numerics, x: Array, gate: Dense, up: Dense) -> Array:
    """act(x W_gate) * (x W_in), [B, S, F], with both products in one matmul: the kernels
    stacked, ``[H, 2, F]``, the product ``[B, S, 2, F]`` (each row's gate values, then its
    input values). One matmul forward and two backward instead of two and four, one
    elementwise pass each way reading (and writing) both halves, one input gradient (no sum
    of two); sharded over F (``mlp``) as the two kernels are."""
    (ku, bu), (kg, bg) = up.weights(x.shape[-1]), gate.weights(x.shape[-1])
    y = jnp.einsum("...h,hkf->...kf", x.astype(num.dtype), jnp.stack([kg, ku], axis=1))
    if bg is not None:
        y = y + jnp.stack([bg, bu])
    y = nn.with_logical_constraint(y, ("activation_batch", "activation_length", None, "activation_mlp"))
    y = checkpoint_name(y, "ffn_hidden")
    return activation(c.hidden_act)(y[..., 0, :]) * y[..., 1, :]
