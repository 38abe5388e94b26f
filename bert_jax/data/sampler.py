"""The global example order: position ``g`` of the stream → (epoch, example id), in O(1).

Epoch ``e`` visits every example of a prepared set once, in an order given by a keyed
pseudo-random permutation of ``[0, N)`` (a Feistel network over the next power of four,
cycle-walked into range, as Grain's index shuffle). Nothing of size N is ever built:
the id at any position is computed from (seed, epoch, position) alone, so

- global batch ``k`` is positions ``[k*B, (k+1)*B)`` whatever the number of hosts, and a
  host computes only its rows;
- resuming at step N costs the same as step 0 (no replay, no permutation to rebuild);
- an epoch boundary is just another position (no re-pairing, no stall).
"""

from __future__ import annotations

import functools

import numpy as np

_ROUNDS = 6
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective 64-bit hash (uint64 in, uint64 out)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


@functools.lru_cache(maxsize=64)
def _round_keys(seed: int, epoch: int) -> tuple[int, ...]:
    rng = np.random.default_rng([seed, epoch, 0x5EED])
    return tuple(int(k) for k in rng.integers(0, 2**63, _ROUNDS, dtype=np.int64))


def permute(index: np.ndarray, size: int, seed: int, epoch: int) -> np.ndarray:
    """The keyed permutation of ``[0, size)`` applied to `index` (vectorised, int64)."""
    if size <= 1:
        return np.zeros_like(np.asarray(index, np.int64))
    half = max(1, (int(size - 1).bit_length() + 1) // 2)  # 2**(2*half) >= size
    mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)
    keys = [np.uint64(k) for k in _round_keys(seed, epoch)]
    x = np.asarray(index, np.int64).astype(np.uint64)
    todo = np.ones(x.shape, bool)
    with np.errstate(over="ignore"):
        while todo.any():  # cycle-walk: re-encrypt values that fell outside [0, size)
            left, right = x[todo] >> shift, x[todo] & mask
            for k in keys:
                left, right = right, left ^ (_mix(right ^ k) & mask)
            x[todo] = (left << shift) | right
            todo = x >= np.uint64(size)
    return x.astype(np.int64)


def lookup(
    positions: np.ndarray, size: int, seed: int, *, shuffle: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(epoch, example id) of each global stream position."""
    if size <= 0:
        raise ValueError("the prepared set has no examples")
    positions = np.asarray(positions, np.int64)
    epochs, offsets = np.divmod(positions, size)
    if not shuffle:
        return epochs, offsets
    ids = np.empty_like(offsets)
    for e in np.unique(epochs):  # a batch spans at most two epochs
        sel = epochs == e
        ids[sel] = permute(offsets[sel], size, seed, int(e))
    return epochs, ids


def host_positions(step: int, global_batch_size: int, process_index: int, process_count: int) -> np.ndarray:
    """Stream positions of this host's rows of global batch `step`."""
    if global_batch_size % process_count:
        raise ValueError(f"global batch {global_batch_size} not divisible by {process_count} hosts")
    local = global_batch_size // process_count
    start = step * global_batch_size + process_index * local
    return np.arange(start, start + local, dtype=np.int64)
