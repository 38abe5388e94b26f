"""Plan a TPU run without a TPU: compile every phase's train step for a topology, report the cost.

`jax.experimental.topologies.get_topology_desc` describes a slice (``v5e:4x4``,
``v4:2x2x4``, ...) to the TPU compiler that ships in ``libtpu``; the pre-training step is
lowered with abstract (ShapeDtypeStruct) state and batch carrying the shardings the
logical-axis rules give on that slice's mesh, and compiled ahead of time. XLA then
reports per-chip memory (`memory_analysis`) and FLOPs (`cost_analysis`) of the exact
program that would run, so "will it fit?" is answered before paying for the slice.

Every phase of the run (`PretrainSettings.phases`: the paper's 90% of steps at sequence 128, then
10% at 512) is compiled with its own shapes and step settings (`PretrainSettings.phase_step`: phase 2
may have its own remat policy and gradient accumulation). The run fits only if every phase
fits; its time is the phases' times summed. For a phase that does not fit, `plan_fit`
compiles a few other settings and reports the first that fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from bert_jax.pretraining import plan_compile, plan_fit, plan_rate
from bert_jax.pretraining.settings import Phase, PhaseStep, PretrainSettings, step_words
from bert_jax.training import hardware

GIB = hardware.GIB
FLOPS_SOURCE = "xla cost_analysis of the same step (layers unrolled, one device)"


@dataclasses.dataclass
class PhasePlan:
    """One phase of the run: its step as compiled and what the phase costs. Bytes are per chip."""

    phase: int  # 1, or 2 for the phase2_* keys' phase
    first_step: int  # the global step the phase starts from
    num_steps: int
    max_seq_length: int
    max_predictions_per_seq: int
    remat_policy: str
    grad_accum_steps: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int  # activations and temporaries
    hbm_per_chip_bytes: int  # peak estimate: arguments + outputs - aliased + temporaries
    fits: bool
    flops_per_step: float  # the whole step, all chips together (remat's recomputation included)
    xla_cost_analysis_flops: float  # the TPU compiler's own figure x devices (a scan body once)
    est_step_time_s: float
    est_tokens_per_sec: float
    est_time_s: float  # est_step_time_s x num_steps
    compile_time_s: float
    # When it does not fit: whether a setting that does was searched for (`find_fit`), the
    # settings compiled in that search, in order, and the first of them that fits.
    searched: bool
    tried: list[plan_fit.Trial]
    fix: plan_fit.Trial | None


@dataclasses.dataclass
class PlanReport:
    """The run on one topology: every phase (`phases`) and the whole. Bytes are per chip.

    For the whole run: `fits` (every phase fits), `est_total_time_s` (the phases' times
    summed), `compile_time_s` (every compile, searches included), and the memory fields
    (`hbm_per_chip_bytes`, `argument_bytes`, `output_bytes`, `temp_bytes`) of the phase
    that needs the most. The per-step fields (`max_seq_length`, `flops_per_step`,
    `xla_cost_analysis_flops`, `est_step_time_s`, `est_tokens_per_sec`) are the first
    phase's; each phase's own are in `phases`.
    """

    topology: str
    num_slices: int  # slices of `topology` (multislice: data parallelism across them)
    num_chips: int
    devices_used: int
    device_kind: str
    mesh_shape: dict[str, int]
    layer_loop: str  # "scan" or "unroll": what phase 1's step was compiled with
    global_batch_size: int
    max_seq_length: int
    num_train_steps: int
    param_bytes: int
    opt_state_bytes: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    hbm_per_chip_bytes: int
    hbm_capacity_bytes: int
    fits: bool
    flops_per_step: float
    flops_source: str
    xla_cost_analysis_flops: float
    mfu_assumed: float  # the utilisation the times are estimated at (`plan_rate`), whatever its source
    mfu_source: str  # plan_rate.ASSUMED | GIVEN | MEASURED
    measured_tokens_per_s: float  # MEASURED: phase 1's rate it came from; else 0
    step_time_basis: str  # one line: how the times are estimated, and from what
    est_step_time_s: float
    est_tokens_per_sec: float
    est_total_time_s: float
    compile_time_s: float
    param_shardings: dict[str, list]  # parameter path -> mesh axis per dimension
    phases: list[PhasePlan]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class _Planner:
    """Plans the phases of one run on one placement; compiles each distinct step once."""

    def __init__(
        self,
        run: PretrainSettings,
        where: plan_compile.Placement,
        rate: plan_rate.Rate,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.run, self.where, self.rate, self.progress = run, where, rate, progress
        self.batch = run.global_batch_size
        self._measured: dict[tuple, plan_compile.Measured] = {}
        self._flops: dict[tuple, float] = {}

    def _step_settings(self, phase: Phase, setting: tuple[str, int]) -> PretrainSettings:
        """The run of the phase's step: its shapes, with `setting` (remat, accumulation)."""
        return self.run.at_shape(phase).with_step(PhaseStep(*setting))

    def measure(self, phase: Phase, setting: tuple[str, int]) -> plan_compile.Measured:
        key = (phase.max_seq_length, phase.max_predictions_per_seq, *setting)
        if key not in self._measured:
            slices = f" x {self.where.num_slices} slices" if self.where.num_slices > 1 else ""
            what = step_words(self.batch, phase.max_seq_length, phase.max_predictions_per_seq, *setting)
            self._say(f"compiling the step for {self.where.topology_name}{slices}: {what} ...")
            done = plan_compile.measure(self._step_settings(phase, setting), self.where)
            self._measured[key] = done
            per_chip = done.mem.peak_bytes * self.where.devices_per_chip
            fits = "fits" if self.fits(done.mem) else "does NOT fit"
            self._say(f"  compiled in {done.compile_time_s:.1f} s: {per_chip / GIB:.2f} GiB per chip, {fits}")
        return self._measured[key]

    def _say(self, line: str) -> None:
        """A progress line (`plan`'s ``progress``; compiles take minutes)."""
        if self.progress is not None:
            self.progress(line)

    def flops(self, phase: Phase, remat: str) -> float:
        key = (phase.max_seq_length, phase.max_predictions_per_seq, remat)
        if key not in self._flops:
            self._flops[key] = plan_compile.step_flops(self._step_settings(phase, (remat, 1)))
        return self._flops[key]

    def peak(self) -> float:
        """The chips' peak bf16 FLOP/s, all of them together."""
        return self.where.chips_used * self.where.topo.generation.peak_bf16_flops

    def step_time(self, flops: float) -> float:
        """An estimate: at the utilisation of `rate` (`plan_rate`)."""
        return plan_rate.step_time(flops, self.peak(), self.rate)

    def measured_rate(self, tokens_per_s: float) -> plan_rate.Rate:
        """The utilisation that phase 1's step reaching `tokens_per_s` implies."""
        phase = self.run.phases()[0]
        flops = self.flops(phase, self.run.phase_step(1).remat_policy)
        tokens = self.batch * phase.max_seq_length
        return plan_rate.of_tokens_per_s(tokens_per_s, flops, tokens, self.peak())

    def compile_seconds(self) -> float:
        """Every compile so far, each distinct step once."""
        return sum(m.compile_time_s for m in self._measured.values())

    def fits(self, mem: plan_compile.StepMemory) -> bool:
        return mem.peak_bytes <= self.where.device_capacity_bytes

    def search(
        self, index: int, phase: Phase, setting: tuple[str, int], mem: plan_compile.StepMemory
    ) -> list[plan_fit.Trial]:
        """`plan_fit.search` for a phase that does not fit, compiling on this placement."""
        room = plan_fit.Room(
            temp_bytes=mem.temp_bytes,
            state_bytes=mem.peak_bytes - mem.temp_bytes,
            capacity_bytes=self.where.device_capacity_bytes,
            global_batch_size=self.batch,
            batch_shards=self.where.batch_shards(self.batch),
        )

        def try_setting(remat: str, accum: int) -> tuple[int, bool, float]:
            done = self.measure(phase, (remat, accum))
            per_chip = done.mem.peak_bytes * self.where.devices_per_chip
            return per_chip, self.fits(done.mem), done.compile_time_s

        def step_time(remat: str, accum: int) -> float:
            return self.step_time(self.flops(phase, remat))

        return plan_fit.search(index, setting, room, try_setting, step_time)

    def phase_plan(self, index: int, phase: Phase, find_fit: bool) -> PhasePlan:
        setting = dataclasses.astuple(self.run.phase_step(index))
        done = self.measure(phase, setting)
        mem, per_chip = done.mem, self.where.devices_per_chip
        flops = self.flops(phase, setting[0])
        step_time = self.step_time(flops)
        fits = self.fits(mem)
        searched = find_fit and not fits
        tried = self.search(index, phase, setting, mem) if searched else []
        steps = phase.end - phase.start
        return PhasePlan(
            phase=index,
            first_step=phase.start,
            num_steps=steps,
            max_seq_length=phase.max_seq_length,
            max_predictions_per_seq=phase.max_predictions_per_seq,
            remat_policy=setting[0],
            grad_accum_steps=setting[1],
            argument_bytes=mem.argument_bytes * per_chip,
            output_bytes=mem.output_bytes * per_chip,
            temp_bytes=mem.temp_bytes * per_chip,
            hbm_per_chip_bytes=mem.peak_bytes * per_chip,
            fits=fits,
            flops_per_step=flops,
            xla_cost_analysis_flops=mem.xla_flops,
            est_step_time_s=step_time,
            est_tokens_per_sec=self.batch * phase.max_seq_length / step_time,
            est_time_s=step_time * steps,
            compile_time_s=done.compile_time_s,
            searched=searched,
            tried=tried,
            fix=tried[-1] if tried and tried[-1].fits else None,
        )


def _report(planner: _Planner, phases: list[PhasePlan]) -> PlanReport:
    """The whole run from its phases (see `PlanReport`)."""
    where, run, first = planner.where, planner.run, phases[0]
    state = planner.measure(run.phases()[0], dataclasses.astuple(run.phase_step(1)))
    per_chip = where.devices_per_chip
    largest = max(phases, key=lambda p: p.hbm_per_chip_bytes)
    return PlanReport(
        topology=where.topology_name,
        num_slices=where.num_slices,
        num_chips=where.chips_used,
        devices_used=len(where.devices),
        device_kind=where.devices[0].device_kind,
        mesh_shape=dict(where.mesh.shape),
        layer_loop=state.layer_loop,
        global_batch_size=planner.batch,
        max_seq_length=first.max_seq_length,
        num_train_steps=run.num_train_steps,
        param_bytes=plan_compile.per_device_bytes(state.abstract_state.params) * per_chip,
        opt_state_bytes=plan_compile.per_device_bytes(state.abstract_state.opt_state) * per_chip,
        argument_bytes=largest.argument_bytes,
        output_bytes=largest.output_bytes,
        temp_bytes=largest.temp_bytes,
        hbm_per_chip_bytes=largest.hbm_per_chip_bytes,
        hbm_capacity_bytes=where.topo.generation.hbm_bytes,
        fits=all(p.fits for p in phases),
        flops_per_step=first.flops_per_step,
        flops_source=FLOPS_SOURCE,
        xla_cost_analysis_flops=first.xla_cost_analysis_flops,
        mfu_assumed=planner.rate.utilization,
        mfu_source=planner.rate.source,
        measured_tokens_per_s=planner.rate.measured_tokens_per_s,
        step_time_basis=plan_rate.basis(
            planner.rate, where.chips_used, where.topo.generation.peak_bf16_flops
        ),
        est_step_time_s=first.est_step_time_s,
        est_tokens_per_sec=first.est_tokens_per_sec,
        est_total_time_s=sum(p.est_time_s for p in phases),
        compile_time_s=planner.compile_seconds(),
        param_shardings=plan_compile.param_specs(state.mem.param_shardings),
        phases=phases,
    )


def plan(
    run: PretrainSettings,
    topology_name: str,
    mfu_assumed: float = 0.45,
    find_fit: bool = True,
    *,
    mfu_given: bool = False,
    measured_tokens_per_s: float = 0.0,
    num_slices: int = 1,
    progress: Callable[[str], None] | None = None,
) -> PlanReport:
    """Compiles every phase's pre-training step of the `run` for `topology_name` and
    estimates the run's cost; with `find_fit`, a phase that does not fit gets
    `plan_fit`'s search for a setting that does (``model.vocab_size=0`` is planned at
    `model_vocab.planned_size`: no vocabulary is learned).

    Times are estimates at a utilisation (`plan_rate`): `mfu_assumed` (the user's figure
    when `mfu_given`), or the one a measured phase-1 `measured_tokens_per_s` implies.
    `num_slices` > 1 plans `num_slices` such slices (multislice), the run's mesh laid over
    them as `sharding.make_mesh` does (by default data parallelism across the slices).
    `progress`, if given, gets a line before and after each compile."""
    rate = plan_rate.of_mfu(mfu_assumed, mfu_given)
    planner = _Planner(run, plan_compile.placement(run, topology_name, num_slices), rate, progress)
    if measured_tokens_per_s:
        planner.rate = planner.measured_rate(measured_tokens_per_s)
    phases = [planner.phase_plan(i, p, find_fit) for i, p in enumerate(run.phases(), start=1)]
    return _report(planner, phases)
