"""Facts about accelerators: peak FLOP/s, HBM, Cloud TPU names. No JAX import here.

One table feeds the MFU metric of the train loop, the `plan` command's memory and
step-time estimates, and the `launch/` scripts' accelerator-type and runtime names, so
the three never disagree.
"""

from __future__ import annotations

import dataclasses
import glob
import math
import os
import re
import sys

GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
    """One Cloud TPU generation, per chip."""

    name: str  # the topology prefix, e.g. "v5e"
    device_kind: str  # what jax's Device.device_kind reports
    peak_bf16_flops: float  # per chip
    hbm_bytes: int  # per chip
    cores_per_chip: int  # TensorCores: v4/v5p accelerator types count cores, v5e/v6e chips
    accelerator_prefix: str  # gcloud --accelerator-type prefix
    runtime_version: str  # gcloud --version / --runtime-version


TPU_GENERATIONS: dict[str, TpuGeneration] = {
    g.name: g
    for g in (
        TpuGeneration("v4", "TPU v4", 275e12, 32 * GIB, 2, "v4", "tpu-ubuntu2204-base"),
        TpuGeneration("v5e", "TPU v5 lite", 197e12, 16 * GIB, 1, "v5litepod", "v2-alpha-tpuv5-lite"),
        TpuGeneration("v5p", "TPU v5", 459e12, 95 * GIB, 2, "v5p", "v2-alpha-tpuv5"),
        TpuGeneration("v6e", "TPU v6 lite", 918e12, 32 * GIB, 1, "v6e", "v2-alpha-tpuv6e"),
    )
}

# Dense bf16 peaks (no sparsity) of GPUs, per device; used for MFU when training on one.
GPU_PEAK_BF16_FLOPS: dict[str, float] = {
    "NVIDIA H200": 989e12,
    "NVIDIA H100 80GB HBM3": 989e12,
    "NVIDIA H100": 989e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100": 312e12,
}


@dataclasses.dataclass(frozen=True)
class Topology:
    """A parsed topology name such as ``v5e:4x4`` or ``v4:2x2x4``."""

    name: str
    generation: TpuGeneration
    dims: tuple[int, ...]

    @property
    def num_chips(self) -> int:
        return math.prod(self.dims)

    @property
    def accelerator_type(self) -> str:
        """gcloud's name: v4/v5p count TensorCores (``v4-32``), v5e/v6e chips (``v6e-64``)."""
        count = self.num_chips * self.generation.cores_per_chip
        return f"{self.generation.accelerator_prefix}-{count}"

    @property
    def num_hosts(self) -> int:
        """TPU VM hosts: 4 chips per host (v5e/v6e 1-host slices hold up to 8 chips)."""
        if self.generation.name in ("v5e", "v6e") and self.num_chips <= 8:
            return 1
        return max(1, self.num_chips // 4)


# The shape gcloud gives each slice size of an ``--accelerator-type`` (chips; Cloud TPU's
# documented default topologies): v5e and v6e chips in a plane, v4 and v5p in a cube.
SLICE_SHAPES: dict[int, dict[int, str]] = {
    2: {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"},
    3: {
        4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8",
        512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16", 4096: "16x16x16",
    },
}  # fmt: skip


def slice_shapes(generation: TpuGeneration) -> dict[int, str]:
    """`SLICE_SHAPES` of a generation: chips -> ``AxB[xC]``."""
    return SLICE_SHAPES[3 if generation.cores_per_chip == 2 else 2]


def parse_topology(name: str) -> Topology:
    """``v5e:4x4`` → Topology; so does gcloud's accelerator type of that slice
    (``v5litepod-16``, also ``v5e-16``; ``v4-32`` and ``v5p-32`` count TensorCores), as the
    shape gcloud gives it (`SLICE_SHAPES`), named ``GEN:AxB[xC]``; a clear error for
    anything else."""
    text = name.strip()
    typed = re.fullmatch(r"(v\d+[a-z]*)-(\d+)", text)
    if typed:
        return _accelerator_type(text, typed.group(1), int(typed.group(2)))
    match = re.fullmatch(r"(v\d+[a-z]?):(\d+(?:x\d+){1,2})", text)
    if not match:
        raise ValueError(
            f"topology {name!r} is neither of the form GEN:AxB[xC] (e.g. v5e:4x4, v4:2x2x4) nor "
            "an accelerator type (e.g. v5litepod-16, v4-32)"
        )
    gen_name, dims = match.groups()
    if gen_name not in TPU_GENERATIONS:
        raise ValueError(f"unknown TPU generation {gen_name!r}; known: {sorted(TPU_GENERATIONS)}")
    return Topology(text, TPU_GENERATIONS[gen_name], tuple(int(d) for d in dims.split("x")))


def _accelerator_type(text: str, prefix: str, count: int) -> Topology:
    by_prefix = {g.accelerator_prefix: g for g in TPU_GENERATIONS.values()}
    gen = by_prefix.get(prefix) or TPU_GENERATIONS.get(prefix)
    if gen is None:
        known = sorted(by_prefix)
        raise ValueError(f"unknown accelerator type {text!r}: its prefix is none of {known}")
    shapes = slice_shapes(gen)
    chips, left = divmod(count, gen.cores_per_chip)
    if left or chips not in shapes:
        sizes = ", ".join(f"{gen.accelerator_prefix}-{c * gen.cores_per_chip}" for c in shapes)
        raise ValueError(f"accelerator type {text!r} is not a slice gcloud makes; it makes {sizes}")
    dims = shapes[chips]
    return Topology(f"{gen.name}:{dims}", gen, tuple(int(d) for d in dims.split("x")))


def peak_flops_for_device_kind(device_kind: str) -> float | None:
    """Peak bf16 FLOP/s of one device of this kind, or None when unknown (e.g. CPU)."""
    for gen in TPU_GENERATIONS.values():
        if device_kind == gen.device_kind:
            return gen.peak_bf16_flops
    for kind, peak in GPU_PEAK_BF16_FLOPS.items():
        if device_kind.startswith(kind):
            return peak
    return None


def local_accelerator() -> str | None:
    """ "tpu" or "gpu" when this machine has one (from its device files, without starting
    any runtime), None for a CPU-only machine: TPU VMs expose /dev/accel* (v2-v4) or
    /dev/vfio/<n> (v5e and later), NVIDIA machines /dev/nvidia<n>."""
    if glob.glob("/dev/accel*") or [p for p in glob.glob("/dev/vfio/*") if p.rsplit("/", 1)[-1].isdigit()]:
        return "tpu"
    if glob.glob("/dev/nvidia[0-9]*"):
        return "gpu"
    return None


def quiet_platform(*, verbose: bool = False) -> None:
    """A clean run prints only its own lines, on CPU, GPU and TPU alike (the CLI and the
    Python API both call this before JAX starts a backend):

    - on a machine with no TPU or GPU device, JAX is limited to the CPU (else an installed
      libtpu probes for a TPU and prints a dozen lines of its own errors); where there is
      one, JAX's detection is left alone; ``JAX_PLATFORMS`` set by the user wins;
    - TensorFlow's C++ start-up logs are off (``TF_CPP_MIN_LOG_LEVEL=3``) unless `verbose`.

    Environment variables, so that worker processes inherit them.
    """
    if not verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "JAX_PLATFORMS" not in os.environ and local_accelerator() is None:
        os.environ["JAX_PLATFORMS"] = "cpu"
        if "jax" in sys.modules:  # imported, no backend started yet
            sys.modules["jax"].config.update("jax_platforms", "cpu")
