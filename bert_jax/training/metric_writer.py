"""Where metrics go: WORKDIR/metrics.jsonl and TensorBoard event files (the console line is
the progress hook's, `hooks.show_progress`).

Only process 0 writes. Every row carries ``step``; eval rows carry ``split: "eval"``.
A bucket workdir (``gs://``) gets the same files through the path layer
(`storage.files`): the metrics file and the event file are rewritten whole at most every
`flush_every_s` seconds and when the run ends (objects cannot be appended to), so
TensorBoard's writer needs no cloud client of its own.
"""

from __future__ import annotations

import importlib
import io
import json
import math
import sys
import time
from typing import Any

import jax

from bert_jax.storage import atomic_files, files


class MetricsLogger:
    """`from_step`: the step the run starts from. Rows logged after it by an earlier,
    interrupted attempt are dropped (the run logs them again, the same after an exact
    resume), and a row already logged (same step, split and keys: a rerun that only
    re-evaluates) is not written twice; the event file is opened at the first new row."""

    def __init__(
        self,
        workdir: str,
        total_steps: int,
        *,
        from_step: int = 0,
        flush_every_s: float = 30.0,
    ) -> None:
        self.enabled = jax.process_index() == 0
        self.total_steps = total_steps
        self.path = files.join(workdir, "metrics.jsonl")
        self.tb_dir = files.join(workdir, "tensorboard")
        self.flush_every_s = flush_every_s
        self._tb = None
        self._file: files.AppendFile | None = None
        self._logged: set[tuple[int, str, frozenset[str]]] = set()
        if self.enabled:
            files.makedirs(workdir)
            self._logged = _keep_rows_until(self.path, from_step)
            self._file = files.AppendFile(self.path, flush_every_s=flush_every_s)

    def write(self, step: int, metrics: dict[str, Any], split: str = "train") -> None:
        if not self.enabled:
            return
        row = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
        key = (int(step), split, frozenset(metrics))
        if key in self._logged:
            return
        self._logged.add(key)
        if split != "train":
            row["split"] = split
        self._file.write(json.dumps(row) + "\n", flush=split != "train")
        if self._tb is None:
            self._tb = _summary_writer(self.tb_dir, self.flush_every_s)
        for k, v in row.items():  # a non-finite value stays in metrics.jsonl (the loop stops on it)
            if isinstance(v, (int, float)) and k != "step" and math.isfinite(v):
                self._tb.add_scalar(f"{split}/{k}", v, step)
        self._tb.flush()

    def flush(self) -> None:
        """Everything logged so far written out now (on a bucket: the objects rewritten).
        The loop calls it before each checkpoint save, so that the metrics of every step up
        to a committed checkpoint are in the workdir: a run killed later resumes from that
        checkpoint and logs the steps after it, and no step's row is lost."""
        if self._file is not None:
            self._file.flush()
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()


def _summary_writer(logdir: str, flush_every_s: float) -> Any:
    """tensorboardX's writer; for a bucket logdir its records go through the path layer."""
    tensorboardx = _import_tensorboardx()
    if files.is_remote(logdir):
        scheme = logdir.split("://", 1)[0]
        tensorboardx.record_writer.register_writer_factory(scheme, _RemoteRecordFiles(flush_every_s))
    return tensorboardx.SummaryWriter(logdir)


# Optional modules tensorboardX's writer imports when they are there: torch (to accept its
# tensors) and Google Cloud Storage's client (to write to buckets itself).
_TENSORBOARDX_SKIPS = ("torch", "google.cloud.storage")


def _import_tensorboardx() -> Any:
    """tensorboardX (deferred: heavy to import), without `_TENSORBOARDX_SKIPS` where this
    process has not imported them (~1.2 s of a run's start): a run writes floats, and to a
    bucket through the path layer. Those modules stay importable afterwards."""
    if "tensorboardX" in sys.modules:
        return sys.modules["tensorboardX"]
    hidden = [name for name in _TENSORBOARDX_SKIPS if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  (an import of it raises ImportError)
    try:
        importlib.import_module("tensorboardX.record_writer")
        return importlib.import_module("tensorboardX")
    finally:
        for name in hidden:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


class _RemoteRecordFiles:
    """tensorboardX's writer factory for bucket paths (see `_RemoteRecordFile`)."""

    def __init__(self, flush_every_s: float) -> None:
        self.flush_every_s = flush_every_s

    def open(self, path: str) -> _RemoteRecordFile:
        return _RemoteRecordFile(path, self.flush_every_s)

    def directory_check(self, path: str) -> None:
        files.makedirs(path)


class _RemoteRecordFile:
    """An event file on a bucket: records kept in memory, the object rewritten whole at
    most every `flush_every_s` and on close (TensorBoard reads a growing file the same)."""

    def __init__(self, path: str, flush_every_s: float) -> None:
        self.path, self.flush_every_s = path, flush_every_s
        self._buffer, self._dirty, self._last = io.BytesIO(), False, 0.0

    def write(self, data: bytes) -> None:
        self._buffer.write(data)
        self._dirty = True

    def flush(self, force: bool = False) -> None:
        if self._dirty and (force or time.monotonic() - self._last >= self.flush_every_s):
            files.write_bytes_remote(self.path, self._buffer.getvalue())
            self._dirty, self._last = False, time.monotonic()

    def close(self) -> None:
        self.flush(force=True)


def _keep_rows_until(path: str, step: int) -> set[tuple[int, str, frozenset[str]]]:
    """Drops the rows of `path` logged after `step` (rewriting it when there are any);
    returns what the kept rows hold: (step, split, keys). A last line cut short (a local
    file's append, killed mid-write) is dropped, with a warning; one cut just before its
    newline is kept, the newline added."""
    if not files.exists(path):
        return set()
    lines = files.read_text(path).splitlines(keepends=True)
    torn = bool(lines) and not lines[-1].endswith("\n")
    if torn:
        try:
            json.loads(lines[-1])
            lines[-1] += "\n"
        except ValueError:
            print(f"warning: {path}: its last line was cut short (a killed write); dropped", flush=True)
            lines = lines[:-1]
    kept = [(ln, row) for ln in lines if ln.strip() and (row := json.loads(ln))["step"] <= step]
    if torn or len(kept) != len(lines):
        atomic_files.write_text(path, "".join(ln for ln, _ in kept))  # local or bucket, whole
    rows = [row for _, row in kept]
    return {(r["step"], r.get("split", "train"), frozenset(r) - {"step", "split"}) for r in rows}


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    return float(v) if isinstance(v, float) else v
