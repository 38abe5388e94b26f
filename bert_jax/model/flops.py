"""The matmul FLOPs of a training step, the numerator of MFU and of `plan`'s time estimates.

Counted as the model computes them: the encoder's dense layers and attention over every
token, the MLM head only at the masked positions (the decoder never sees the others), the
pooler and NSP head when NSP is on; forward + backward = 3 x forward.
"""

from __future__ import annotations

from bert_jax.model.config import BertConfig


def model_flops_per_step(
    config: BertConfig, batch_size: int, seq_len: int, num_predictions: int, nsp: bool = True
) -> float:
    """Training FLOPs (forward + backward = 3x forward) of the model's matmuls per step.

    Counts the encoder's dense layers and attention over all tokens, the pooler/NSP head,
    and the MLM head (transform + tied decoder) at the `num_predictions` masked positions
    only — the work this implementation actually does.
    """
    h, f, v, n = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
        config.num_hidden_layers,
    )
    tokens = batch_size * seq_len
    ffn = (3 if config.gated_ffn else 2) * h * f  # a gated feed-forward has a third matrix
    encoder = n * (2 * (4 * h * h + ffn) * tokens + 2 * 2 * batch_size * seq_len * seq_len * h)
    mlm = 2 * (h * h + h * v) * batch_size * num_predictions
    pooled = 2 * (h * h + 2 * h) * batch_size if nsp else 0
    return 3.0 * (encoder + mlm + pooled)
