"""What runs between training steps, and what it is given (levanter's ``add_hook``).

A `Hook` is ``fn(ctx)`` on a cadence: after every `every`-th step and after each step in
`also_at` (a phase's or the run's last). The loop (`loop.TrainingRun.steps`) only trains,
times the training and stops on a preemption; everything else a run does between steps is
a hook of this one kind:

- `default_hooks`, what every job adds first: the metrics row (``metrics.jsonl`` and
  TensorBoard) and the progress line (loss, tokens/s, MFU, ETA) every
  ``log_every_steps``, the stop on a non-finite loss, a checkpoint every
  ``checkpoint_every_steps``;
- the job's own after them: pre-training's held-out evaluation
  (`pretraining.evaluation.PeriodicEval`), fine-tuning's epoch end
  (`finetuning.outputs.EpochEnd`), the feature-based BiLSTM's epoch end.

A hook reads and writes only through its `StepContext`: the step, the state, the step's
metrics (on the devices until a hook asks for them on the host, once for all), and the
run's outputs (`log`, `save`, `save_best`). The time hooks take is not training time.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, Protocol

import jax

from bert_jax.data.progress import format_duration
from bert_jax.training.settings import TrainingSettings
from bert_jax.training.throughput import Throughput


class RunOutputs(Protocol):
    """Where a hook's results go (`loop.TrainingRun` is one): the metrics log, the
    checkpoints, and the divergence check that guards them."""

    def log(self, step: int, values: dict[str, Any], split: str = "train") -> None: ...

    def save(self, step: int, state: Any, *, force: bool = False) -> None: ...

    def save_best(self, step: int, state: Any, values: dict[str, float]) -> bool: ...

    def check_finite(self, step: int, values: dict[str, Any]) -> None: ...


class StepContext:
    """What a hook gets after step `step`: the `state` after it, the step's `metrics` (on
    the devices; `train_metrics` reads them), the run's `total_steps`, and the run's
    outputs bound to this step and state. The same context reaches every hook due at the
    step; a job's work after the loop gets one too (`loop.TrainingRun.context`)."""

    def __init__(
        self,
        step: int,
        state: Any,
        metrics: dict[str, Any],
        *,
        total_steps: int,
        outputs: RunOutputs,
        meter: Throughput | None = None,
        extra_metrics: dict[str, Any] | None = None,
    ) -> None:
        self.step, self.state, self.metrics, self.total_steps = step, state, metrics, total_steps
        self._outputs, self._meter = outputs, meter
        self._extra = dict(extra_metrics or {})
        self._host: dict[str, float] | None = None

    def train_metrics(self) -> dict[str, float]:
        """The step's metrics on the host (read once, however many hooks ask), with the
        throughput since the previous reading (``tokens_per_sec``, ``mfu``) and the job's
        extra values (e.g. the phase's ``max_seq_length``)."""
        if self._host is None:
            host = {k: float(v) for k, v in jax.device_get(self.metrics).items()}
            if self._meter is not None:
                host.update(self._meter.read())
            host.update(self._extra)
            self._host = host
        return self._host

    @property
    def metrics_read(self) -> bool:
        """Whether a hook read the step's metrics (the step has finished on the devices)."""
        return self._host is not None

    @property
    def seconds_per_step(self) -> float:
        """Training seconds per step so far (0 before the first reading): the ETA's rate."""
        return self._meter.seconds_per_step if self._meter is not None else 0.0

    def log(self, values: dict[str, Any], split: str = "train") -> None:
        """A row of `values` at this step in the run's metrics (``split``: "eval", "dev", ...)."""
        self._outputs.log(self.step, values, split)

    def save(self, *, force: bool = False) -> None:
        """Checkpoints this state (refused with `loop.DivergedError` if the step diverged)."""
        self._outputs.save(self.step, self.state, force=force)

    def save_best(self, values: dict[str, float]) -> bool:
        """Keeps this state as the best checkpoint if `values` are the best so far."""
        return self._outputs.save_best(self.step, self.state, values)

    def check_finite(self, values: dict[str, Any]) -> None:
        """Stops the run (`loop.DivergedError`) if the loss or gradient norm is not finite."""
        self._outputs.check_finite(self.step, values)


@dataclasses.dataclass(frozen=True)
class Hook:
    """``fn(ctx)`` after every `every`-th step (0: on no cadence) and after each step
    listed in `also_at`. A hook that reads values of the step (metrics, the state) makes
    the loop wait for the steps queued before it first, as training time (the hook's own
    time is not); one that only keeps references to the step's arrays says
    ``reads_values=False``, and the steps go on queueing past it."""

    fn: Callable[[StepContext], None]
    every: int = 1
    also_at: tuple[int, ...] = ()
    reads_values: bool = True

    def due(self, step: int) -> bool:
        return bool(self.every and step % self.every == 0) or step in self.also_at


def log_metrics(ctx: StepContext) -> None:
    """The step's training metrics as a row of ``metrics.jsonl`` and TensorBoard."""
    ctx.log(ctx.train_metrics())


def show_progress(ctx: StepContext, console_keys: tuple[str, ...] = ()) -> None:
    """The progress line on process 0's console."""
    values = ctx.train_metrics()  # on every host: each one's throughput window closes alike
    if jax.process_index() == 0:
        print(
            progress_line(ctx.step, ctx.total_steps, values, console_keys, ctx.seconds_per_step), flush=True
        )


def stop_if_diverged(ctx: StepContext) -> None:
    ctx.check_finite(ctx.train_metrics())


def save_checkpoint(ctx: StepContext) -> None:
    ctx.save()


def progress_line(
    step: int, total: int, values: dict[str, Any], console_keys: tuple[str, ...], seconds_per_step: float
) -> str:
    """Step, loss, the console keys (e.g. MLM accuracy), tokens/s and MFU (when the
    window since the last line timed a step), and the ETA at `seconds_per_step`
    (training time alone; ``?`` before any step is timed)."""
    eta = (total - step) * seconds_per_step if seconds_per_step > 0 else math.nan
    rate = (
        f"tok/s {values['tokens_per_sec']:,.0f}  mfu {values['mfu']:.1%}  "
        if "tokens_per_sec" in values
        else ""
    )
    return (
        f"step {step:>7}/{total}  loss {values['loss']:.4f}  "
        + "".join(f"{k} {values[k]:.4f}  " for k in console_keys if k in values)
        + f"{rate}eta {format_duration(eta)}"
    )


def default_hooks(
    settings: TrainingSettings,
    *,
    total_steps: int,
    console_keys: tuple[str, ...] = (),
    ends: tuple[int, ...] = (),
) -> list[Hook]:
    """What every job runs between steps, before its own hooks: the metrics row, the
    progress line (with `console_keys` besides the loss) and the divergence check every
    ``log_every_steps`` and at each of `ends` (default: the last step), then a checkpoint
    every ``checkpoint_every_steps`` (0: only when the run stops)."""
    every, at = max(1, settings.log_every_steps), tuple(ends) or (int(total_steps),)
    return [
        Hook(log_metrics, every=every, also_at=at),
        Hook(functools.partial(show_progress, console_keys=tuple(console_keys)), every=every, also_at=at),
        Hook(stop_if_diverged, every=every, also_at=at),
        Hook(save_checkpoint, every=settings.checkpoints.checkpoint_every_steps, also_at=()),
    ]
