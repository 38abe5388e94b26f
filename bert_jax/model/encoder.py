"""The BERT encoder (Devlin et al., 2019, §3 and Figure 2) as Flax linen modules.

Embeddings (word + learned position + segment, LayerNorm, dropout; `embeddings.py`) → N
post-LayerNorm Transformer layers (multi-head self-attention, GELU feed-forward of 4H;
`encoder_layer.py`, `self_attention.py`) → pooler (dense + tanh on [CLS]; `poolers.py`).
Heads live in `heads.py`, the dense/LayerNorm/dropout blocks in `layers.py`, looping or
scanning the layers in `layer_scan.py`.

The modern small-compute switches of `BertConfig` (all off by default) change the layer
but not the contract: pre-LayerNorm with a final LayerNorm (`pre_layer_norm`), a gated
feed-forward (`gated_ffn`, GeGLU), other positions in place of the learned table
(`position_embedding_type`: "rotary" on queries and keys, "sinusoidal" scaled fixed
sinusoids, "alibi" distance penalties on the scores), dense layers without biases
(`use_bias=False`). With the ModernBERT-family switches (Warner et al., 2024) the model is
`transformers`' ModernBERT exactly: no segment embedding (`type_vocab_size=0`), no
attention LayerNorm in layer 0, LayerNorms without bias, alternating global and local
(sliding-window) attention with a rotary base per kind, and its pooling head.

Attention goes through `attention.attend` under one `AttentionMask` built here (padding,
packed rows, causality, ALiBi as an extra bias; local layers add their window), with the
kernel the run's `Numerics.attention_kernel` chooses.

Every parameter carries logical axis names (`nn.with_logical_partitioning`) and large
activations carry logical constraints, so `sharding.py` decides where everything lives
from rules alone. How a run computes the model (dtypes, remat, the dense form, dropout
masks, the attention kernel) is its `Numerics` (``numerics``, beside ``config`` in every
module); softmax and LayerNorm statistics are computed in float32 whatever the compute dtype.

Shapes in comments: B batch, S sequence, H hidden, N heads, D head dim, F intermediate.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model.attention import AttentionMask, additive_bias
from bert_jax.model.config import BertConfig
from bert_jax.model.embeddings import BertEmbeddings
from bert_jax.model.encoder_layer import BertLayer
from bert_jax.model.layer_scan import Ropes, encoder_layers, stack_layers, unstack_layers
from bert_jax.model.layers import alibi_bias, layer_norm, rotary_tables
from bert_jax.model.numerics import DEFAULT, Numerics
from bert_jax.model.poolers import BertPooler, HeadPooler, pooler
from bert_jax.model.residual_norm import ResidualLayerNorm, chains_layers
from bert_jax.model.self_attention import BertSelfAttention

__all__ = [
    "BertEmbeddings",
    "BertEncoder",
    "BertLayer",
    "BertModel",
    "BertPooler",
    "BertSelfAttention",
    "HeadPooler",
    "attention_bias",
    "stack_layers",
    "unstack_layers",
]

Array = jax.Array


class BertEncoder(nn.Module):
    """The layers (`layer_scan.encoder_layers`: unrolled, or scanned with
    ``layer_loop="scan"``) and, for pre-LN models, the final LayerNorm. Returns the output
    [B, S, H] and, when asked, the embedding output followed by each layer's output (the
    last one normalised like the output)."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self,
        x: Array,
        mask: AttentionMask | Array,
        deterministic: bool,
        output_hidden_states: bool,
        ropes: Ropes = None,
    ) -> tuple[Array, tuple[Array, ...]]:
        c, num = self.config, self.numerics
        embedded = x
        plain = not (num.scanned or output_hidden_states or self.is_initializing())
        chained = chains_layers(c, num, x.shape, not deterministic, plain_loop=plain)
        x, outputs, pending = encoder_layers(
            c, num, x, mask, deterministic, output_hidden_states, ropes, chained
        )
        hidden_states = [embedded, *outputs] if output_hidden_states else []
        if pending is not None:  # the last layer's residual add and the final LayerNorm, one kernel pair
            x = ResidualLayerNorm(c, num, name="final_LayerNorm")(pending, None, x, 0.0, None)
        elif c.pre_layer_norm:
            x = layer_norm(c, num, "final_LayerNorm")(x)
            if hidden_states:
                hidden_states[-1] = x
        return x, tuple(hidden_states) if output_hidden_states else ()


def attention_bias(input_mask: Array, causal: bool, packed: bool) -> Array:
    """Additive float32 mask, 0 where attended, a large negative elsewhere: [B, 1, 1, S]
    (every query sees the row's tokens) or, for causal or packed rows, [B, 1, S, S]. Packed
    rows number their examples in `input_mask` (1, 2, ...; 0 = padding): a token sees only
    its own example's tokens. (The model itself passes the `AttentionMask`.)"""
    return additive_bias(AttentionMask(input_mask, packed=packed, causal=causal))


def rotary(config: BertConfig, position_ids: Array) -> Ropes:
    """The rotary (sin, cos) tables of the global and the local layers (`BertConfig.rotary_base`,
    `local_rotary_base`), or None without rotary positions."""
    if not config.rotary:
        return None
    tables = rotary_tables(position_ids, config.head_dim, config.rotary_base)
    if config.has_local_layers and config.local_rotary_base != config.rotary_base:
        return tables, rotary_tables(position_ids, config.head_dim, config.local_rotary_base)
    return tables, tables


class BertModel(nn.Module):
    """The bare encoder: returns (sequence_output, pooled_output, hidden_states).

    `input_mask` [B, S]: 1 for a token, 0 for padding, which ends a row (as the tokenizers
    write it: cuDNN's attention and a causal model's pooled output read rows that way).
    `hidden_states` is the embedding output followed by each layer's output (L+1 arrays)
    when `output_hidden_states=True`, else empty. The pooled output reads [CLS] (a causal
    model: the last real token, the only one that has seen the whole row); with
    `pool_every_token`, the pooler's prediction head at every token, [B, S, H]. With
    `cls_positions` [B, K] the rows are
    packed (several examples per row, numbered in `input_mask`, `position_ids` restarting
    at each): attention stays within each example and the pooled output is [B, K, H].
    """

    config: BertConfig
    numerics: Numerics = DEFAULT
    add_pooler: bool = True
    pool_every_token: bool = False  # ModernBERT's token and span heads (`poolers.token_head`)

    def setup(self) -> None:
        self.embeddings = BertEmbeddings(self.config, self.numerics)
        self.encoder = BertEncoder(self.config, self.numerics)
        if self.add_pooler:
            self.pooler = pooler(self.config, self.numerics, self.pool_every_token)

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
        extra = alibi_bias(position_ids, c.num_attention_heads) if c.alibi else None  # [B, N, S, S]
        mask = AttentionMask(
            input_mask, packed=cls_positions is not None, causal=c.causal_attention, extra_bias=extra
        )
        sequence_output, hidden_states = self.encoder(
            x, mask, deterministic, output_hidden_states, rotary(c, position_ids)
        )
        pooled = None
        if self.add_pooler and self.pool_every_token:
            pooled = self.pooler(sequence_output)
        elif self.add_pooler and self.config.causal_attention and cls_positions is None:
            # A left-to-right model's [CLS] sees only itself: read the sentence at its last
            # token, the one that has seen all of it (as GPT's classifier does).
            last = jnp.sum(input_mask > 0, axis=-1) - 1
            pooled = self.pooler(sequence_output, last[:, None], input_mask)[:, 0]
        elif self.add_pooler:
            pooled = self.pooler(sequence_output, cls_positions, input_mask)
        return sequence_output, pooled, hidden_states

    def word_table(self) -> Array:
        return self.embeddings.word_table()
