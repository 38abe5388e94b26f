"""Multi-head self-attention of an encoder layer (Vaswani et al., 2017, §3.2): the query,
key, value and output projections, rotary positions on queries and keys, and the
attention itself through `attention.attend`, whose kernel (XLA, Pallas splash, cuDNN,
Triton, Mosaic) the run's `Numerics.attention_kernel` chooses.

Kernels are stored with the head axis apart ([H, N, D] in, [N, D, H] out), so the head
axis can be sharded over the tensor mesh axis without reshapes. Shapes: B batch, S
sequence, H hidden, N heads, D head size.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name

from bert_jax.model import attention, ops, triton_attention
from bert_jax.model.attention import AttentionMask
from bert_jax.model.config import BertConfig
from bert_jax.model.layers import apply_rotary, dropout, normal_init, zeros_init
from bert_jax.model.numerics import DEFAULT, KERNEL_DROPOUT_RNGS, Numerics

Array = jax.Array


class _HeadsDense(nn.Module):
    """A dense layer whose kernel is stored in its 3-D shape, to/from the head axes.

    `nn.DenseGeneral` initialises a flattened 2-D kernel and reshapes it, which applies
    the 3-name logical-axis constraint to a 2-D array; declaring the final shape avoids
    that. ``to_heads``: [.., H] → [.., N, D] (kernel [H, N, D]); else [.., N, D] → [.., H].
    """

    config: BertConfig
    numerics: Numerics
    to_heads: bool
    # False: the bias is a parameter (checkpoints and conversions keep it) but is not added.
    # The key projection's, without rotary positions: it adds q_i . b_k to every score of
    # query i, the same for every key, which the softmax cancels, so leaving it out changes
    # no output and no gradient (its own is zero in exact arithmetic) and saves a pass over
    # the keys. Rotating the keys makes the added score depend on the key's position: kept.
    add_bias: bool = True
    # True: returns (the product without the bias, the bias in the compute dtype or None),
    # for a kernel that adds it (`residual_norm`).
    defer_bias: bool = False

    @nn.compact
    def weights(self) -> tuple[Array, Array | None]:
        """(kernel as a 2-D matrix, [H, N*D] or [N*D, H], bias as a vector or None: not
        added), in the compute dtype: for a caller that multiplies by several projections'
        kernels at once (`BertSelfAttention`'s stacked query, key and value)."""
        c, num = self.config, self.numerics
        n, d, h = c.num_attention_heads, c.head_dim, c.hidden_size
        if self.to_heads:
            shape, axes, bias_axes = (h, n, d), ("embed", "heads", "kv"), ("heads", "kv")
        else:
            shape, axes, bias_axes = (n, d, h), ("heads", "kv", "embed"), ("embed",)
        # The output projection writes into the residual stream: ModernBERT's "out" std.
        init = normal_init(c, axes, "in" if self.to_heads else "out")
        kernel = self.param("kernel", init, shape, num.params)
        bias = None
        if c.use_bias:
            bias_shape = shape[1:] if self.to_heads else (h,)
            bias = self.param("bias", zeros_init(bias_axes), bias_shape, num.params).reshape(-1)
            bias = bias.astype(num.dtype) if self.add_bias else None
        matrix = kernel.reshape((h, n * d) if self.to_heads else (n * d, h)).astype(num.dtype)
        return matrix, bias

    def __call__(self, x: Array) -> Array | tuple[Array, Array | None]:
        c, num = self.config, self.numerics
        n, d, h = c.num_attention_heads, c.head_dim, c.hidden_size
        k2, bias = self.weights()
        deferred, bias = (bias, None) if self.defer_bias else (None, bias)
        # The product as a plain 2-D matmul on reshaped views (free bitcasts): written as
        # a 3-D einsum, XLA's CPU backend copies every kernel into transposed layouts for
        # the backward pass (~4% of a BERT-Base step).
        lead = x.shape[: x.ndim - (1 if self.to_heads else 2)]
        x2 = x.reshape(-1, h if self.to_heads else n * d).astype(num.dtype)
        # The bias too is added to the 2-D product: its gradient is then a column sum of the
        # 2-D gradient the kernel gradient uses, not of one more transposed copy.
        y = ops.dense(x2, k2, bias, num.weight_grad(*k2.shape), num.bias_grad_form)
        y = y.reshape(*lead, n, d) if self.to_heads else y.reshape(*lead, h)
        return (y, deferred) if self.defer_bias else y


def _stacked_qkv(
    c: BertConfig, num: Numerics, x: Array, projections: list[_HeadsDense], add_bias: bool = True
) -> tuple[Array, Array | None]:
    """The key, value and query projections of [B, S, H] ``x`` as one product [B, S, N, 3,
    D] (slots `triton_attention.KEY`, ``VALUE``, ``QUERY``; ``projections`` in that order):
    the kernels stacked within each head, ``[H, N, 3, D]``, multiplied as one ``[H, 3 N D]``
    matrix (the heads its major axis, so it shards over them as the three kernels do).
    One matmul forward and two backward replace three and six, and the three input
    gradients come as one (not summed by whatever reads them: a pre-LN LayerNorm's
    backward, twice). Used where the Triton kernel takes the product whole
    (`attention.attend_stacked`: it reads the three in place, adds their biases, rotates
    inside and writes their gradients into one) and where queries and keys are rotated
    (the rotation reads them out and writes their gradients in passes it makes anyway).
    Elsewhere the slices and the gathered gradient would be copies of their own, costing
    what the shared matmul saves (bench/RESULTS.md). Returns (the product, with the
    biases where ``add_bias``; the biases [N, 3, D] left for the kernel, or None). A key
    whose bias is left out (without rotation) has zeros in its slot."""
    h, n, d = c.hidden_size, c.num_attention_heads, c.head_dim
    kernels, biases = zip(*(p.weights() for p in projections), strict=True)
    kernel = jnp.stack([w.reshape(h, n, d) for w in kernels], axis=2)  # [H, N, 3, D]
    bias = None
    if any(b is not None for b in biases):
        zeros = jnp.zeros((n * d,), num.dtype)
        bias = jnp.stack([(zeros if b is None else b).reshape(n, d) for b in biases], axis=1)  # [N, 3, D]
    x2 = x.reshape(-1, h).astype(num.dtype)
    added = None if bias is None or not add_bias else bias.reshape(-1)
    y = ops.dense(x2, kernel.reshape(h, -1), added, num.weight_grad(h, 3 * n * d), num.bias_grad_form)
    y = y.reshape(*x.shape[:-1], n, 3, d)
    y = nn.with_logical_constraint(
        y, ("activation_batch", "activation_length", "activation_heads", None, "activation_kv")
    )
    return y, None if add_bias else bias


def as_mask(mask: AttentionMask | Array, x: Array) -> AttentionMask:
    """An `AttentionMask`; a plain additive bias array (the encoder's older interface,
    broadcastable to [B, N, S, S]) becomes one that sees every key plus that bias, which
    adds it to the scores exactly as before."""
    if isinstance(mask, AttentionMask):
        return mask
    return AttentionMask(jnp.ones(x.shape[:2], jnp.int32), extra_bias=mask)


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention under an `AttentionMask` (padding,
    packed rows, causal, a local window, ALiBi); `rope`, the (sin, cos) tables of
    `layers.rotary_tables`, rotates queries and keys."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self,
        x: Array,
        mask: AttentionMask | Array,
        deterministic: bool,
        rope: tuple[Array, Array] | None = None,
        defer_bias: bool = False,
    ) -> Array | tuple[Array, Array | None]:
        """[B, S, H] → [B, S, H]; ``defer_bias``: (the output projection without its bias,
        that bias), for `residual_norm` to add."""
        c, num = self.config, self.numerics
        mask = as_mask(mask, x)
        rate = c.attention_probs_dropout_prob
        common = dict(
            dropout_rate=0.0 if deterministic else rate,
            dropout_seeds=(lambda: dropout(num, rate).seeds())
            if num.dropout_rng in KERNEL_DROPOUT_RNGS
            else None,
            paired_dropout=num.dropout_rng == "hash16",
        )
        # Initialisation needs shapes only: the XLA path (no kernel choice, no warning line).
        kernel = "xla" if self.is_initializing() else num.attention_kernel
        key = _HeadsDense(c, num, to_heads=True, name="key", add_bias=rope is not None)
        query, value = (_HeadsDense(c, num, to_heads=True, name=name) for name in ("query", "value"))
        stacked = attention.takes_stacked(
            kernel,
            mask,
            c.head_dim,
            common["dropout_rate"],
            num.dtype,
            common["dropout_seeds"] is not None,
            rotary=rope is not None,
        )
        if stacked:
            qkv, bias = _stacked_qkv(c, num, x, [key, value, query], add_bias=False)
            qkv = checkpoint_name(qkv, "attention_qkv")
            return self._output(attention.attend_stacked(qkv, bias, rope, mask, kernel, **common), defer_bias)
        if rope is None:
            q, k, v = query(x), key(x), value(x)
        else:
            qkv, _ = _stacked_qkv(c, num, x, [key, value, query])  # [B, S, N, 3, D]
            slots = (triton_attention.KEY, triton_attention.VALUE, triton_attention.QUERY)
            k, v, q = (qkv[..., i, :] for i in slots)
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        q = nn.with_logical_constraint(
            q, ("activation_batch", "activation_length", "activation_heads", "activation_kv")
        )
        q, k, v = (checkpoint_name(t, "attention_qkv") for t in (q, k, v))
        ctx = attention.attend(
            q,
            k,
            v,
            mask,
            kernel,
            dropout_fn=lambda p: dropout(num, rate)(p, deterministic),
            dtype=num.dtype,
            **common,
        )  # [B, S, N, D]
        return self._output(ctx, defer_bias)

    def _output(self, ctx: Array, defer_bias: bool) -> Array | tuple[Array, Array | None]:
        """The output projection of the context [B, S, N, D]."""
        ctx = checkpoint_name(ctx, "attention_context")
        return _HeadsDense(self.config, self.numerics, to_heads=False, defer_bias=defer_bias, name="output")(
            ctx
        )  # [B, S, H]
