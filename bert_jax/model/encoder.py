"""The BERT encoder (Devlin et al., 2019, §3 and Figure 2) as Flax linen modules.

Embeddings (word + learned position + segment, LayerNorm, dropout) → N post-LayerNorm
Transformer layers (multi-head self-attention, GELU feed-forward of 4H) → pooler (dense +
tanh on [CLS]). Heads live in `heads.py`, the dense/LayerNorm/dropout blocks in `layers.py`.

The modern small-compute switches of `BertConfig` (all off by default) change the layer
but not the contract: pre-LayerNorm with a final LayerNorm (`pre_layer_norm`), a gated
feed-forward (`gated_ffn`, GeGLU), other positions in place of the learned table
(`position_embedding_type`: "rotary" on queries and keys, "sinusoidal" scaled fixed
sinusoids, "alibi" distance penalties on the scores), dense layers without biases
(`use_bias=False`).

Every parameter carries logical axis names (`nn.with_logical_partitioning`) and large
activations carry logical constraints, so `sharding.py` decides where everything lives
from rules alone. How a run computes the model (dtypes, remat, the dense form, dropout
masks) is its `Numerics` (``numerics``, beside ``config`` in every module); softmax and
LayerNorm statistics are computed in float32 whatever the compute dtype.

Shapes in comments: B batch, S sequence, H hidden, N heads, D head dim, F intermediate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model import ops
from bert_jax.model.config import BertConfig
from bert_jax.model.layers import (
    activation,
    alibi_bias,
    apply_rotary,
    dense,
    dropout,
    layer_norm,
    normal_init,
    rotary_tables,
    sinusoid_table,
    zeros_init,
)
from bert_jax.model.numerics import DEFAULT, Numerics

Array = jax.Array


class BertEmbeddings(nn.Module):
    """Word + learned absolute position + segment (token type) embeddings. Other
    `position_embedding_type`s: "sinusoidal" adds fixed sinusoids times one learned
    scalar (``position_scale``) in place of the table; "rotary" and "alibi" add nothing
    here (they act inside attention)."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    def setup(self) -> None:
        c, num = self.config, self.numerics
        self.word_embeddings = nn.Embed(
            c.padded_vocab_size,  # rows past vocab_size: padding (`BertConfig.vocab_pad_multiple`)
            c.hidden_size,
            dtype=num.dtype,
            param_dtype=num.params,
            embedding_init=normal_init(c, ("vocab", "embed")),
        )
        if c.position_embedding_type == "sinusoidal":
            self.position_scale = self.param(
                "position_scale",
                nn.with_logical_partitioning(nn.initializers.constant(c.hidden_size**-0.5), ()),
                (),
                num.params,
            )
        if c.position_embedding_type == "absolute":
            self.position_embeddings = nn.Embed(
                c.max_position_embeddings,
                c.hidden_size,
                dtype=num.dtype,
                param_dtype=num.params,
                embedding_init=normal_init(c, ("position", "embed")),
            )
        self.token_type_embeddings = nn.Embed(
            c.type_vocab_size,
            c.hidden_size,
            dtype=num.dtype,
            param_dtype=num.params,
            embedding_init=normal_init(c, ("type_vocab", "embed")),
        )
        self.layer_norm = layer_norm(c, num, "LayerNorm")
        self.dropout = dropout(num, c.hidden_dropout_prob)

    def __call__(
        self, input_ids: Array, token_type_ids: Array, position_ids: Array, deterministic: bool
    ) -> Array:
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)  # [B, S, H]
        kind = self.config.position_embedding_type
        if kind == "absolute":
            x = x + self.position_embeddings(position_ids)
        elif kind == "sinusoidal":
            table = sinusoid_table(position_ids, self.config.hidden_size)
            x = x + (self.position_scale * table).astype(x.dtype)
        x = self.layer_norm(x)
        x = self.dropout(x, deterministic=deterministic)
        return nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_embed"))

    def attend(self, x: Array, bias: Array) -> Array:
        """Float32 logits against the word-embedding table (the MLM decoder is tied to it)
        plus `bias`, through `ops.tied_logits` (its gradient is cheaper than autodiff's)."""
        table = self.word_embeddings.embedding
        return ops.tied_logits(x, table.astype(x.dtype), bias, self.numerics.weight_grad(*table.shape))


class _HeadsDense(nn.Module):
    """A dense layer whose kernel is stored in its 3-D shape, to/from the head axes.

    `nn.DenseGeneral` initialises a flattened 2-D kernel and reshapes it, which applies
    the 3-name logical-axis constraint to a 2-D array; declaring the final shape avoids
    that. ``to_heads``: [.., H] → [.., N, D] (kernel [H, N, D]); else [.., N, D] → [.., H].
    """

    config: BertConfig
    numerics: Numerics
    to_heads: bool

    @nn.compact
    def __call__(self, x: Array) -> Array:
        c, num = self.config, self.numerics
        n, d, h = c.num_attention_heads, c.head_dim, c.hidden_size
        dt = num.dtype
        if self.to_heads:
            shape, axes, bias_axes = (h, n, d), ("embed", "heads", "kv"), ("heads", "kv")
        else:
            shape, axes, bias_axes = (n, d, h), ("heads", "kv", "embed"), ("embed",)
        kernel = self.param("kernel", normal_init(c, axes), shape, num.params)
        bias = None
        if c.use_bias:
            bias_shape = shape[1:] if self.to_heads else (h,)
            bias = self.param("bias", zeros_init(bias_axes), bias_shape, num.params).reshape(-1).astype(dt)
        # The product as a plain 2-D matmul on reshaped views (free bitcasts): written as
        # a 3-D einsum, XLA's CPU backend copies every kernel into transposed layouts for
        # the backward pass (~4% of a BERT-Base step).
        lead = x.shape[: x.ndim - (1 if self.to_heads else 2)]
        x2 = x.reshape(-1, h if self.to_heads else n * d).astype(dt)
        k2 = kernel.reshape((h, n * d) if self.to_heads else (n * d, h)).astype(dt)
        # The bias too is added to the 2-D product: its gradient is then a mat-vec on the
        # 2-D gradient the kernel gradient uses, not on one more transposed copy.
        y = ops.dense(x2, k2, bias, num.weight_grad(*k2.shape))
        return y.reshape(*lead, n, d) if self.to_heads else y.reshape(*lead, h)


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention with a padding mask.

    Query/key/value kernels are stored as [H, N, D] (and the output as [N, D, H]) so the
    head axis can be sharded over the tensor mesh axis without reshapes. `rope`, the
    (sin, cos) tables of `layers.rotary_tables`, rotates queries and keys.
    """

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, x: Array, attention_bias: Array, deterministic: bool, rope: tuple[Array, Array] | None = None
    ) -> Array:
        c, num = self.config, self.numerics
        dt = num.dtype
        d = c.head_dim
        q = _HeadsDense(c, num, to_heads=True, name="query")(x)  # [B, S, N, D]
        k = _HeadsDense(c, num, to_heads=True, name="key")(x)
        v = _HeadsDense(c, num, to_heads=True, name="value")(x)
        if rope is not None:
            q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        q = nn.with_logical_constraint(
            q, ("activation_batch", "activation_length", "activation_heads", "activation_kv")
        )
        q = q / jnp.sqrt(d).astype(q.dtype)
        scores = jnp.einsum("bqnd,bknd->bnqk", q, k, preferred_element_type=jnp.float32)
        scores = scores + attention_bias  # [B, N, S, S] + [B, 1|N, 1|S, S]
        probs = jax.nn.softmax(scores, axis=-1).astype(dt)
        probs = dropout(num, c.attention_probs_dropout_prob)(probs, deterministic)
        ctx = jnp.einsum("bnqk,bknd->bqnd", probs, v)  # [B, S, N, D]
        return _HeadsDense(c, num, to_heads=False, name="output")(ctx)  # [B, S, H]


class BertLayer(nn.Module):
    """One Transformer encoder layer: post-LayerNorm (the paper's), or pre-LayerNorm with
    ``config.pre_layer_norm``. Parameter names are the same in both (each LayerNorm named
    by the sub-layer it belongs to)."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, x: Array, attention_bias: Array, deterministic: bool, rope: tuple[Array, Array] | None = None
    ) -> Array:
        c, num = self.config, self.numerics
        attention = BertSelfAttention(c, num, name="attention")
        attention_norm = layer_norm(c, num, "attention_LayerNorm")
        output_norm = layer_norm(c, num, "output_LayerNorm")
        if c.pre_layer_norm:  # x + f(LN(x)): the residual stream is never normalised
            attn = attention(attention_norm(x), attention_bias, deterministic, rope)
            x = x + dropout(num, c.hidden_dropout_prob)(attn, deterministic)
            h = dropout(num, c.hidden_dropout_prob)(self.feed_forward(output_norm(x)), deterministic)
            x = x + h
        else:  # LN(x + f(x))
            attn = attention(x, attention_bias, deterministic, rope)
            attn = dropout(num, c.hidden_dropout_prob)(attn, deterministic)
            x = attention_norm(x + attn)
            h = dropout(num, c.hidden_dropout_prob)(self.feed_forward(x), deterministic)
            x = output_norm(x + h)
        return nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_embed"))

    def feed_forward(self, x: Array) -> Array:
        """[B, S, H] → [B, S, H]: act(x W_in) W_out, or act(x W_gate) * (x W_in) W_out
        (`gated_ffn`: GeGLU with gelu)."""
        c, num = self.config, self.numerics
        h = dense(c, num, c.intermediate_size, ("embed", "mlp"), "intermediate", use_bias=c.use_bias)(
            x
        )  # [B, S, F]
        h = nn.with_logical_constraint(h, ("activation_batch", "activation_length", "activation_mlp"))
        if c.gated_ffn:
            gate = dense(
                c, num, c.intermediate_size, ("embed", "mlp"), "intermediate_gate", use_bias=c.use_bias
            )
            h = activation(c.hidden_act)(gate(x)) * h
        else:
            h = activation(c.hidden_act)(h)
        return dense(c, num, c.hidden_size, ("mlp", "embed"), "output", copy="copy_g", use_bias=c.use_bias)(h)


def _remat(policy: str) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Wraps a layer class in `nn.remat` per the run's policy (or not at all)."""
    if policy == "none":
        return lambda cls: cls
    policies = {
        "full": jax.checkpoint_policies.nothing_saveable,
        "dots": jax.checkpoint_policies.checkpoint_dots,
        "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    }
    # Argument 3 (deterministic) is a Python bool: static.
    return lambda cls: nn.remat(cls, policy=policies[policy], static_argnums=(3,))


class _ScannedLayer(nn.Module):
    """BertLayer in the (carry, output) form `nn.scan` needs."""

    config: BertConfig
    numerics: Numerics
    output_hidden_states: bool

    @nn.compact
    def __call__(
        self, x: Array, attention_bias: Array, deterministic: bool, rope: tuple[Array, Array] | None
    ) -> tuple[Array, Any]:
        layer_cls = _remat(self.numerics.remat_policy)(BertLayer)
        x = layer_cls(self.config, self.numerics, name="layer")(x, attention_bias, deterministic, rope)
        return x, (x if self.output_hidden_states else None)


class BertEncoder(nn.Module):
    """The layers (looped, or scanned with ``scan_layers``) and, for pre-LN models, the
    final LayerNorm. Returns the output [B, S, H] and, when asked, the embedding output
    followed by each layer's output (the last one normalised like the output)."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self,
        x: Array,
        attention_bias: Array,
        deterministic: bool,
        output_hidden_states: bool,
        rope: tuple[Array, Array] | None = None,
    ) -> tuple[Array, tuple[Array, ...]]:
        c, num = self.config, self.numerics
        if c.scan_layers:
            scanned = nn.scan(
                _ScannedLayer,
                variable_axes={"params": 0},
                split_rngs={"params": True, "dropout": True},
                in_axes=(nn.broadcast, nn.broadcast, nn.broadcast),
                length=c.num_hidden_layers,
                metadata_params={nn.PARTITION_NAME: "layers"},
            )
            embedded = x
            x, ys = scanned(c, num, output_hidden_states, name="layers")(
                x, attention_bias, deterministic, rope
            )
            hidden_states = (
                [embedded, *(ys[i] for i in range(c.num_hidden_layers))] if output_hidden_states else []
            )
        else:
            layer_cls = _remat(num.remat_policy)(BertLayer)
            hidden_states = [x]
            for i in range(c.num_hidden_layers):
                x = layer_cls(c, num, name=f"layer_{i}")(x, attention_bias, deterministic, rope)
                hidden_states.append(x)
        if c.pre_layer_norm:
            x = layer_norm(c, num, "final_LayerNorm")(x)
            if hidden_states:
                hidden_states[-1] = x
        return x, tuple(hidden_states) if output_hidden_states else ()


def unstack_layers(params: Any, num_layers: int) -> Any:
    """Scanned encoder params (``encoder/layers/layer/...`` with a leading [L] axis) →
    per-layer names (``encoder/layer_i/...``). Anything else passes through unchanged."""
    if "encoder" in params and "layers" in params["encoder"]:
        stacked = params["encoder"]["layers"]["layer"]
        rest = {k: v for k, v in params["encoder"].items() if k != "layers"}  # final_LayerNorm
        encoder = {f"layer_{i}": jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(num_layers)}
        return {**params, "encoder": {**encoder, **rest}}
    return {k: unstack_layers(v, num_layers) if isinstance(v, dict) else v for k, v in params.items()}


def stack_layers(params: Any, num_layers: int) -> Any:
    """Inverse of `unstack_layers`: per-layer encoder params → the scanned layout."""
    if "encoder" in params and "layer_0" in params["encoder"]:
        layers = [params["encoder"][f"layer_{i}"] for i in range(num_layers)]
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *layers)
        rest = {k: v for k, v in params["encoder"].items() if not k.startswith("layer_")}
        return {**params, "encoder": {"layers": {"layer": stacked}, **rest}}
    return {k: stack_layers(v, num_layers) if isinstance(v, dict) else v for k, v in params.items()}


class BertPooler(nn.Module):
    """Dense + tanh on the [CLS] position (or each of `positions` [B, K] of packed rows):
    the sentence-level representation, [B, H] (or [B, K, H])."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(self, sequence_output: Array, positions: Array | None = None) -> Array:
        if positions is None:
            cls = sequence_output[:, 0]
        else:
            cls = jnp.take_along_axis(sequence_output, positions[..., None].astype(jnp.int32), axis=1)
        c = self.config
        return jnp.tanh(dense(c, self.numerics, c.hidden_size, ("embed", "dense_out"), "dense")(cls))


def attention_bias(input_mask: Array, causal: bool, packed: bool) -> Array:
    """Additive float32 mask, 0 where attended, a large negative elsewhere: [B, 1, 1, S]
    (every query sees the row's tokens) or, for causal or packed rows, [B, 1, S, S]. Packed
    rows number their examples in `input_mask` (1, 2, ...; 0 = padding): a token sees only
    its own example's tokens."""
    visible = input_mask[:, None, None, :] > 0  # [B, 1, 1, S]
    if packed:
        query = input_mask[:, None, :, None]
        visible = visible & ((query == input_mask[:, None, None, :]) | (query == 0))
    if causal:  # position i sees positions <= i only
        s = input_mask.shape[-1]
        visible = visible & (jnp.arange(s)[None, :] <= jnp.arange(s)[:, None])
    return jnp.where(visible, 0.0, jnp.finfo(jnp.float32).min).astype(jnp.float32)


class BertModel(nn.Module):
    """The bare encoder: returns (sequence_output, pooled_output, hidden_states).

    `hidden_states` is the embedding output followed by each layer's output (L+1 arrays)
    when `output_hidden_states=True`, else empty. The pooled output reads [CLS] (a causal
    model: the last real token, the only one that has seen the whole row). With
    `cls_positions` [B, K] the rows are
    packed (several examples per row, numbered in `input_mask`, `position_ids` restarting
    at each): attention stays within each example and the pooled output is [B, K, H].
    """

    config: BertConfig
    numerics: Numerics = DEFAULT
    add_pooler: bool = True

    def setup(self) -> None:
        self.embeddings = BertEmbeddings(self.config, self.numerics)
        self.encoder = BertEncoder(self.config, self.numerics)
        if self.add_pooler:
            self.pooler = BertPooler(self.config, self.numerics)

    def __call__(
        self,
        input_ids: Array,
        input_mask: Array | None = None,
        segment_ids: Array | None = None,
        position_ids: Array | None = None,
        *,
        deterministic: bool = True,
        output_hidden_states: bool = False,
        cls_positions: Array | None = None,
    ) -> tuple[Array, Array | None, tuple[Array, ...]]:
        if input_mask is None:
            input_mask = jnp.ones_like(input_ids)
        if segment_ids is None:
            segment_ids = jnp.zeros_like(input_ids)
        if position_ids is None:
            position_ids = jnp.broadcast_to(jnp.arange(input_ids.shape[-1]), input_ids.shape)
        c = self.config
        x = self.embeddings(input_ids, segment_ids, position_ids, deterministic)
        bias = attention_bias(input_mask, c.causal_attention, packed=cls_positions is not None)
        if c.alibi:  # [B, 1|N, 1|S, S] + [B, N, S, S]
            bias = bias + alibi_bias(position_ids, c.num_attention_heads)
        rope = rotary_tables(position_ids, c.head_dim, c.rotary_base) if c.rotary else None
        sequence_output, hidden_states = self.encoder(x, bias, deterministic, output_hidden_states, rope)
        pooled = None
        if self.add_pooler and self.config.causal_attention and cls_positions is None:
            # A left-to-right model's [CLS] sees only itself: read the sentence at its last
            # token, the one that has seen all of it (as GPT's classifier does).
            last = jnp.sum(input_mask > 0, axis=-1) - 1
            pooled = self.pooler(sequence_output, last[:, None])[:, 0]
        elif self.add_pooler:
            pooled = self.pooler(sequence_output, cls_positions)
        return sequence_output, pooled, hidden_states

    def attend(self, x: Array, bias: Array) -> Array:
        return self.embeddings.attend(x, bias)
