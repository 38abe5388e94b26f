"""Several short fine-tuning examples in one row (sentence-level tasks).

GLUE-style sentences are short (SST-2 averages ~25 pieces), so rows padded to a batch's
longest example compute mostly padding. Packed, the examples of a batch share rows of
`length` tokens:

- ``input_mask`` holds each token's example number in its row (1, 2, ...; 0 = padding)
  and a token attends only to tokens of its own number (`encoder.attention_bias`);
- ``position_ids`` restart at 0 at each example's [CLS], ``segment_ids`` are the
  example's own;
- the head reads each example's [CLS] at ``cls_positions`` [R, K]; ``labels`` [R, K] and
  ``label_weights`` [R, K] (1 for an example, 0 for an empty slot) go with them, and
  ``example_index`` [R, K] (-1 for an empty slot) says which input row each slot holds.

An example's logits are then those of the example alone in a padded row (tested, dropout
off). Rows are filled first-fit in decreasing length (a row holds at most `length // 4`
examples: [CLS] a [SEP] is 3 tokens); their number is rounded up to `row_multiple` with
empty rows, so a step compiles for a few row counts only.
"""

from __future__ import annotations

import numpy as np

PACKED_INPUTS = ("position_ids", "cls_positions")


def slots(length: int) -> int:
    """Examples a row of `length` tokens holds at most (K)."""
    return max(1, length // 4)


def first_fit(lengths: np.ndarray, capacity: int, max_per_row: int) -> list[list[int]]:
    """Indices of `lengths` grouped into rows of `capacity` tokens, longest first, each
    into the first row with room (first-fit decreasing)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in np.argsort(-np.asarray(lengths), kind="stable"):
        n = int(lengths[i])
        if n > capacity:
            raise ValueError(f"an example of {n} tokens does not fit a packed row of {capacity}")
        for r in range(len(rows)):
            if n <= room[r] and len(rows[r]) < max_per_row:
                rows[r].append(int(i))
                room[r] -= n
                break
        else:
            rows.append([int(i)])
            room.append(capacity - n)
    return rows


def pack(examples: dict[str, np.ndarray], length: int, row_multiple: int = 1) -> dict[str, np.ndarray]:
    """One example per row (``input_ids``/``input_mask``/``segment_ids`` [N, S], real
    tokens first; ``labels`` [N]) → packed rows of `length` (see the module docstring)."""
    lengths = (examples["input_mask"] > 0).sum(-1)
    k = slots(length)
    groups = first_fit(lengths, length, k)
    r = -(-len(groups) // row_multiple) * row_multiple
    out = {
        "input_ids": np.zeros((r, length), examples["input_ids"].dtype),
        "input_mask": np.zeros((r, length), np.int32),
        "segment_ids": np.zeros((r, length), examples["segment_ids"].dtype),
        "position_ids": np.zeros((r, length), np.int32),
        "cls_positions": np.zeros((r, k), np.int32),
        "labels": np.zeros((r, k), examples["labels"].dtype),
        "label_weights": np.zeros((r, k), np.float32),
        "example_index": np.full((r, k), -1, np.int32),
    }
    for row, members in enumerate(groups):
        at = 0
        for slot, i in enumerate(members):
            n, span = int(lengths[i]), slice(at, at + int(lengths[i]))
            out["input_ids"][row, span] = examples["input_ids"][i, :n]
            out["input_mask"][row, span] = slot + 1
            out["segment_ids"][row, span] = examples["segment_ids"][i, :n]
            out["position_ids"][row, span] = np.arange(n)
            out["cls_positions"][row, slot] = at
            out["labels"][row, slot] = examples["labels"][i]
            out["label_weights"][row, slot] = 1.0
            out["example_index"][row, slot] = i
            at += n
    return out


def unpack(outputs: np.ndarray, example_index: np.ndarray) -> np.ndarray:
    """Per-slot outputs [R, K, ...] → one per input row of `pack`, in its order."""
    row, slot = np.nonzero(example_index >= 0)
    out = np.empty((len(row), *outputs.shape[2:]), outputs.dtype)
    out[example_index[row, slot]] = outputs[row, slot]
    return out
