"""Plan a TPU run without a TPU: compile the real train step for a topology, report the cost.

`jax.experimental.topologies.get_topology_desc` describes a slice (``v5e:4x4``,
``v4:2x2x4``, ...) to the TPU compiler that ships in ``libtpu``; the pre-training step is
lowered with abstract (ShapeDtypeStruct) state and batch carrying the shardings the
logical-axis rules give on that slice's mesh, and compiled ahead of time. XLA then
reports per-chip memory (`memory_analysis`) and FLOPs (`cost_analysis`) of the exact
program that would run, so "will it fit?" is answered before paying for the slice.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from typing import Any

import jax
import ml_collections
import numpy as np
from jax.experimental import topologies

from bert_jax.pretraining import pretrain
from bert_jax.training import hardware, sharding

GIB = hardware.GIB


@dataclasses.dataclass
class PlanReport:
    """What one compiled step costs on one topology. Bytes are per chip."""

    topology: str
    num_chips: int
    devices_used: int
    device_kind: str
    mesh_shape: dict[str, int]
    global_batch_size: int
    max_seq_length: int
    num_train_steps: int
    param_bytes: int
    opt_state_bytes: int
    argument_bytes: int
    output_bytes: int
    temp_bytes: int  # activations and temporaries
    hbm_per_chip_bytes: int  # peak estimate: arguments + outputs - aliased + temporaries
    hbm_capacity_bytes: int
    fits: bool
    flops_per_step: float  # the whole step, all chips together
    flops_source: str
    # The TPU compiler's own figure x devices: a scanned layer body is counted once.
    xla_cost_analysis_flops: float
    mfu_assumed: float
    est_step_time_s: float
    est_tokens_per_sec: float
    est_total_time_s: float
    compile_time_s: float
    param_shardings: dict[str, list]  # parameter path -> mesh axis per dimension

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _per_device_bytes(tree: Any) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


def topology_devices(topology_name: str) -> list[jax.Device]:
    try:
        desc = topologies.get_topology_desc(platform="tpu", topology_name=topology_name)
    except Exception as e:
        raise RuntimeError(
            f"cannot describe TPU topology {topology_name!r}: {e}. Install the TPU compiler "
            "with `pip install -e '.[tpu]'` (libtpu matching jax)."
        ) from e
    return list(desc.devices)


_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def _required_bytes_from_oom(message: str) -> int | None:
    """Bytes XLA said it needed, from a RESOURCE_EXHAUSTED compile error (else None)."""
    if "RESOURCE_EXHAUSTED" not in message and "Ran out of memory" not in message:
        return None
    match = re.search(r"required for [^(]*\(([\d.]+)([KMGT]?)\)", message) or re.search(
        r"[Uu]sed ([\d.]+)([KMGT]?)i?B? of", message
    )
    if not match:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _mesh_devices(config: ml_collections.ConfigDict, devices: list[jax.Device]) -> list:
    """All chips, or the first prod(mesh_shape) when the config asks for fewer."""
    shape = list(config.mesh_shape)
    if -1 in shape:
        return devices
    wanted = math.prod(shape)
    if wanted > len(devices):
        raise ValueError(f"mesh_shape {shape} needs {wanted} devices; topology has {len(devices)}")
    return devices[:wanted]


@dataclasses.dataclass(frozen=True)
class _Placement:
    """Where the step runs: the devices of the mesh on one topology."""

    topology_name: str
    topo: Any  # hardware.parse_topology's description
    devices: list  # the devices of the mesh
    devices_per_chip: int
    mesh: Any
    chips_used: int


@dataclasses.dataclass(frozen=True)
class _StepMemory:
    """Per-device bytes of one step as compiled (or as the TPU compiler refused it)."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    peak_bytes: int
    xla_flops: float  # the TPU compiler's figure x devices; 0 when it did not compile
    param_shardings: Any  # the parameters' shardings (a tree like the params)


def _placement(config: ml_collections.ConfigDict, topology_name: str) -> _Placement:
    topo = hardware.parse_topology(topology_name)
    all_devices = topology_devices(topology_name)
    devices = _mesh_devices(config, all_devices)
    devices_per_chip = len(all_devices) // topo.num_chips
    mesh = sharding.make_mesh(config.mesh_shape, devices)
    chips_used = max(1, len(devices) // devices_per_chip)
    return _Placement(topology_name, topo, devices, devices_per_chip, mesh, chips_used)


def _setup(config: ml_collections.ConfigDict, mesh: Any) -> Any:
    """The pre-training step's model, state and shardings on `mesh` (abstract until run)."""
    return pretrain.Pretraining(config, mesh)


def _batch_shape(config: ml_collections.ConfigDict) -> tuple[int, int, int]:
    return int(config.global_batch_size), int(config.max_seq_length), int(config.max_predictions_per_seq)


def _compile_step(setup: Any, config: ml_collections.ConfigDict) -> tuple[Any, int | None, float]:
    """(the compiled step, or None with the temporaries' bytes XLA said it needed when the
    TPU compiler refused it for running out of memory; compile seconds)."""
    start = time.perf_counter()
    try:
        compiled, oom_temp_bytes = setup.compile_train_step(*_batch_shape(config)), None
    except Exception as e:  # the TPU compiler refuses programs that OOM
        oom_temp_bytes = _required_bytes_from_oom(str(e))
        if oom_temp_bytes is None:
            raise
        compiled = None
    return compiled, oom_temp_bytes, time.perf_counter() - start


def _compiled_memory(compiled: Any, n_devices: int) -> _StepMemory:
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax returned one dict per program
        cost = cost[0]
    argument_bytes, output_bytes = mem.argument_size_in_bytes, mem.output_size_in_bytes
    temp_bytes = mem.temp_size_in_bytes
    return _StepMemory(
        argument_bytes=argument_bytes,
        output_bytes=output_bytes,
        temp_bytes=temp_bytes,
        peak_bytes=argument_bytes + output_bytes - mem.alias_size_in_bytes + temp_bytes,
        xla_flops=float(cost.get("flops", 0.0)) * n_devices,
        # The shardings the compiled program takes its parameters with, as XLA settled them.
        param_shardings=compiled.input_shardings[0][0].params,
    )


def _oom_memory(setup: Any, batch: Any, temp_bytes: int) -> _StepMemory:
    """Did not fit: XLA named the temporaries it needed; state and batch come on top."""
    argument_bytes = _per_device_bytes(setup.abstract_state) + _per_device_bytes(batch)
    return _StepMemory(
        argument_bytes=argument_bytes,
        output_bytes=0,
        temp_bytes=temp_bytes,
        peak_bytes=argument_bytes + temp_bytes,
        xla_flops=0.0,
        param_shardings=setup.state_shardings.params,
    )


def _param_specs(param_shardings: Any) -> dict[str, list]:
    """Parameter path ("bert/encoder/...") -> mesh axis per dimension."""
    return {
        "/".join(str(k.key) for k in path if hasattr(k, "key")): list(s.spec)
        for path, s in jax.tree_util.tree_flatten_with_path(param_shardings)[0]
    }


def _report(
    config: ml_collections.ConfigDict,
    where: _Placement,
    state: Any,
    mem: _StepMemory,
    compile_time: float,
    mfu_assumed: float,
) -> PlanReport:
    """`mem` (per device) scaled to chips, and the step time at `mfu_assumed` of the peak."""
    per_chip = where.devices_per_chip
    generation = where.topo.generation
    flops_per_step = step_flops(config)
    step_time = flops_per_step / (where.chips_used * generation.peak_bf16_flops * mfu_assumed)
    tokens = config.global_batch_size * config.max_seq_length
    return PlanReport(
        topology=where.topology_name,
        num_chips=where.chips_used,
        devices_used=len(where.devices),
        device_kind=where.devices[0].device_kind,
        mesh_shape=dict(where.mesh.shape),
        global_batch_size=int(config.global_batch_size),
        max_seq_length=int(config.max_seq_length),
        num_train_steps=int(config.num_train_steps),
        param_bytes=_per_device_bytes(state.params) * per_chip,
        opt_state_bytes=_per_device_bytes(state.opt_state) * per_chip,
        argument_bytes=mem.argument_bytes * per_chip,
        output_bytes=mem.output_bytes * per_chip,
        temp_bytes=mem.temp_bytes * per_chip,
        hbm_per_chip_bytes=mem.peak_bytes * per_chip,
        hbm_capacity_bytes=generation.hbm_bytes,
        fits=mem.peak_bytes <= generation.hbm_bytes // per_chip,
        flops_per_step=flops_per_step,
        flops_source="xla cost_analysis of the same step (layers unrolled, one device)",
        xla_cost_analysis_flops=mem.xla_flops,
        mfu_assumed=mfu_assumed,
        est_step_time_s=step_time,
        est_tokens_per_sec=tokens / step_time,
        est_total_time_s=step_time * int(config.num_train_steps),
        compile_time_s=compile_time,
        param_shardings=_param_specs(mem.param_shardings),
    )


def plan(config: ml_collections.ConfigDict, topology_name: str, mfu_assumed: float = 0.45) -> PlanReport:
    """Compiles `config`'s pre-training step for `topology_name` and estimates its cost."""
    where = _placement(config, topology_name)
    setup = _setup(config, where.mesh)
    batch = setup.abstract_batch(*_batch_shape(config))
    compiled, oom_temp_bytes, compile_time = _compile_step(setup, config)
    if compiled is not None:
        mem = _compiled_memory(compiled, len(where.devices))
    else:
        mem = _oom_memory(setup, batch, oom_temp_bytes)
    return _report(config, where, setup.abstract_state, mem, compile_time, mfu_assumed)


def step_flops(config: ml_collections.ConfigDict) -> float:
    """FLOPs of one whole train step (all chips together), from XLA's cost analysis.

    The step is lowered — not compiled — for one CPU device with the layers unrolled:
    XLA's analysis of a compiled scan counts the loop body once, not once per layer, and
    the TPU compiler's own figure is per chip after partitioning. Lowering takes seconds.
    """
    config = config.copy_and_resolve_references()
    with config.unlocked():
        config.model.scan_layers = False
        config.mesh_shape = (1, 1, 1)
    mesh = sharding.make_mesh((1, 1, 1), jax.devices("cpu")[:1])
    setup = _setup(config, mesh)
    batch = setup.abstract_batch(*_batch_shape(config))
    with jax.set_mesh(mesh):
        cost = setup.train_step.lower(setup.abstract_state, batch).cost_analysis()
    if isinstance(cost, list):
        cost = cost[0]
    return float(cost["flops"])


def _human_bytes(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _human_time(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def format_report(r: PlanReport) -> str:
    rows = [
        ("topology", f"{r.topology} ({r.num_chips} chips used, {r.device_kind})"),
        ("mesh", " x ".join(f"{k}={v}" for k, v in r.mesh_shape.items())),
        ("batch x seq", f"{r.global_batch_size} x {r.max_seq_length}"),
        ("parameters / chip", _human_bytes(r.param_bytes)),
        ("optimizer state / chip", _human_bytes(r.opt_state_bytes)),
        ("activations+temp / chip", _human_bytes(r.temp_bytes)),
        (
            "total HBM / chip",
            f"{_human_bytes(r.hbm_per_chip_bytes)} of {_human_bytes(r.hbm_capacity_bytes)}",
        ),
        ("fits", "yes" if r.fits else "NO"),
        ("FLOPs / step (all chips)", f"{r.flops_per_step:.3e} ({r.flops_source})"),
        ("step time", f"{r.est_step_time_s * 1e3:.1f} ms at {r.mfu_assumed:.0%} MFU"),
        ("tokens / s", f"{r.est_tokens_per_sec:,.0f}"),
        ("time for all steps", f"{_human_time(r.est_total_time_s)} ({r.num_train_steps:,} steps)"),
        ("compile time", f"{r.compile_time_s:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
