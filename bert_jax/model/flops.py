"""The matmul FLOPs of a training step, the numerator of MFU and of `plan`'s time estimates.

Counted as the model computes them: the encoder's dense layers and attention over every
token, the MLM head only at the masked positions (the decoder never sees the others), the
pooler and NSP head when NSP is on; forward + backward = 3 x forward.

Attention costs 2 x 2 x D FLOPs per (query, key) pair it scores and weights, per head: S²
pairs in a global layer, and in a local layer (ModernBERT's sliding window, Warner et al.,
2024: query i sees key j when |i - j| <= window // 2) only the pairs inside the window —
what a block-sparse kernel (splash) computes; the XLA path computes the masked rest too,
which is not counted (it is no model FLOP).
"""

from __future__ import annotations

from bert_jax.model.config import BertConfig


def attended_pairs(seq_len: int, window: int | None) -> int:
    """(query, key) pairs one head scores in a row of `seq_len` tokens: all of them, or
    those within ``window // 2`` positions of each other (exact at the row's edges)."""
    if window is None:
        return seq_len * seq_len
    half = window // 2
    if half >= seq_len - 1:
        return seq_len * seq_len
    return seq_len * (2 * half + 1) - half * (half + 1)


def model_flops_per_step(
    config: BertConfig, batch_size: int, seq_len: int, num_predictions: int, nsp: bool = True
) -> float:
    """Training FLOPs (forward + backward = 3x forward) of the model's matmuls per step.

    Counts the encoder's dense layers and attention over all tokens (local layers: the
    pairs in their window), the pooler/NSP head, and the MLM head (transform + decoder) at
    the `num_predictions` masked positions only — the work this implementation actually does.
    """
    h, f, v, n = (
        config.hidden_size,
        config.intermediate_size,
        config.vocab_size,
        config.num_hidden_layers,
    )
    tokens = batch_size * seq_len
    ffn = (3 if config.gated_ffn else 2) * h * f  # a gated feed-forward has a third matrix
    dense = n * 2 * (4 * h * h + ffn) * tokens
    windows = [config.layer_window(i) if config.has_local_layers else None for i in range(n)]
    attention = sum(2 * 2 * batch_size * attended_pairs(seq_len, w) * h for w in windows)
    mlm = 2 * (h * h + h * v) * batch_size * num_predictions
    pooled = 2 * (h * h + 2 * h) * batch_size if nsp else 0
    return 3.0 * (dense + attention + mlm + pooled)
