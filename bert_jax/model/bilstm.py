"""BiLSTMs on top of BERT: the "+ BiLSTM" row of Table 5 and the feature-based NER model
of Table 7 (Devlin et al., 2019, §5.1 and §5.3).

- `BiLSTM`: stacked bidirectional LSTMs over the real tokens of each row (padding is
  neither read nor written: each direction runs over the row's own length).
- `BertBiLSTMFor*`: the heads of `bert_jax.model.heads` with a randomly initialised BiLSTM
  between the encoder and the output layer, all trained in fine-tuning (Table 5: "we
  added a randomly initialized BiLSTM on top" of the LTR model). A sentence is
  represented by the forward direction's last real token and the backward direction's
  first (the LTR model's [CLS] vector has seen nothing but itself).
- `FeatureBiLSTM`: the feature-based approach of Table 7: frozen hidden states of some
  layers (concatenated, or mixed by learned softmax weights for the "Weighted Sum" rows)
  into a two-layer BiLSTM and a classifier per token (NER) or per sentence.

The encoder stays under the name ``bert``, so a pre-trained ``params["bert"]`` loads as
for the plain heads; the LSTMs and the output layer are fresh.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.layers import dropout
from bert_jax.model.numerics import DEFAULT, Numerics

Array = jax.Array


class BiLSTM(nn.Module):
    """`num_layers` bidirectional LSTMs of `size` units per direction: [B, S, F] → [B, S, 2 size]."""

    size: int
    num_layers: int = 1

    @nn.compact
    def __call__(self, x: Array, lengths: Array) -> Array:
        x = x.astype(jnp.float32)
        for i in range(self.num_layers):
            forward = nn.RNN(nn.OptimizedLSTMCell(self.size), name=f"forward_{i}")
            backward = nn.RNN(nn.OptimizedLSTMCell(self.size), name=f"backward_{i}")
            x = nn.Bidirectional(forward, backward, name=f"layer_{i}")(x, seq_lengths=lengths)
        return x


def _lengths(input_mask: Array) -> Array:
    return jnp.maximum(jnp.sum(input_mask > 0, axis=-1), 1).astype(jnp.int32)


def sentence_vector(outputs: Array, lengths: Array, size: int) -> Array:
    """The forward half at each row's last real token and the backward half at its first."""
    last = jnp.take_along_axis(outputs[..., :size], (lengths - 1)[:, None, None], axis=1)[:, 0]
    return jnp.concatenate([last, outputs[:, 0, size:]], axis=-1)


def _encode(
    model: tuple[BertConfig, Numerics],
    size: int,
    layers: int,
    inputs: tuple[Array, Array, Array],
    deterministic: bool,
) -> tuple[Array, Array]:
    """Inside a head's compact call: the encoder (``bert``), then the BiLSTM (``bilstm``)."""
    input_ids, input_mask, segment_ids = inputs
    config, numerics = model
    seq, _, _ = BertModel(config, numerics, add_pooler=False, name="bert")(
        input_ids, input_mask, segment_ids, deterministic=deterministic
    )
    lengths = _lengths(input_mask)
    out = BiLSTM(size, layers, name="bilstm")(seq, lengths)
    return dropout(numerics, config.hidden_dropout_prob)(out, deterministic), lengths


class BertBiLSTMForSequenceClassification(nn.Module):
    config: BertConfig
    num_labels: int
    lstm_size: int = 0  # 0: the encoder's hidden size
    lstm_layers: int = 1
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, input_ids: Array, input_mask: Array, segment_ids: Array, *, deterministic: bool = True
    ) -> Array:
        size = self.lstm_size or self.config.hidden_size
        out, lengths = _encode(
            (self.config, self.numerics),
            size,
            self.lstm_layers,
            (input_ids, input_mask, segment_ids),
            deterministic,
        )
        return nn.Dense(self.num_labels, name="classifier")(sentence_vector(out, lengths, size))


class BertBiLSTMForQuestionAnswering(nn.Module):
    config: BertConfig
    lstm_size: int = 0
    lstm_layers: int = 1
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, input_ids: Array, input_mask: Array, segment_ids: Array, *, deterministic: bool = True
    ) -> tuple[Array, Array]:
        size = self.lstm_size or self.config.hidden_size
        out, _ = _encode(
            (self.config, self.numerics),
            size,
            self.lstm_layers,
            (input_ids, input_mask, segment_ids),
            deterministic,
        )
        logits = nn.Dense(2, name="qa_outputs")(out)
        return logits[..., 0], logits[..., 1]


class BertBiLSTMForTokenClassification(nn.Module):
    config: BertConfig
    num_labels: int
    lstm_size: int = 0
    lstm_layers: int = 1
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, input_ids: Array, input_mask: Array, segment_ids: Array, *, deterministic: bool = True
    ) -> Array:
        size = self.lstm_size or self.config.hidden_size
        out, _ = _encode(
            (self.config, self.numerics),
            size,
            self.lstm_layers,
            (input_ids, input_mask, segment_ids),
            deterministic,
        )
        return nn.Dense(self.num_labels, name="classifier")(out)


class BertBiLSTMForMultipleChoice(nn.Module):
    config: BertConfig
    lstm_size: int = 0
    lstm_layers: int = 1
    numerics: Numerics = DEFAULT

    @nn.compact
    def __call__(
        self, input_ids: Array, input_mask: Array, segment_ids: Array, *, deterministic: bool = True
    ) -> Array:
        b, c, s = input_ids.shape
        flat = lambda x: x.reshape(b * c, s)
        size = self.lstm_size or self.config.hidden_size
        out, lengths = _encode(
            (self.config, self.numerics),
            size,
            self.lstm_layers,
            (flat(input_ids), flat(input_mask), flat(segment_ids)),
            deterministic,
        )
        return nn.Dense(1, name="classifier")(sentence_vector(out, lengths, size)).reshape(b, c)


class FeatureBiLSTM(nn.Module):
    """Logits from frozen features ``[B, S, layers, H]``: the layers concatenated
    (``combine="concat"``) or mixed with learned softmax weights and a scale
    (``"weighted"``), then a BiLSTM and a dense classifier, per token → [B, S, num_labels]
    or (``per_token=False``) on the sentence vector → [B, num_labels]."""

    num_labels: int
    lstm_size: int
    lstm_layers: int = 2
    combine: str = "concat"
    per_token: bool = True

    @nn.compact
    def __call__(self, features: Array, input_mask: Array) -> Array:
        b, s, n, h = features.shape
        if self.combine == "weighted":
            w = jax.nn.softmax(self.param("layer_weights", nn.initializers.zeros, (n,)))
            gamma = self.param("gamma", nn.initializers.ones, ())
            x = gamma * jnp.einsum("bslh,l->bsh", features, w)
        elif self.combine == "concat":
            x = features.reshape(b, s, n * h)
        else:
            raise ValueError(f"combine must be concat or weighted, got {self.combine!r}")
        lengths = _lengths(input_mask)
        out = BiLSTM(self.lstm_size, self.lstm_layers, name="bilstm")(x, lengths)
        if not self.per_token:
            out = sentence_vector(out, lengths, self.lstm_size)
        return nn.Dense(self.num_labels, name="classifier")(out)
