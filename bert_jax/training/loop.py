"""The loop every job runs: steps, resume, preemption; everything between steps is a hook.

`TrainingRun` owns one job's workdir bookkeeping: it restores the newest intact
checkpoint (or starts fresh), drives `Engine.train_step` over a stream of global batches,
times the training (`throughput.Throughput`: tokens/s, MFU and the ETA over training time
alone) and after each step runs the hooks that are due (`hooks.Hook`). Logging, the
progress line, checkpoints and evaluations are all hooks (`hooks.default_hooks` builds the
ones every job adds; the job appends its own); they reach the run only through the
`hooks.StepContext` they are given. On SIGTERM (a TPU maintenance event, `launch/tpu_pod.py
stop`, a scheduler) the loop saves and exits with 143 so that a restart loop resumes it
(Ctrl-C: saves, 130; `Preemption`). A run with ``stop_after_step`` checkpoints and stops
there (`StopRequested`).
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
from jax.experimental import multihost_utils

from bert_jax.storage import files
from bert_jax.training import checkpoints, exit_codes, throughput
from bert_jax.training.engine import Batch, Engine, TrainState
from bert_jax.training.hooks import Hook, StepContext
from bert_jax.training.metric_writer import MetricsLogger
from bert_jax.training.settings import TrainingSettings
from bert_jax.training.throughput import Throughput

PREEMPTED_EXIT_CODE = exit_codes.PREEMPTED  # as a process ended by SIGTERM: restarted
INTERRUPTED_EXIT_CODE = exit_codes.INTERRUPTED  # as a process ended by Ctrl-C (SIGINT)


class DivergedError(ValueError):
    """A non-finite loss or gradient norm: the run stops, and nothing from it is saved."""


class StopRequested(Exception):
    """The run reached ``stop_after_step`` and saved a checkpoint there."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped at step {step} (stop_after_step); rerun to continue")
        self.step = step


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


def _finish(close: Callable[[], None], error: BaseException | None) -> None:
    """``close()``; while ``error`` ends the run, its own failure is a warning line only."""
    try:
        close()
    except Exception as failure:
        if error is None:
            raise
        print(f"warning: finishing the run's files also failed: {exit_codes.first_line(failure)}", flush=True)


class TrainingRun:
    """Checkpoints, metrics and preemption of one job in `workdir` (a context manager).

    Reads the run's `CheckpointSettings` (``keep_checkpoints``, ``async_checkpointing``;
    ``stop_after_step`` 0: none) from `settings`; when to log and to save is the hooks'
    (`hooks.default_hooks`). `clock` (seconds) times the training for tokens/s, MFU and
    the ETA. A hook reaches the run through its `StepContext` (`log`, `save`,
    `save_best`, `check_finite` below); work after the loop gets one from `context`.
    """

    def __init__(
        self,
        workdir: str,
        settings: TrainingSettings,
        *,
        total_steps: int,
        best_metric: str = "",
        restore_transform: checkpoints.RestoreTransform | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.workdir = workdir
        self.total_steps = int(total_steps)
        saving = settings.checkpoints
        self.ckpt = checkpoints.Checkpointer(
            workdir,
            keep=saving.keep_checkpoints,
            async_save=saving.async_checkpointing,
            best_metric=best_metric,
            restore_transform=restore_transform,
        )
        self.stop_after = saving.stop_after_step or -1
        self.clock = clock
        self.logger: MetricsLogger | None = None  # the metrics log, opened by `restore_or_init`
        self.preemption = Preemption()
        self.last_saved: int | None = None
        self._meter: Throughput | None = None  # across `steps` calls: the ETA's rate
        self._metrics: tuple[int, Any] | None = None  # the last step's, on the devices
        self._programs: set[tuple] = set()  # the batch shapes whose train step has compiled

    def __enter__(self) -> TrainingRun:
        return self

    def __exit__(self, exc_type: Any, error: BaseException | None, tb: Any) -> None:
        """Finishes the pending save and the logs. When an error is ending the run, a
        failure to finish them is a warning line, and that error stays the one the command
        reports and exits on. A bucket that stopped answering or a lost peer process leaves
        the save in flight unfinished (its wait would outlast the retry bound: orbax's
        hosts wait minutes for each other); a restart resumes from the last committed one."""
        self.preemption.restore()
        stranded = isinstance(error, (files.BucketUnreachableError, exit_codes.PeerLost))
        try:
            if not stranded:
                _finish(self.ckpt.close, error)
        finally:
            if self.logger is not None and not isinstance(error, files.BucketUnreachableError):
                _finish(self.logger.close, error)

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
        self.logger = MetricsLogger(self.workdir, self.total_steps, from_step=self.last_saved or 0)
        return state, restored is not None

    def context(self, state: TrainState) -> StepContext:
        """A `StepContext` at `state`'s step outside the loop (no step metrics): for a job's
        work after training (e.g. the final evaluation when no hook did it)."""
        step = int(jax.device_get(state.step))
        return StepContext(step, state, {}, total_steps=self.total_steps, outputs=self)

    def log(self, step: int, values: dict[str, Any], split: str = "train") -> None:
        assert self.logger is not None, "restore_or_init first"
        self.logger.write(step, values, split=split)

    def save(self, step: int, state: TrainState, *, force: bool = False) -> None:
        if self._metrics is not None and self._metrics[0] == step:
            self.check_finite(step, self._metrics[1])  # a diverged state is never saved
        if self.logger is not None:
            self.logger.flush()  # every step up to a committed checkpoint stays logged
        self.ckpt.save(step, state, force=force)
        self.last_saved = step

    def save_best(self, step: int, state: TrainState, values: dict[str, float]) -> bool:
        return self.ckpt.maybe_save_best(step, state, values)

    def check_finite(self, step: int, values: dict[str, Any]) -> None:
        """Raises `DivergedError` (one line: the step, the value, the checkpoint kept) if the
        step's loss or gradient norm is not finite."""
        host = {k: float(v) for k, v in jax.device_get(values).items() if k in ("loss", "grad_norm")}
        bad = [k for k, v in host.items() if not math.isfinite(v)]
        if not bad:
            return
        kept = (
            f"the latest checkpoint stays {self.workdir}/checkpoints/{self.last_saved}"
            if self.last_saved is not None
            else "no checkpoint was saved"
        )
        raise DivergedError(
            f"training diverged at step {step}: {bad[0]} is {host[bad[0]]}; nothing from this run's "
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
        announce: Callable[[Batch], str] | None = None,
    ) -> TrainState:
        """Trains from ``state.step`` up to step `end` on `batches` (global batches),
        running the `hooks` due after each step, in order (`hooks.default_hooks` first).

        Tokens/s counts the positions of ``input_ids`` of each batch as fed (batches of
        varying length count what they hold); MFU is `flops(batch)` (the model's training
        FLOPs for that batch) over the devices' peak. Both, and the ETA, are over training
        time only: the time the hooks take (saving, evaluating) is left out, and so is each
        step that compiles a program: the first with each batch shape in this run (the
        first step; a new length bucket or phase). Such a step runs on its own (the steps
        queued before it finish first) and, with `announce` (a batch's shape in words),
        says so on process 0 before and after. `extra_metrics` join every training row
        (e.g. the phase's sequence length).
        """
        assert self.logger is not None, "restore_or_init first"
        if self._meter is None:
            self._meter = throughput.meter(self.clock, jax.device_count())
        meter = self._meter
        step = int(jax.device_get(state.step))
        meter.start()
        while step < end:
            batch = next(batches)
            shapes = tuple((k, v.shape, str(v.dtype)) for k, v in sorted(batch.items()))
            compiles = shapes not in self._programs
            if compiles:  # not training time: the steps queued before it are
                words = announce(batch) if announce is not None else ""
                began = self._compile_begins(meter, words)
            state, metrics = engine.train_step(state, batch)
            step += 1
            self._metrics = (step, metrics)  # checked before any save of this state
            if compiles:
                self._programs.add(shapes)
                self._compile_ends(meter, metrics, began, step, words)
            else:
                meter.add(batch["input_ids"].size, flops(batch))
            ctx = StepContext(
                step,
                state,
                metrics,
                total_steps=self.total_steps,
                outputs=self,
                meter=meter,
                extra_metrics=extra_metrics,
            )
            due = [hook for hook in hooks if hook.due(step)]
            if any(hook.reads_values for hook in due):  # the queued steps finish: training time
                jax.block_until_ready(metrics)
            meter.pause()  # saving and evaluating are not training
            for hook in due:
                hook.fn(ctx)
            meter.resume()
            if step == self.stop_after or self.preemption.should_stop(step):
                self._stop(step, state)
        return state

    def _compile_begins(self, meter: Throughput, words: str) -> float:
        """Before a step that compiles: the queued steps finish (training time), the meter
        pauses; `words` (the batch's shape; "": nothing) said on process 0. Returns the clock."""
        if self._metrics is not None:
            jax.block_until_ready(self._metrics[1])
        meter.pause()
        if words and jax.process_index() == 0:
            print(f"compiling the train step for {words} ...", flush=True)
        return self.clock()

    def _compile_ends(self, meter: Throughput, metrics: Any, began: float, step: int, words: str) -> None:
        """After it: the step finishes, its time said (with `words`), the meter resumes."""
        jax.block_until_ready(metrics)
        if words and jax.process_index() == 0:
            print(f"  compiled and ran step {step} in {self.clock() - began:.1f} s", flush=True)
        meter.resume()

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
