"""One pre-training step compiled ahead of time for a TPU topology: its memory and FLOPs.

`placement` lays the run's mesh on a topology's devices (from `libtpu`'s description,
no TPU needed); `measure` compiles the real train step there for abstract state and batch
and reads per-device memory (`memory_analysis`) and the compiler's FLOPs. A program that
does not fit is refused by the TPU compiler; its error names the bytes it needed, which
stand in for the temporaries. `step_flops` counts a whole step's FLOPs (XLA's analysis of
the step lowered for one CPU device with the layers unrolled).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import os
import re
import time
from typing import Any

import jax
import numpy as np
from jax.experimental import topologies

from bert_jax.model import flops
from bert_jax.pretraining import pretrain
from bert_jax.pretraining.settings import PretrainSettings
from bert_jax.training import compile_cache, hardware, sharding


def per_device_bytes(tree: Any) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs."""
    total = 0
    for leaf in jax.tree.leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if leaf.sharding is not None else leaf.shape
        total += math.prod(shape) * np.dtype(leaf.dtype).itemsize
    return total


class NoTpuCompiler(OSError):
    """libtpu (the TPU compiler `plan` compiles with) is not installed."""


def check_topology(topology_name: str) -> hardware.Topology:
    """The parsed topology, when libtpu can describe it; else one line listing the
    shapes it can (before libtpu is loaded). libtpu lays a topology out in hosts of 2x2
    chips (its default host bounds), so it describes a slice whose first two sizes are
    even: Cloud TPU's slices of that kind."""
    try:
        topo = hardware.parse_topology(topology_name)
    except ValueError as e:
        raise ValueError(f"--topology {topology_name}: {e}") from None
    if any(d % 2 for d in topo.dims[:2]):
        gen = topo.generation.name
        shapes = hardware.slice_shapes(topo.generation).values()
        shapes = [s for s in shapes if all(int(d) % 2 == 0 for d in s.split("x")[:2])]
        raise ValueError(
            f"--topology {topology_name}: libtpu describes slices of whole 2x2-chip hosts, so the first "
            f"two sizes must be even, e.g. {', '.join(f'{gen}:{s}' for s in shapes[:8])}"
        )
    return topo


def quiet_libtpu(topo: hardware.Topology) -> None:
    """Without a TPU, libtpu asks the environment for the slice's accelerator type and
    worker hostnames (a TPU VM's metadata server holds them) and prints six lines of
    warnings when they are missing; log-level variables (``TPU_MIN_LOG_LEVEL``,
    ``TPU_STDERR_LOG_LEVEL``, ``TF_CPP_MIN_LOG_LEVEL``, ``GRPC_VERBOSITY``) do not silence
    them. The planned slice's type and this host are what it asks for; the description
    is the same with or without them. Set before libtpu loads, and only off a TPU VM."""
    if hardware.local_accelerator() == "tpu":
        return
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", topo.accelerator_type)
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")


def topology_devices(topology_name: str, num_slices: int = 1) -> list[jax.Device]:
    """The devices of a TPU slice, or of `num_slices` such slices (multislice: each device
    has its ``slice_index``), as libtpu describes them (no TPU needed)."""
    topo = check_topology(topology_name)
    quiet_libtpu(topo)
    if num_slices < 1:
        raise ValueError(f"--num_slices {num_slices}: must be at least 1")
    try:
        desc = topologies.get_topology_desc(platform="tpu", topology_name=topo.name, num_slices=num_slices)
    except Exception as e:
        if importlib.util.find_spec("libtpu") is None or "not installed" in str(e):
            raise NoTpuCompiler(
                "plan compiles with the TPU compiler, libtpu, which is not installed: "
                "pip install -e '.[tpu]' (libtpu matching jax)"
            ) from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--topology {topology_name}: libtpu cannot describe it ({first})") from None
    return list(desc.devices)


_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def required_bytes_from_oom(message: str) -> int | None:
    """Bytes XLA said it needed, from a RESOURCE_EXHAUSTED compile error (else None)."""
    if "RESOURCE_EXHAUSTED" not in message and "Ran out of memory" not in message:
        return None
    match = re.search(r"required for [^(]*\(([\d.]+)([KMGT]?)\)", message) or re.search(
        r"[Uu]sed ([\d.]+)([KMGT]?)i?B? of", message
    )
    if not match:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _mesh_devices(mesh_shape: tuple[int, ...], devices: list[jax.Device], num_slices: int = 1) -> list:
    """All chips, or the first prod(mesh_shape) when the run asks for fewer (of every
    slice, where there are several: then `mesh_shape` is one slice's mesh, or the whole
    mesh, `sharding.make_mesh`)."""
    shape = list(mesh_shape)
    if -1 in shape:
        return devices
    wanted, per_slice = math.prod(shape), len(devices) // num_slices
    if num_slices > 1 and wanted < per_slice:
        return [d for s in range(num_slices) for d in [d for d in devices if d.slice_index == s][:wanted]]
    if wanted > len(devices):
        raise ValueError(f"mesh_shape {shape} needs {wanted} devices; topology has {len(devices)}")
    return devices[:wanted]


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where the step runs: the devices of the mesh on one topology."""

    topology_name: str
    topo: Any  # hardware.parse_topology's description (of one slice)
    devices: list  # the devices of the mesh
    devices_per_chip: int
    mesh: Any
    chips_used: int
    num_slices: int = 1  # slices of `topo`, joined over the data-centre network (multislice)

    @property
    def device_capacity_bytes(self) -> int:
        """HBM of one device (a chip's, shared by its devices)."""
        return self.topo.generation.hbm_bytes // self.devices_per_chip

    def batch_shards(self, global_batch_size: int) -> int:
        """Devices the batch is split over (the mesh's batch axes)."""
        rows = sharding.batch_sharding(self.mesh, 1).shard_shape((global_batch_size,))[0]
        return global_batch_size // rows


@dataclasses.dataclass(frozen=True)
class StepMemory:
    """Per-device bytes of one step as compiled (or as the TPU compiler refused it)."""

    argument_bytes: int
    output_bytes: int
    temp_bytes: int
    peak_bytes: int
    xla_flops: float  # the TPU compiler's figure x devices; 0 when it did not compile
    param_shardings: Any  # the parameters' shardings (a tree like the params)


@dataclasses.dataclass(frozen=True)
class Measured:
    """One step compiled on a placement: its memory, compile time, abstract state and the
    layer loop it was compiled with (`Numerics.layer_loop` decided for the placement)."""

    mem: StepMemory
    compile_time_s: float
    abstract_state: Any
    layer_loop: str


def placement(run: PretrainSettings, topology_name: str, num_slices: int = 1) -> Placement:
    all_devices = topology_devices(topology_name, num_slices)
    topo = hardware.parse_topology(topology_name)
    devices = _mesh_devices(run.training.mesh_shape, all_devices, num_slices)
    devices_per_chip = len(all_devices) // (topo.num_chips * num_slices)
    try:
        mesh = sharding.make_mesh(run.training.mesh_shape, devices)
    except ValueError as e:
        raise ValueError(f"config.{e}" if str(e).startswith("mesh_shape") else str(e)) from None
    chips_used = max(1, len(devices) // devices_per_chip)
    return Placement(topo.name, topo, devices, devices_per_chip, mesh, chips_used, num_slices)


def _batch_shape(run: PretrainSettings) -> tuple[int, int, int]:
    return run.global_batch_size, run.max_seq_length, run.max_predictions_per_seq


def _compiled_memory(compiled: Any, n_devices: int) -> StepMemory:
    mem = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    if isinstance(cost, list):  # older jax returned one dict per program
        cost = cost[0]
    argument_bytes, output_bytes = mem.argument_size_in_bytes, mem.output_size_in_bytes
    temp_bytes = mem.temp_size_in_bytes
    return StepMemory(
        argument_bytes=argument_bytes,
        output_bytes=output_bytes,
        temp_bytes=temp_bytes,
        peak_bytes=argument_bytes + output_bytes - mem.alias_size_in_bytes + temp_bytes,
        xla_flops=float(cost.get("flops", 0.0)) * n_devices,
        # The shardings the compiled program takes its parameters with, as XLA settled them.
        param_shardings=compiled.input_shardings[0][0].params,
    )


def _oom_memory(setup: Any, batch: Any, temp_bytes: int) -> StepMemory:
    """Did not fit: XLA named the temporaries it needed; state and batch come on top."""
    argument_bytes = per_device_bytes(setup.abstract_state) + per_device_bytes(batch)
    return StepMemory(
        argument_bytes=argument_bytes,
        output_bytes=0,
        temp_bytes=temp_bytes,
        peak_bytes=argument_bytes + temp_bytes,
        xla_flops=0.0,
        param_shardings=setup.state_shardings.params,
    )


def measure(run: PretrainSettings, where: Placement) -> Measured:
    """Compiles the pre-training step of `run` (its shapes, remat policy and gradient
    accumulation) on `where`; a program the TPU compiler refuses for memory is measured
    from its error."""
    setup = pretrain.Pretraining(run, where.mesh)
    start = time.perf_counter()
    try:
        with compile_cache.off():  # a program for chips this process lacks cannot be loaded back
            compiled = setup.compile_train_step(*_batch_shape(run))
    except Exception as e:  # the TPU compiler refuses programs that OOM
        oom_temp_bytes = required_bytes_from_oom(str(e))
        if oom_temp_bytes is None:
            raise
        batch = setup.abstract_batch(*_batch_shape(run))
        mem = _oom_memory(setup, batch, oom_temp_bytes)
    else:
        mem = _compiled_memory(compiled, len(where.devices))
    return Measured(mem, time.perf_counter() - start, setup.abstract_state, setup.numerics.layer_loop)


def param_specs(param_shardings: Any) -> dict[str, list]:
    """Parameter path ("bert/encoder/...") -> mesh axis per dimension."""
    return {
        "/".join(str(k.key) for k in path if hasattr(k, "key")): list(s.spec)
        for path, s in jax.tree_util.tree_flatten_with_path(param_shardings)[0]
    }


def step_flops(run: PretrainSettings) -> float:
    """FLOPs of one whole train step (all chips together), from XLA's cost analysis.

    The step is lowered — not compiled — for one CPU device with the layers unrolled and
    no gradient accumulation (the same FLOPs): XLA's analysis of a loop (a scan over
    layers or micro-batches) counts its body once, and the TPU compiler's own figure is
    per chip after partitioning. Rematerialisation's recomputation is counted. Lowering
    takes seconds. Attention is lowered on the XLA path (a Pallas kernel is a custom call
    whose FLOPs XLA does not count), which scores every (query, key) pair; the pairs
    outside local layers' windows are masked there, not model FLOPs, and are taken off
    (`flops.model_flops_per_step`'s count of them, forward and backward).
    """
    numerics = dataclasses.replace(run.training.numerics, attention_kernel="xla", layer_loop="unroll")
    training = dataclasses.replace(run.training, numerics=numerics, mesh_shape=(1, 1, 1), grad_accum_steps=1)
    run = dataclasses.replace(run, training=training)
    mesh = sharding.make_mesh((1, 1, 1), jax.devices("cpu")[:1])
    setup = pretrain.Pretraining(run, mesh)
    batch = setup.abstract_batch(*_batch_shape(run))
    with jax.set_mesh(mesh):
        cost = setup.train_step.lower(setup.abstract_state, batch).cost_analysis()
    if isinstance(cost, list):
        cost = cost[0]
    model = run.model
    rows, seq, _ = _batch_shape(run)
    masked = flops.model_flops_per_step(
        model.replace(global_attn_every_n_layers=1, layer_types=None), rows, seq, 0, nsp=False
    ) - flops.model_flops_per_step(model, rows, seq, 0, nsp=False)
    return float(cost["flops"]) - masked
