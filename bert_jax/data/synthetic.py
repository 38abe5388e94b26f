"""Random pre-training batches with the real feature layout, for tests and benchmarks.

Rows in the layout of `sources.data_batches`: global batch ``k`` is a pure
function of (seed, k), each host keeps its rows, so resumption and host-count
independence hold exactly as for real data.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def global_batch(
    step: int,
    *,
    seed: int,
    global_batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    vocab_size: int,
) -> dict[str, np.ndarray]:
    """Global batch number `step`: variable lengths, padding, [CLS]/[SEP], masked positions."""
    rng = np.random.default_rng([seed, step])
    b, s, p = global_batch_size, max_seq_length, max_predictions_per_seq
    lengths = rng.integers(max(8, s // 2), s + 1, b)
    ids = rng.integers(5, vocab_size, (b, s)).astype(np.int32)
    mask = (np.arange(s)[None] < lengths[:, None]).astype(np.int32)
    split = lengths // 2
    segment = ((np.arange(s)[None] >= split[:, None]) & (mask > 0)).astype(np.int32)
    ids[:, 0] = 2  # [CLS]-like
    ids = ids * mask
    positions = np.zeros((b, p), np.int32)
    weights = np.zeros((b, p), np.float32)
    for i, n in enumerate(lengths):
        k = min(p, max(1, round(0.15 * n)))
        positions[i, :k] = np.sort(rng.choice(np.arange(1, n), k, replace=False))
        weights[i, :k] = 1.0
    masked_ids = np.take_along_axis(ids, positions, axis=1) * (weights > 0)
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segment,
        "masked_lm_positions": positions,
        "masked_lm_ids": masked_ids.astype(np.int32),
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, b).astype(np.int32),
    }


def create_iterator(
    *,
    global_batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    vocab_size: int,
    seed: int,
    start_step: int = 0,
    process_index: int = 0,
    process_count: int = 1,
    num_batches: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local rows of global batches start_step, start_step + 1, ... (forever by default)."""
    local = global_batch_size // process_count
    step = start_step
    while num_batches is None or step < start_step + num_batches:
        batch = global_batch(
            step,
            seed=seed,
            global_batch_size=global_batch_size,
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            vocab_size=vocab_size,
        )
        yield {k: v[process_index * local : (process_index + 1) * local] for k, v in batch.items()}
        step += 1
