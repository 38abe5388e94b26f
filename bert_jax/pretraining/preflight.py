"""Before the first step: every phase's train step compiled and checked against device memory.

A run whose phase 2 (the paper's sequence 512) does not fit would train phase 1 for 90% of
its steps and then die out of memory: days of a pod for nothing. So a run compiles each
phase's step (its shapes, remat policy and gradient accumulation: the program it will
run) before step 1, and reads the compiler's memory figure (`memory_analysis`: arguments
+ outputs - aliased + temporaries, per device; on a TPU a program that does not fit is
refused by the compiler itself, its error names the bytes). A phase above one device's
memory (the runtime's limit on a GPU or TPU; on a CPU the host's available memory shared
by its devices; ``BERT_JAX_DEVICE_MEMORY`` overrides it, e.g. for tests) gets `plan`'s
search (`plan_fit`: more micro-batches, then remat policies, each compiled here) and:

- where the phase's step keys are its preset's (the user set none of them), the run trains
  that phase with the setting found, saying so in one warning line (the same gradient;
  slower by what the line says is recomputed, if anything);
- otherwise the run is refused in one line naming the phase and the fix, as an
  out-of-memory exit (`exit_codes.OUT_OF_MEMORY`), before anything is written.

The compiled programs are not thrown away: the step is compiled by the very jitted
function the loop calls (`Pretraining.phase_engine`), so the loop's first call finds it in
JAX's in-memory cache, and the compiles go to the run's compilation cache
(`compile_cache.staged`: a restart reads them back). Start-up pays the tracing once more,
not the compilation (bench/RESULTS.md, 2026-11-26).
"""

from __future__ import annotations

import dataclasses
import os
import time

import jax

from bert_jax.data.progress import human_bytes
from bert_jax.pretraining import plan_compile, plan_fit
from bert_jax.pretraining.objective import batch_shapes
from bert_jax.pretraining.settings import PHASE_KEYS, Phase, PhaseStep, PretrainSettings, step_words
from bert_jax.training import hardware, memory_fit, run_config

MEMORY_VARIABLE = "BERT_JAX_DEVICE_MEMORY"  # bytes one device holds (overrides the device's)


class PhaseOutOfMemory(ValueError):
    """A phase's step does not fit device memory (its message names the phase and the fix;
    it says "out of memory", so the command exits with `exit_codes.OUT_OF_MEMORY`)."""


@dataclasses.dataclass(frozen=True)
class PhaseFit:
    """One phase's step as compiled here: per-device bytes and what one device holds."""

    phase: int
    max_seq_length: int
    peak_bytes: int
    temp_bytes: int
    capacity_bytes: int | None  # None: unknown (nothing is refused)
    compile_time_s: float

    @property
    def fits(self) -> bool:
        return self.capacity_bytes is None or self.peak_bytes <= self.capacity_bytes


def device_capacity(mesh) -> tuple[int | None, str]:
    """(bytes one device of `mesh` holds, where that figure comes from)."""
    given = os.environ.get(MEMORY_VARIABLE, "").strip()
    if given:
        try:
            return int(float(given)), f"a device ({MEMORY_VARIABLE})"
        except ValueError:
            raise ValueError(f"{MEMORY_VARIABLE}={given!r}: a number of bytes") from None
    available, platform = memory_fit.device_bytes()
    if available is not None and platform == "cpu":  # the host's memory, shared by its devices
        available //= max(1, len(jax.local_devices()))
    return available, f"one {platform} device"


def phase_fit(job, number: int, phase: Phase, capacity: int | None) -> PhaseFit:
    """Compiles phase `number`'s step with the engine the loop will run it with."""
    engine = job.phase_engine(number)
    batch = engine.abstract_batch(
        batch_shapes(job.run.global_batch_size, phase.max_seq_length, phase.max_predictions_per_seq)
    )
    start = time.perf_counter()
    try:
        mem = engine.compile_train_step(batch).memory_analysis()
    except Exception as e:  # the TPU compiler refuses a program that does not fit
        needed = plan_compile.required_bytes_from_oom(str(e))
        if needed is None:
            raise
        state = plan_compile.per_device_bytes(engine.abstract_state) + plan_compile.per_device_bytes(batch)
        peak, temp = state + needed, needed
    else:
        if mem is None:  # a backend without a memory analysis: nothing to check against
            return PhaseFit(number, phase.max_seq_length, 0, 0, None, time.perf_counter() - start)
        temp = mem.temp_size_in_bytes
        peak = mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes + temp
    return PhaseFit(number, phase.max_seq_length, peak, temp, capacity, time.perf_counter() - start)


def find_fix(run: PretrainSettings, fit: PhaseFit, phase: Phase, mesh) -> plan_fit.Trial | None:
    """`plan`'s search (`plan_fit.search`) for phase `fit.phase`, compiled on `mesh`."""
    devices = list(mesh.devices.flat)
    where = plan_compile.Placement(
        topology_name="this machine", topo=None, devices=devices, devices_per_chip=1, mesh=mesh,
        chips_used=len(devices),
    )  # fmt: skip
    batch = run.global_batch_size
    room = plan_fit.Room(
        temp_bytes=fit.temp_bytes,
        state_bytes=fit.peak_bytes - fit.temp_bytes,
        capacity_bytes=fit.capacity_bytes,
        global_batch_size=batch,
        batch_shards=where.batch_shards(batch),
    )

    def try_setting(remat: str, accum: int) -> tuple[int, bool, float]:
        done = plan_compile.measure(run.at_shape(phase).with_step(PhaseStep(remat, accum)), where)
        return done.mem.peak_bytes, done.mem.peak_bytes <= fit.capacity_bytes, done.compile_time_s

    setting = dataclasses.astuple(run.phase_step(fit.phase))
    tried = plan_fit.search(fit.phase, setting, room, try_setting, lambda remat, accum: 0.0)
    return tried[-1] if tried and tried[-1].fits else None


def set_by_user(run: PretrainSettings, number: int) -> bool:
    """Whether the keys of phase `number`'s step differ from its preset's (or the config
    names no preset, or the preset cannot be read): then they are the user's choice."""
    if not run.preset:
        return True
    try:
        preset = run_config.load_config(f"configs/pretrain.py:{run.preset}")
    except (OSError, ValueError, KeyError):
        return True
    return any(run.config.get(key) != preset.get(key) for key in PHASE_KEYS[number])


def with_fix(run: PretrainSettings, number: int, fix: plan_fit.Trial) -> PretrainSettings:
    """`run` with phase `number`'s step set as `fix` sets it (its config record too)."""
    config = {**run.config, **fix.keys}
    if number == 1:
        run = run.with_step(PhaseStep(fix.remat_policy, fix.grad_accum_steps))
        return dataclasses.replace(run, config=config)
    return dataclasses.replace(
        run,
        phase2_remat_policy=fix.remat_policy,
        phase2_grad_accum_steps=fix.grad_accum_steps,
        config=config,
    )


def _flags(keys: dict) -> str:
    return " ".join(f"--config.{k}={v}" for k, v in keys.items())


def _refuse_or_fix(job, fit: PhaseFit, phase: Phase, where: str):
    """The job with phase `fit.phase`'s step set as `plan`'s search finds it fits (one
    warning line), when its keys are the preset's; else `PhaseOutOfMemory`."""
    run, number = job.run, fit.phase
    need, have = human_bytes(fit.peak_bytes), human_bytes(fit.capacity_bytes)
    what = (
        f"phase {number} (sequence {phase.max_seq_length}, steps {phase.start}-{phase.end}) needs "
        f"{need} per device, more than the {have} {where} holds"
    )
    fix = find_fix(run, fit, phase, job.mesh)
    if fix is None:
        raise PhaseOutOfMemory(
            f"{what}: it would run out of memory, and no micro-batching or remat policy "
            "that `bert-jax plan` tries fits: use more devices or a smaller batch"
        )
    if set_by_user(run, number):
        raise PhaseOutOfMemory(
            f"{what}: it would run out of memory; `bert-jax plan` finds {_flags(fix.keys)} "
            f"fits ({human_bytes(fix.hbm_per_chip_bytes)}): set it"
        )
    if jax.process_index() == 0:
        print(
            f"warning: {what}: training it with {_flags(fix.keys)} "
            f"({human_bytes(fix.hbm_per_chip_bytes)}), "
            f"which `bert-jax plan` finds fits here (the preset's phase {number}, same gradient; "
            "set the keys yourself to choose)",
            flush=True,
        )
    return type(job)(with_fix(run, number, fix), job.mesh)


def check(job, *, done: int = 0, capacity: int | None = None, where: str = "a device"):
    """Compiles every phase of `job` (a `pretrain.Pretraining`) that ends after step `done`
    (the workdir's newest saved step: a finished run compiles none) with the engines the
    loop will use and returns the job to train: `job` itself, or, where a phase's preset
    step does not fit, a job whose step for it is the fit found (one warning line). Raises
    `PhaseOutOfMemory` (one line) for a phase that does not fit otherwise. `capacity`
    (bytes of one device; `where` says whose) overrides the device's (`device_capacity`)."""
    if capacity is None:
        capacity, where = device_capacity(job.mesh)
    for number, phase in enumerate(job.run.phases(), start=1):
        if phase.end <= done:
            continue
        shape = (job.run.global_batch_size, phase.max_seq_length, phase.max_predictions_per_seq)
        what = step_words(*shape, *dataclasses.astuple(job.run.phase_step(number)))
        print(f"compiling phase {number}'s step: {what} ...", flush=True)
        fit = phase_fit(job, number, phase, capacity)
        of = "" if capacity is None else f" of {capacity / hardware.GIB:.2f}"
        used = f": {fit.peak_bytes / hardware.GIB:.2f}{of} GiB per device" if fit.peak_bytes else ""
        print(f"  compiled in {fit.compile_time_s:.1f} s{used}", flush=True)
        if not fit.fits:
            job = _refuse_or_fix(job, fit, phase, where)
            fit = phase_fit(job, number, phase, capacity)  # the fix, with the loop's own engine
            if not fit.fits:  # the search compiled the same program: not expected
                raise PhaseOutOfMemory(f"phase {number}: the fit found runs out of memory as compiled again")
    return job
