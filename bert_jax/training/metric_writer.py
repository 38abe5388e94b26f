"""Where metrics go: WORKDIR/metrics.jsonl, TensorBoard event files, one console line.

Only process 0 writes. Every row carries ``step``; eval rows carry ``split: "eval"``.
A bucket workdir (``gs://``) gets the same files through the path layer
(`storage.files`): the metrics file and the event file are rewritten whole at most every
`flush_every_s` seconds and when the run ends (objects cannot be appended to), so
TensorBoard's writer needs no cloud client of its own.
"""

from __future__ import annotations

import io
import json
import math
import time
from typing import Any

import jax

from bert_jax.storage import files


class MetricsLogger:
    def __init__(
        self,
        workdir: str,
        total_steps: int,
        console_keys: tuple[str, ...] = (),
        *,
        flush_every_s: float = 30.0,
    ) -> None:
        self.enabled = jax.process_index() == 0
        self.total_steps = total_steps
        self.console_keys = console_keys
        self.path = files.join(workdir, "metrics.jsonl")
        self.tb_dir = files.join(workdir, "tensorboard")
        self._tb = None
        self._file: files.AppendFile | None = None
        self._start_time = time.time()
        self._start_step: int | None = None
        if self.enabled:
            files.makedirs(workdir)
            self._file = files.AppendFile(self.path, flush_every_s=flush_every_s)
            self._tb = _summary_writer(self.tb_dir, flush_every_s)

    def write(self, step: int, metrics: dict[str, Any], split: str = "train") -> None:
        if not self.enabled:
            return
        row = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
        if split != "train":
            row["split"] = split
        self._file.write(json.dumps(row) + "\n", flush=split != "train")
        for k, v in row.items():  # a non-finite value stays in metrics.jsonl (the loop stops on it)
            if isinstance(v, (int, float)) and k != "step" and math.isfinite(v):
                self._tb.add_scalar(f"{split}/{k}", v, step)
        self._tb.flush()

    def progress(self, step: int, metrics: dict[str, Any]) -> None:
        """Console line: step, loss, the console keys (e.g. MLM accuracy), tokens/s, MFU, ETA."""
        if not self.enabled:
            return
        if self._start_step is None:
            self._start_step, self._start_time = step, time.time()
        done = step - self._start_step
        rate = done / max(time.time() - self._start_time, 1e-9)
        eta = (self.total_steps - step) / rate if rate > 0 else float("nan")
        print(
            f"step {step:>7}/{self.total_steps}  loss {metrics['loss']:.4f}  "
            + "".join(f"{k} {metrics[k]:.4f}  " for k in self.console_keys if k in metrics)
            + f"tok/s {metrics['tokens_per_sec']:,.0f}  mfu {metrics['mfu']:.1%}  "
            f"eta {format_eta(eta)}",
            flush=True,
        )

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._tb is not None:
            self._tb.close()


def _summary_writer(logdir: str, flush_every_s: float) -> Any:
    """tensorboardX's writer; for a bucket logdir its records go through the path layer."""
    from tensorboardX import SummaryWriter, record_writer  # deferred: heavy to import

    if files.is_remote(logdir):
        scheme = logdir.split("://", 1)[0]
        record_writer.register_writer_factory(scheme, _RemoteRecordFiles(flush_every_s))
    return SummaryWriter(logdir)


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


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    return float(v) if isinstance(v, float) else v


def format_eta(seconds: float) -> str:
    if seconds != seconds:  # NaN
        return "?"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"
