"""The sentence-level representation the encoder hands to its classification heads
(`BertConfig.classifier_pooling`).

- "bert": the paper's pooler (Devlin et al., 2019, §3, and the original ``modeling.py``):
  dense + tanh on the [CLS] vector.
- "cls" / "mean": ModernBERT's classification head before its classifier (Warner et al.,
  2024; `transformers`' ``ModernBertForSequenceClassification``): the [CLS] vector, or the
  mean of the real tokens' vectors, → dense → activation → LayerNorm (``head.dense``,
  ``head.norm``). Its dropout and classifier are the task head's, as in the paper's.
  ModernBERT's token and span heads put the same prediction head before their classifier
  at every token (``ModernBertForTokenClassification``, ``...ForQuestionAnswering``):
  `HeadPooler` with ``every_token``.

Packed rows (several examples per row, numbered in ``input_mask``) pool each example at
its [CLS] position ``positions`` [B, K] (mean: over the tokens of that example's number).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model.config import BertConfig
from bert_jax.model.layers import activation, dense, layer_norm
from bert_jax.model.numerics import DEFAULT, Numerics

Array = jax.Array


def gather(sequence_output: Array, positions: Array | None) -> Array:
    """[B, S, H] at [CLS] → [B, H], or at `positions` [B, K] → [B, K, H]."""
    if positions is None:
        return sequence_output[:, 0]
    return jnp.take_along_axis(sequence_output, positions[..., None].astype(jnp.int32), axis=1)


def masked_mean(sequence_output: Array, input_mask: Array, positions: Array | None) -> Array:
    """Mean over the real tokens of each row ([B, H]), or of each example of packed rows
    (the tokens numbered as the one at `positions` [B, K]: [B, K, H]), in float32."""
    x = sequence_output.astype(jnp.float32)
    if positions is None:
        w = (input_mask > 0).astype(jnp.float32)  # [B, S]
        return jnp.einsum("bs,bsh->bh", w, x) / jnp.maximum(w.sum(-1, keepdims=True), 1.0)
    number = jnp.take_along_axis(input_mask, positions.astype(jnp.int32), axis=1)  # [B, K]
    w = ((input_mask[:, None, :] == number[:, :, None]) & (input_mask[:, None, :] > 0)).astype(jnp.float32)
    return jnp.einsum("bks,bsh->bkh", w, x) / jnp.maximum(w.sum(-1, keepdims=True), 1.0)


class BertPooler(nn.Module):
    """Dense + tanh on the [CLS] position (or each of `positions` [B, K] of packed rows):
    the sentence-level representation, [B, H] (or [B, K, H])."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, sequence_output: Array, positions: Array | None = None, input_mask: Array | None = None
    ) -> Array:
        c = self.config
        cls = gather(sequence_output, positions)
        return jnp.tanh(dense(c, self.numerics, c.hidden_size, ("embed", "dense_out"), "dense")(cls))


class HeadPooler(nn.Module):
    """ModernBERT's pooling head: [CLS] or masked mean → dense → activation → LayerNorm;
    with `every_token`, the dense → activation → LayerNorm at every token ([B, S, H])."""

    config: BertConfig
    numerics: Numerics = DEFAULT
    every_token: bool = False

    @nn.compact
    def __call__(
        self, sequence_output: Array, positions: Array | None = None, input_mask: Array | None = None
    ) -> Array:
        c, num = self.config, self.numerics
        if self.every_token:
            pooled = sequence_output
        elif c.classifier_pooling == "mean":
            if input_mask is None:
                input_mask = jnp.ones(sequence_output.shape[:2], jnp.int32)
            pooled = masked_mean(sequence_output, input_mask, positions).astype(num.dtype)
        else:
            pooled = gather(sequence_output, positions)
        head_dense = dense(
            c, num, c.hidden_size, ("embed", "dense_out"), "dense", use_bias=c.use_bias, init="out"
        )
        h = head_dense(pooled)
        return layer_norm(c, num, "LayerNorm")(activation(c.hidden_act)(h))


def pooler(config: BertConfig, numerics: Numerics, every_token: bool = False) -> nn.Module:
    """The config's pooler, named ``pooler`` in the encoder (`BertConfig.classifier_pooling`);
    `every_token`: ModernBERT's prediction head at every token (`token_head`)."""
    if config.classifier_pooling == "bert":
        return BertPooler(config, numerics)
    return HeadPooler(config, numerics, every_token)


def token_head(config: BertConfig) -> bool:
    """Whether the token and span heads read each token through the pooler's prediction
    head (ModernBERT's pooling: `transformers`' ModernBERT token and span classes), rather
    than the last layer's output itself (the paper's)."""
    return config.classifier_pooling != "bert"
