"""How fast a run trains: tokens/s, MFU and the seconds per step behind the ETA.

The loop (`loop.TrainingRun.steps`) feeds every batch to a `Throughput` meter and pauses
it while the hooks run, so the time spent saving, evaluating and writing logs is never
counted as training time; nor is a step that compiles its program (the run's first, and
the first of each new batch shape: a fine-tuning length bucket, pre-training's phase 2),
which the loop runs paused and leaves uncounted. A reading (`Throughput.read`, asked for
by the metrics hooks through their `StepContext`) closes the window: what it counted
since the previous reading, over the time it trained (nothing, when it counted no step).
The time a reading waits for the devices to finish the step is training time: a reading
taken during the pause counts the pause up to that moment, and the pause restarts there.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

from bert_jax.training import hardware

_CPU_PEAK: list[float] = []


def device_peak_flops() -> float:
    """Peak FLOP/s of one local device: from the table, or measured once on CPU
    (`measure_cpu_peak`)."""
    peak = table_peak_flops()
    if peak is not None:
        return peak
    return _CPU_PEAK[0] if _CPU_PEAK else measure_cpu_peak()


def table_peak_flops() -> float | None:
    """The local devices' peak from the hardware table (a TPU's or a GPU's), None on CPU."""
    return hardware.peak_flops_for_device_kind(jax.local_devices()[0].device_kind)


def measure_cpu_peak() -> float:
    """A float32 2048² matmul's rate on this CPU, the best of five (the machine's other
    work slows some of them), kept as the highest measured so far: what a CPU run's MFU is
    a fraction of. Measured under load it is low; `Throughput` measures again when a window
    runs above it."""
    n = 2048
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    rate = max([2 * n**3 / best, *_CPU_PEAK])
    _CPU_PEAK[:] = [rate]
    return rate


def meter(clock: Callable[[], float], devices: int) -> Throughput:
    """A meter for `devices` devices of the local kind: the table's peak, or a CPU's
    measured peak, measured again when a window trains above it."""
    peak = table_peak_flops()
    if peak is not None:
        return Throughput(clock, peak * devices)
    return Throughput(clock, device_peak_flops() * devices, lambda: measure_cpu_peak() * devices)


class Throughput:
    """Tokens and FLOPs per window of training time, and the training seconds per step so
    far (over every window read: what the ETA multiplies). `peak_flops`: the devices'
    peak FLOP/s together (MFU's denominator). `remeasure`, for a measured peak (a CPU's):
    called when a window trains above the peak (it was measured while other work held the
    cores: a run read 128% MFU), the higher of the two kept; its time is not training time."""

    def __init__(
        self, clock: Callable[[], float], peak_flops: float, remeasure: Callable[[], float] | None = None
    ) -> None:
        self.clock, self.peak_flops, self.remeasure = clock, peak_flops, remeasure
        self.train_seconds, self.train_steps = 0.0, 0
        self._paused_at: float | None = None
        self.start()

    def start(self) -> None:
        """Opens a new window now (what came before it is not counted)."""
        self._start, self._steps, self._tokens, self._flops = self.clock(), 0, 0, 0.0

    def add(self, tokens: int, flops: float) -> None:
        """Counts one step of the window: its tokens and FLOPs."""
        self._steps += 1
        self._tokens += tokens
        self._flops += flops

    def pause(self) -> None:
        self._paused_at = self.clock()

    def resume(self) -> None:
        if self._paused_at is not None:
            self._start += self.clock() - self._paused_at
            self._paused_at = None

    def read(self) -> dict[str, float]:
        """``tokens_per_sec`` and ``mfu`` of the window that ends now (none when it counted
        no step: only a compiling one); the next opens."""
        now = self.clock()
        elapsed = now - self._start
        out = {}
        if self._steps:
            self.train_seconds += elapsed
            self.train_steps += self._steps
            if self._flops / elapsed > self.peak_flops and self.remeasure is not None:
                self.peak_flops = max(self.peak_flops, self.remeasure())
                now = self.clock()  # the next window opens after the measurement
            out = {"tokens_per_sec": self._tokens / elapsed, "mfu": self._flops / elapsed / self.peak_flops}
        self._start, self._steps, self._tokens, self._flops = now, 0, 0, 0.0
        if self._paused_at is not None:
            self._paused_at = now
        return out

    @property
    def seconds_per_step(self) -> float:
        return self.train_seconds / max(self.train_steps, 1)
