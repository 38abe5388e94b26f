"""Task heads on top of `BertModel` (Devlin et al., 2019, §3.1 pre-training, §4 fine-tuning).

Each model is a thin wrapper: the encoder under the name ``bert`` (so one pre-trained
``params["bert"]`` subtree initialises every task) plus one small output layer.

The masked-LM head is evaluated only at ``masked_lm_positions`` (as the original
``get_masked_lm_output``): with 15% of 128 tokens masked this is ~7x less work than
full-vocabulary logits at every position, which dominate the cost of a small BERT.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model import ops
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.layers import activation, dense, dropout, layer_norm, normal_init, zeros_init
from bert_jax.model.numerics import DEFAULT, Numerics
from bert_jax.model.poolers import token_head

Array = jax.Array


def gather_positions(sequence_output: Array, positions: Array) -> Array:
    """[B, S, H] gathered at [B, P] integer positions → [B, P, H]."""
    return jnp.take_along_axis(sequence_output, positions[..., None].astype(jnp.int32), axis=1)


class MaskedLMHead(nn.Module):
    """Dense + GELU + LayerNorm transform, decoder tied to the word embeddings, own bias
    (ModernBERT's ``head`` + ``decoder`` too). With ``tie_word_embeddings=False`` the
    decoder is its own [V, H] matrix, ``mlm/decoder``.

    Returns float32 logits [..., V]; given ``labels`` [...], the per-prediction
    cross-entropy and "label is the arg-max" instead, through
    `ops.masked_lm_cross_entropy` (the logits never leave it: pre-training's loss)."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, hidden: Array, bert: BertModel, labels: Array | None = None
    ) -> Array | tuple[Array, Array]:
        c, num = self.config, self.numerics
        transform = dense(
            c, num, c.hidden_size, ("embed", "dense_out"), "transform", "copy_x", c.use_bias, "out"
        )
        h = transform(hidden)
        h = activation(c.hidden_act)(h)
        h = layer_norm(c, num, "transform_LayerNorm")(h).astype(num.dtype)
        bias = self.param("bias", zeros_init(("vocab",)), (c.padded_vocab_size,), num.params)
        if c.tie_word_embeddings:
            table = bert.word_table()
        else:
            shape = (c.padded_vocab_size, c.hidden_size)
            table = self.param("decoder", normal_init(c, ("vocab", "embed"), "out"), shape, num.params)
        how = num.weight_grad(*table.shape)
        table = table.astype(num.dtype)
        if labels is not None:
            return ops.masked_lm_cross_entropy(
                h, table, bias, labels, c.vocab_size, how, _vocab_sharded, num.bias_grad_form
            )
        return _vocab_sharded(mask_padded_vocab(ops.tied_logits(h, table, bias, how, num.bias_grad_form), c))


def _vocab_sharded(logits: Array) -> Array:
    return nn.with_logical_constraint(logits, ("activation_batch", "activation_length", "activation_vocab"))


def mask_padded_vocab(logits: Array, config: BertConfig) -> Array:
    """The logits of padding rows (ids >= vocab_size) set to the float32 minimum: they get
    no probability, are never the arg-max and pass no gradient. A no-op without padding."""
    return ops.mask_padding_columns(logits, config.vocab_size)


class BertForPreTraining(nn.Module):
    """Encoder + masked-LM head (at the masked positions) + next-sentence head.

    Returns ``(mlm_logits [B, P, V], nsp_logits [B, 2])``, V the padded vocabulary
    (`BertConfig.padded_vocab_size`; padding logits masked). With ``masked_lm_positions``
    omitted the MLM logits cover every position (for inspection, not for training). Given
    ``masked_lm_ids`` [B, P] (training), ``mlm_logits`` is replaced by the per-prediction
    cross-entropy and "label is the arg-max", each [B, P] (`MaskedLMHead`).
    """

    config: BertConfig
    numerics: Numerics = DEFAULT

    def setup(self) -> None:
        self.bert = BertModel(self.config, self.numerics)
        self.mlm = MaskedLMHead(self.config, self.numerics)
        self.nsp = dense(self.config, self.numerics, 2, ("dense_out", "classes"), "nsp")

    def __call__(
        self,
        input_ids: Array,
        input_mask: Array,
        segment_ids: Array,
        masked_lm_positions: Array | None = None,
        *,
        masked_lm_ids: Array | None = None,
        deterministic: bool = True,
    ) -> tuple[Array | tuple[Array, Array], Array]:
        sequence_output, pooled, _ = self.bert(
            input_ids, input_mask, segment_ids, deterministic=deterministic
        )
        if masked_lm_positions is not None:
            sequence_output = gather_positions(sequence_output, masked_lm_positions)
        mlm = self.mlm(sequence_output, self.bert, masked_lm_ids)
        return mlm, self.nsp(pooled).astype(jnp.float32)


class BertForMaskedLM(nn.Module):
    """Encoder + masked-LM head only (`transformers`' ModernBertForMaskedLM; a BERT's
    ``cls.predictions``): MLM logits [B, P, V] at ``masked_lm_positions``, or [B, S, V] at
    every position without them. Reads ``bert`` and ``mlm`` of pre-training params."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    def setup(self) -> None:
        self.bert = BertModel(self.config, self.numerics, add_pooler=False)
        self.mlm = MaskedLMHead(self.config, self.numerics)

    def __call__(
        self,
        input_ids: Array,
        input_mask: Array | None = None,
        segment_ids: Array | None = None,
        masked_lm_positions: Array | None = None,
        *,
        deterministic: bool = True,
    ) -> Array:
        sequence_output, _, _ = self.bert(input_ids, input_mask, segment_ids, deterministic=deterministic)
        if masked_lm_positions is not None:
            sequence_output = gather_positions(sequence_output, masked_lm_positions)
        return self.mlm(sequence_output, self.bert)


class BertForSequenceClassification(nn.Module):
    """Pooled [CLS] → dropout → dense: [B, num_labels]. ``num_labels == 1`` is regression
    (STS-B). With ModernBERT's pooling (`BertConfig.classifier_pooling` "cls" or "mean")
    this is `transformers`' ModernBertForSequenceClassification: head → dropout → classifier.
    Packed rows (`bert_jax.finetuning.packing`: `position_ids`, `cls_positions` [B, K]) give
    [B, K, num_labels], one per example slot."""

    config: BertConfig
    num_labels: int
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self,
        input_ids: Array,
        input_mask: Array,
        segment_ids: Array,
        position_ids: Array | None = None,
        cls_positions: Array | None = None,
        *,
        deterministic: bool = True,
    ) -> Array:
        _, pooled, _ = BertModel(self.config, self.numerics, name="bert")(
            input_ids,
            input_mask,
            segment_ids,
            position_ids,
            deterministic=deterministic,
            cls_positions=cls_positions,
        )
        pooled = dropout(self.numerics, self.config.hidden_dropout_prob)(pooled, deterministic)
        axes = ("dense_out", "classes")
        classifier = dense(self.config, self.numerics, self.num_labels, axes, "classifier", init="final_out")
        logits = classifier(pooled)
        return logits.astype(jnp.float32)


def _token_states(config, numerics, input_ids, input_mask, segment_ids, deterministic) -> Array:
    """What the token and span heads classify, [B, S, H]: the last layer's output (the
    paper's), or with ModernBERT's pooling its prediction head at every token
    (`poolers.token_head`: `transformers`' ModernBertForTokenClassification and
    ModernBertForQuestionAnswering), named ``bert/pooler`` as the sentence head's."""
    every = token_head(config)
    seq, pooled, _ = BertModel(config, numerics, add_pooler=every, pool_every_token=every, name="bert")(
        input_ids, input_mask, segment_ids, deterministic=deterministic
    )
    return pooled if every else seq


class BertForQuestionAnswering(nn.Module):
    """Span prediction (SQuAD): start and end logits at every token, each [B, S] (with
    ModernBERT's pooling, through its prediction head first: `_token_states`)."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, input_ids: Array, input_mask: Array, segment_ids: Array, *, deterministic: bool = True
    ) -> tuple[Array, Array]:
        seq = _token_states(self.config, self.numerics, input_ids, input_mask, segment_ids, deterministic)
        qa = dense(self.config, self.numerics, 2, ("embed", "classes"), "qa_outputs", init="final_out")
        logits = qa(seq).astype(jnp.float32)
        return logits[..., 0], logits[..., 1]


class BertForTokenClassification(nn.Module):
    """Per-token tags (NER): [B, S, num_labels] (with ModernBERT's pooling, through its
    prediction head first: `_token_states`)."""

    config: BertConfig
    num_labels: int
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, input_ids: Array, input_mask: Array, segment_ids: Array, *, deterministic: bool = True
    ) -> Array:
        seq = _token_states(self.config, self.numerics, input_ids, input_mask, segment_ids, deterministic)
        seq = dropout(self.numerics, self.config.hidden_dropout_prob)(seq, deterministic)
        classifier = dense(
            self.config, self.numerics, self.num_labels, ("embed", "classes"), "classifier", init="final_out"
        )
        logits = classifier(seq)
        return logits.astype(jnp.float32)


class BertForMultipleChoice(nn.Module):
    """SWAG: each of C choices encoded as its own sequence; one score each → [B, C]."""

    config: BertConfig
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, input_ids: Array, input_mask: Array, segment_ids: Array, *, deterministic: bool = True
    ) -> Array:
        b, c, s = input_ids.shape
        flat = lambda x: x.reshape(b * c, s)
        _, pooled, _ = BertModel(self.config, self.numerics, name="bert")(
            flat(input_ids), flat(input_mask), flat(segment_ids), deterministic=deterministic
        )
        pooled = dropout(self.numerics, self.config.hidden_dropout_prob)(pooled, deterministic)
        classifier = dense(
            self.config, self.numerics, 1, ("dense_out", "classes"), "classifier", init="final_out"
        )
        logits = classifier(pooled)
        return logits.astype(jnp.float32).reshape(b, c)
