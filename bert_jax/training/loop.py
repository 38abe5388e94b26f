"""The loop every job runs: steps, metrics, checkpoints, resume and preemption.

`TrainingRun` owns one job's workdir bookkeeping: it restores the newest intact
checkpoint (or starts fresh), drives `Engine.train_step` over a stream of global batches,
logs loss, tokens/s, MFU and ETA every ``log_every_steps``, checkpoints every
``checkpoint_every_steps``, and on SIGTERM (a TPU maintenance event, `launch/tpu_pod.py
stop`, a scheduler) saves and exits with 143 so that a restart loop resumes it (Ctrl-C:
saves, 130; `Preemption`). A run
with ``stop_after_step`` checkpoints and stops there (`StopRequested`). The job decides
what happens between steps (evaluation, best-model saving) through a callback that gets
the step, the state and the step's metrics (on the devices: reading them is the job's
choice, so the loop never waits for a step it does not log).
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils

from bert_jax.training import checkpoints, exit_codes, hardware
from bert_jax.training.engine import Batch, Engine, TrainState
from bert_jax.training.metric_writer import MetricsLogger
from bert_jax.training.settings import TrainingSettings

PREEMPTED_EXIT_CODE = exit_codes.PREEMPTED  # as a process ended by SIGTERM: restarted
INTERRUPTED_EXIT_CODE = exit_codes.INTERRUPTED  # as a process ended by Ctrl-C (SIGINT)


class DivergedError(ValueError):
    """A non-finite loss or gradient norm: the run stops, and nothing from it is saved."""


class StopRequested(Exception):
    """The run reached ``stop_after_step`` and saved a checkpoint there."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped at step {step} (stop_after_step); rerun to continue")
        self.step = step


_CPU_PEAK: list[float] = []


def device_peak_flops() -> float:
    """Peak FLOP/s of one local device: from the table, or measured once on CPU."""
    device = jax.local_devices()[0]
    peak = hardware.peak_flops_for_device_kind(device.device_kind)
    if peak is not None:
        return peak
    if not _CPU_PEAK:
        n = 2048
        a = jnp.ones((n, n), jnp.float32)
        f = jax.jit(lambda x: x @ x)
        f(a).block_until_ready()
        start = time.perf_counter()
        reps = 5
        for _ in range(reps):
            f(a).block_until_ready()
        _CPU_PEAK.append(2 * n**3 * reps / (time.perf_counter() - start))
    return _CPU_PEAK[0]


class Preemption:
    """When to stop for a preemption or an interrupt, every host alike.

    - One process: SIGTERM and SIGINT (Ctrl-C) set a flag; the loop saves the current step
      and exits (143 for SIGTERM, 130 for SIGINT). A second Ctrl-C stops at once.
    - Several processes (a pod slice, `jax.distributed`): JAX's preemption service owns
      SIGTERM (its C++ notifier; a Python SIGTERM handler would replace it). A notice on any
      host reaches all of them, and `multihost_utils.reached_preemption_sync_point` turns
      true on every host at the same step, so all save that step and exit with 143. Ctrl-C
      on a host is passed on to that service as a SIGTERM.
    """

    def __init__(self) -> None:
        self.signal: int | None = None
        self.multihost = jax.process_count() > 1
        self._previous: dict[int, Any] = {}
        ours = (signal.SIGINT,) if self.multihost else (signal.SIGTERM, signal.SIGINT)
        for signum in ours:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: signals stay as they were
                pass

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.signal is not None:
            # A second Ctrl-C: stop now, as a kill would (the last finished checkpoint stays;
            # an unfinished save is orbax's temporary folder, never read as a checkpoint).
            print("interrupted again: stopping now, without saving", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(INTERRUPTED_EXIT_CODE)
        self.signal = signum
        if signum == signal.SIGINT:
            print("\ninterrupted: saving the current step (Ctrl-C again to stop at once)", flush=True)
            if self.multihost:
                os.kill(os.getpid(), signal.SIGTERM)  # to JAX's preemption service

    def should_stop(self, step: int) -> bool:
        if self.multihost:
            return bool(multihost_utils.reached_preemption_sync_point(step))
        return self.requested

    def exit_code(self) -> int:
        return (
            INTERRUPTED_EXIT_CODE
            if self.signal == signal.SIGINT and not self.multihost
            else PREEMPTED_EXIT_CODE
        )

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


@dataclasses.dataclass(frozen=True)
class Hook:
    """What a job runs between steps (levanter's ``trainer.add_hook(fn, every=N)``):
    ``fn(step, state, metrics)`` after every `every`-th step (0: on no cadence) and after
    each step listed in `also_at` (e.g. the run's last). Its time is not training time."""

    fn: Callable[[int, TrainState, dict[str, Any]], None]
    every: int = 1
    also_at: tuple[int, ...] = ()

    def due(self, step: int) -> bool:
        return bool(self.every and step % self.every == 0) or step in self.also_at


class TrainingRun:
    """Checkpoints, metrics and preemption of one job in `workdir` (a context manager).

    Reads the run's `CheckpointSettings` (``every_steps`` 0: only when stopping;
    ``stop_after_step`` 0: none) and ``log_every_steps`` from `settings`. `console_keys` are
    the metrics shown on the progress line besides the loss. `clock` (seconds) times the
    training for tokens/s, MFU and the ETA.
    """

    def __init__(
        self,
        workdir: str,
        settings: TrainingSettings,
        *,
        total_steps: int,
        best_metric: str = "",
        console_keys: tuple[str, ...] = (),
        restore_transform: checkpoints.RestoreTransform | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.workdir = workdir
        self.total_steps = int(total_steps)
        saving = settings.checkpoints
        self.ckpt = checkpoints.Checkpointer(
            workdir,
            keep=saving.keep,
            async_save=saving.async_save,
            best_metric=best_metric,
            restore_transform=restore_transform,
        )
        self.checkpoint_every = saving.every_steps
        self.log_every = max(1, settings.log_every_steps)
        self.stop_after = saving.stop_after_step or -1
        self.console_keys = console_keys
        self.clock = clock
        self.logger: MetricsLogger | None = None
        self.preemption = Preemption()
        self.last_saved: int | None = None
        self._peak: float | None = None
        self._metrics: tuple[int, Any] | None = None  # the last step's, on the devices
        self._train_time, self._train_steps = 0.0, 0  # training alone: no saves, no evaluations

    def __enter__(self) -> TrainingRun:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.preemption.restore()
        self.ckpt.close()
        if self.logger is not None:
            self.logger.close()

    def restore_or_init(self, engine: Engine, init: Callable[[], TrainState]) -> tuple[TrainState, bool]:
        """The newest checkpoint that restores (damaged newer ones are set aside), else
        ``init()``; and whether it resumed. Opens the metrics log: the run is accepted."""
        with jax.set_mesh(engine.mesh):
            restored = self.ckpt.restore_latest(engine.abstract_state)
        if restored is not None:
            state, self.last_saved = restored
            print(f"resumed from {self.workdir}/checkpoints/{self.last_saved}", flush=True)
        else:
            state = init()
        self.logger = MetricsLogger(
            self.workdir, self.total_steps, self.console_keys, from_step=self.last_saved or 0
        )
        return state, restored is not None

    def save(self, step: int, state: TrainState, *, force: bool = False) -> None:
        if self._metrics is not None and self._metrics[0] == step:
            self.check_finite(step, self._metrics[1])  # a diverged state is never saved
        self.ckpt.save(step, state, force=force)
        self.last_saved = step

    def check_finite(self, step: int, metrics: dict[str, Any]) -> None:
        """Raises `DivergedError` (one line: the step, the value, the checkpoint kept) if the
        step's loss or gradient norm is not finite."""
        values = {k: float(v) for k, v in jax.device_get(metrics).items() if k in ("loss", "grad_norm")}
        bad = [k for k, v in values.items() if not math.isfinite(v)]
        if not bad:
            return
        kept = (
            f"the latest checkpoint stays {self.workdir}/checkpoints/{self.last_saved}"
            if self.last_saved is not None
            else "no checkpoint was saved"
        )
        raise DivergedError(
            f"training diverged at step {step}: {bad[0]} is {values[bad[0]]}; nothing from this run's "
            f"later steps was saved ({kept}); lower --config.learning_rate or check the data"
        )

    def finish(self, state: TrainState) -> int:
        """Saves the final state unless it already is; returns its step."""
        step = int(jax.device_get(state.step))
        if self.last_saved != step:
            self.save(step, state, force=True)
        return step

    def steps(
        self,
        engine: Engine,
        state: TrainState,
        batches: Iterator[Batch],
        *,
        end: int,
        flops: Callable[[Batch], float],
        hooks: Sequence[Hook] = (),
        extra_metrics: dict[str, Any] | None = None,
    ) -> TrainState:
        """Trains from ``state.step`` up to step `end` on `batches` (global batches).

        Tokens/s counts the positions of ``input_ids`` of each batch as fed (batches of
        varying length count what they hold); MFU is `flops(batch)` (the model's training
        FLOPs for that batch) over the devices' peak. Both, and the ETA, are over training
        time only: the time spent saving and in `hooks` (evaluations) is left out.
        """
        assert self.logger is not None, "restore_or_init first"
        if self._peak is None:
            self._peak = device_peak_flops() * jax.device_count()
        step = first = window_first = int(jax.device_get(state.step))
        window_start, window_tokens, window_flops = self.clock(), 0, 0.0
        while step < end:
            batch = next(batches)
            state, metrics = engine.train_step(state, batch)
            step += 1
            self._metrics = (step, metrics)  # checked before any save of this state
            window_tokens += batch["input_ids"].size
            window_flops += flops(batch)
            is_log_step = step % self.log_every == 0 or step == end
            if step == first + 1 and not is_log_step:
                jax.block_until_ready(metrics)  # keep compilation out of the first window
                window_start, window_tokens, window_flops = self.clock(), 0, 0.0
                window_first = step
            if is_log_step:
                host = {k: float(v) for k, v in jax.device_get(metrics).items()}
                elapsed = self.clock() - window_start
                self._train_time += elapsed
                self._train_steps += step - window_first
                host["tokens_per_sec"] = window_tokens / elapsed
                host["mfu"] = window_flops / elapsed / self._peak
                host.update(extra_metrics or {})
                self.logger.write(step, host)
                self.logger.progress(step, host, self._train_time / max(self._train_steps, 1))
                self.check_finite(step, host)
                window_start, window_tokens, window_flops = self.clock(), 0, 0.0
                window_first = step
            paused = self.clock()
            if self.checkpoint_every and step % self.checkpoint_every == 0:
                self.save(step, state)
            for hook in hooks:
                if hook.due(step):
                    hook.fn(step, state, metrics)
            window_start += self.clock() - paused  # saving and evaluating are not training
            if step == self.stop_after or self.preemption.should_stop(step):
                self._stop(step, state)
        return state

    def _stop(self, step: int, state: TrainState) -> None:
        self.finish(state)
        self.ckpt.wait()
        if step == self.stop_after:
            print(f"stopped at step {step} (stop_after_step); rerun to continue", flush=True)
            raise StopRequested(step)
        code = self.preemption.exit_code()
        why = "interrupted" if code == INTERRUPTED_EXIT_CODE else "preempted"
        print(f"{why}: saved step {step} to {self.workdir}/checkpoints; rerun to resume", flush=True)
        sys.exit(code)
