"""Decisions every host of a slice must take alike, taken once and shared.

A collective (a checkpoint save, a barrier) entered by some hosts and not others hangs the
slice. So whatever leads to one is decided on process 0 and broadcast (`from_process_0`),
or agreed by all (`all_true`): whether to resume and from which step, whether a
checkpoint is the best so far. `check_same_run` refuses, at start and in one line, a slice
whose hosts run another config or another version of the code, and `check_same_weights`
one whose hosts loaded other weights from one checkpoint. On one process each of
these is the value itself.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils


class HostsDisagreeError(ValueError):
    """The hosts of one run were started with another config or code version."""


def from_process_0(value: Any) -> Any:
    """Process 0's `value` (a number or a small NumPy array) on every host."""
    if jax.process_count() == 1:
        return value
    return multihost_utils.broadcast_one_to_all(np.asarray(value))


def all_true(flag: bool) -> bool:
    """True on every host if `flag` is true on every host, else False on every host."""
    if jax.process_count() == 1:
        return bool(flag)
    flags = multihost_utils.process_allgather(np.asarray(bool(flag), np.int32))
    return bool(np.all(flags))


def _digest(text: str) -> np.ndarray:
    return np.frombuffer(hashlib.sha256(text.encode()).digest()[:16], np.int32)


def code_fingerprint() -> str:
    """A hash of the bert_jax sources this process runs."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _hosts_differing(digest: np.ndarray) -> list[int]:
    """The hosts whose `digest` is not process 0's."""
    digests = multihost_utils.process_allgather(digest)
    return [i for i in range(digests.shape[0]) if not np.array_equal(digests[i], digests[0])]


def check_same_run(config: dict[str, Any]) -> None:
    """Every host runs the same config (as resolved: a run's settings' ``config``) and the
    same code, or all refuse in one line."""
    if jax.process_count() == 1:
        return
    mine = {"config": json.dumps(config, sort_keys=True, default=str), "code": code_fingerprint()}
    for what, text in mine.items():
        differ = _hosts_differing(_digest(text))
        if differ:
            detail = "config (a flag or config file differs)" if what == "config" else "bert_jax code version"
            raise HostsDisagreeError(
                f"hosts {differ} run another {detail} than host 0: start every host with the same "
                "checkout and command"
            )


def check_same_weights(params: Any, source: str) -> None:
    """Every host loaded the same weights from the checkpoint `source`, or all refuse in
    one line. Each host reads a checkpoint itself: one a run is still saving to may give
    them different steps, which placed together would make one model of two. Compared by
    each array's path, shape, dtype and its first and last 64 KiB (a training step changes
    every weight), so a model of gigabytes is compared in milliseconds."""
    if jax.process_count() == 1:
        return
    h = hashlib.sha256()
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    for key, leaf in sorted((jax.tree_util.keystr(k), np.asarray(v)) for k, v in leaves):
        data = np.ascontiguousarray(leaf).reshape(-1).view(np.uint8)
        h.update(f"{key}{leaf.shape}{leaf.dtype}".encode())
        h.update(data[: 1 << 16].tobytes() + data[-(1 << 16) :].tobytes())
    differ = _hosts_differing(np.frombuffer(h.digest()[:16], np.int32))
    if differ:
        raise HostsDisagreeError(
            f"hosts {differ} read other weights from {source} than host 0 (was it written while "
            "they read it? a run still saving there): start from a checkpoint no run writes"
        )
