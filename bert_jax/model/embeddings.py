"""The embedding layer of the encoder (Devlin et al., 2019, §3, Figure 2): word + learned
position + segment (token type) embeddings, LayerNorm, dropout.

The switches of `BertConfig` change what is added before the LayerNorm: other
`position_embedding_type`s ("sinusoidal" adds fixed sinusoids times one learned scalar,
``position_scale``; "rotary" and "alibi" add nothing here, they act inside attention), and
``type_vocab_size=0`` leaves out the segment embedding (ModernBERT, Warner et al., 2024,
whose embeddings are ``tok_embeddings`` → LayerNorm only).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model.config import BertConfig
from bert_jax.model.layers import dropout, layer_norm, normal_init, sinusoid_table
from bert_jax.model.numerics import DEFAULT, Numerics

Array = jax.Array


def lookup(table: Array, ids: Array, dtype: jnp.dtype) -> Array:
    """Rows `ids` of `table`, cast to `dtype` after the gather (`nn.Embed` casts the table
    first). The gradient is then a scatter-add in the parameters' dtype: in bfloat16 the
    word table's scatter-add took half of BERT-Base's step on an H200 (bench/step_profile.py)."""
    return jnp.take(table, ids, axis=0).astype(dtype)


class BertEmbeddings(nn.Module):
    """Word (+ learned absolute position) (+ segment) embeddings → LayerNorm → dropout."""

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
        if c.type_vocab_size:
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
        dtype = self.numerics.dtype
        x = lookup(self.word_embeddings.embedding, input_ids, dtype)  # [B, S, H]
        if self.config.type_vocab_size:
            x = x + lookup(self.token_type_embeddings.embedding, token_type_ids, dtype)
        kind = self.config.position_embedding_type
        if kind == "absolute":
            x = x + lookup(self.position_embeddings.embedding, position_ids, dtype)
        elif kind == "sinusoidal":
            table = sinusoid_table(position_ids, self.config.hidden_size)
            x = x + (self.position_scale * table).astype(x.dtype)
        x = self.layer_norm(x)
        x = self.dropout(x, deterministic=deterministic)
        return nn.with_logical_constraint(x, ("activation_batch", "activation_length", "activation_embed"))

    def word_table(self) -> Array:
        """The word-embedding table [V, H] as stored (the MLM decoder is tied to it)."""
        return self.word_embeddings.embedding
