"""Where metrics go: WORKDIR/metrics.jsonl, TensorBoard event files, one console line.

Only process 0 writes. Every row carries ``step``; eval rows carry ``split: "eval"``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import jax


class MetricsLogger:
    def __init__(self, workdir: str, total_steps: int, console_keys: tuple[str, ...] = ()) -> None:
        self.enabled = jax.process_index() == 0
        self.total_steps = total_steps
        self.console_keys = console_keys
        self.path = os.path.join(workdir, "metrics.jsonl")
        self.tb_dir = os.path.join(workdir, "tensorboard")
        self._tb = None
        self._start_time = time.time()
        self._start_step: int | None = None
        if self.enabled:
            os.makedirs(workdir, exist_ok=True)
            from tensorboardX import SummaryWriter  # deferred: TensorBoard's writer is heavy to import

            self._tb = SummaryWriter(self.tb_dir)

    def write(self, step: int, metrics: dict[str, Any], split: str = "train") -> None:
        if not self.enabled:
            return
        row = {"step": int(step), **{k: _plain(v) for k, v in metrics.items()}}
        if split != "train":
            row["split"] = split
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        for k, v in row.items():
            if isinstance(v, (int, float)) and k != "step":
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
        if self._tb is not None:
            self._tb.close()


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
