"""The pre-training step compiled for an NVIDIA H100 on a machine without a GPU: memory,
kernels and bytes moved, for each shape of `gpu_pretrain.py` and each variant.

XLA compiles for a GPU it is only told about (`jax.experimental.topologies` with an H100's
target description, `H100`): what `bench/gpu_pretrain.py` will run, checked and sized
before a GPU is rented. Nothing runs, so nothing here is a time. Per shape and contender:

- ``temp GiB``: the compiled step's temporaries (activations kept for the backward pass
  and scratch), from XLA's buffer assignment;
- ``kernels fwd/bwd``, ``GB fwd/bwd``: kernels launched by one step of the forward and of
  the backward layer loop (a scan step: one layer, or one group of layers for ModernBERT;
  none with unrolled layers), and the bytes they read and write;
- ``step kernels``, ``step GB``: the same for the whole step (every loop's body times its
  trip count), which compares scanned and unrolled layers.

Bytes are a model of the memory traffic from the HLO's shapes: every operand and result
once (no cache reuse), an operand a kernel reads only through slices (a layer's slot of
a stacked buffer, one of several products of one matmul) or updates in place as the
slices. For comparing variants, not a measurement.
Without autotuning (it needs the GPU) XLA takes default matmul tilings, so kernel counts
and bytes hold but matmul speed is not modelled.

    python bench/gpu_compile.py [--only 128,512] [--variant NAME:KEY=VALUE[;KEY=VALUE]]
                                [--target_config FILE] [--by_source N]

``--by_source N``: under each contender, the N places in the model code (`source`: forward
or backward, the end of the op's name) whose kernels move the most bytes.

``--target_config``: another GPU's description, e.g. the one `gpu_session.sh` writes on a
GPU machine (``target_config.txtpb``); default `H100`.

Needs JAX's CUDA plugin at the installed jax's version (``pip install "jax[cuda12]==X"``,
X = ``jax.__version__``); no GPU, no driver. ``JAX_PLATFORMS=cpu`` is set here.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["JAX_PLATFORMS"] = "cpu"

from bench import gpu_pretrain  # noqa: E402

# One H100 SXM (80 GB HBM3), as XLA's GPU target description (`stream_executor.GpuTargetConfigProto`).
H100 = """
gpu_device_info {
  threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: 233472 threads_per_core_limit: 2048 core_count: 132
  fpus_per_core: 128 block_dim_limit_x: 2147483647 block_dim_limit_y: 65535
  block_dim_limit_z: 65535 memory_bandwidth: 3352320000000 l2_cache_size: 52428800
  clock_rate_ghz: 1.98 device_memory_size: 84929347584 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 } registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 10 }
runtime_version { major: 12 minor: 8 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""

_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "pred": 1, "s8": 1, "u8": 1, "s32": 4, "u32": 4, "s64": 8, "u64": 8}
_ARRAY = re.compile(r"\b(" + "|".join(_BYTES) + r")\[([\d,]*)\]")
_INSTRUCTION = re.compile(r"\s*(?:ROOT )?%(\S+) = (.*?) ([a-z][\w-]*)\((.*?)\)(?:, |$)")
_OPERAND = re.compile(r"%([\w.\-]+)")
_KERNELS = ("fusion", "custom-call", "copy", "transpose", "dot", "convolution")


def _bytes(type_text: str) -> int:
    total = 0
    for dtype, dims in _ARRAY.findall(type_text):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * _BYTES[dtype]
    return total


def computations(hlo: str) -> dict[str, list[str]]:
    """The HLO module's computations: name -> instruction lines."""
    found: dict[str, list[str]] = {}
    current = None
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY )?%(\S+) \(.*\{$", line)
        if head:
            current = found.setdefault(head.group(1), [])
        elif current is not None and line.strip() not in ("", "}"):
            current.append(line)
    return found


def _fused_access(lines: list[str]) -> tuple[dict[int, int], int | None]:
    """What a fused computation touches of its larger operands: (parameter index -> bytes
    read, for parameters read only through slices (static, or dynamic: one layer's slot of
    saved activations; bitcasts followed) or only updated in place; bytes written, when its
    result is updated in place)."""
    aliases: dict[str, int] = {}  # parameter, or a bitcast of one -> parameter index
    sizes: dict[str, int] = {}
    updates: dict[str, int] = {}  # in-place update -> bytes it writes
    read: dict[int, int] = {}
    whole: set[int] = set()  # parameters some instruction reads in full
    written = None
    for line in lines:
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name, result, op, args = m.groups()
        operands = _OPERAND.findall(args)
        sizes[name] = _bytes(result)
        if op == "parameter":
            aliases[name] = int(args)
        elif op == "bitcast" and operands[0] in aliases:
            aliases[name] = aliases[operands[0]]
        elif op in ("slice", "dynamic-slice") and operands[0] in aliases:
            index = aliases[operands[0]]
            read[index] = read.get(index, 0) + sizes[name]
            whole.update(aliases[o] for o in operands[1:] if o in aliases)
        elif op == "dynamic-update-slice":
            updates[name] = sizes.get(operands[1], 0)
            if operands[0] in aliases:
                read.setdefault(aliases[operands[0]], 0)  # updated in place, not read
            whole.update(aliases[o] for o in operands[1:] if o in aliases)
        else:
            whole.update(aliases[o] for o in operands if o in aliases)
        if line.lstrip().startswith("ROOT "):
            if op == "dynamic-update-slice":
                written = updates[name]
            elif op == "tuple":
                written = sum(updates.get(o, sizes.get(o, 0)) for o in operands)
    return {i: n for i, n in read.items() if i not in whole}, written


def _kernel_bytes(lines: list[str], bodies: dict[str, list[str]]) -> Iterator[tuple[int, str]]:
    """(bytes read and written, the source it was traced from: `source`) of each kernel one
    pass of a computation's own instructions launches (loops it runs are `step_costs`')."""
    sizes: dict[str, int] = {}
    for line in lines:
        m = _INSTRUCTION.match(line)
        if not m:
            continue
        name, result, op, args = m.groups()
        sizes[name] = _bytes(result)
        if op not in _KERNELS:
            continue
        names = _OPERAND.findall(args)
        operands = [sizes.get(a, 0) for a in names]
        fused = re.search(r"calls=%([^,\s]+)", line)
        read, written = _fused_access(bodies.get(fused.group(1), []) if fused else [])
        for index, size in read.items():
            operands[index] = min(operands[index], size)
        if op == "custom-call":
            operands = _custom_call_reads(line, names, operands)
        yield (sizes[name] if written is None else written) + sum(operands), source(line)


def _custom_call_reads(line: str, names: list[str], operands: list[int]) -> list[int]:
    """A custom call's operand bytes read: a buffer passed several times once (a kernel
    reading slots of one stacked array through its block specs), a buffer the call
    writes into (``output_to_operand_aliasing``) not at all. The result is counted whole,
    though a kernel may write only part of an aliased buffer (an over-count)."""
    aliasing = re.search(r"output_to_operand_aliasing=\{(.*?)\}, \w+=", line)
    aliased = {int(i) for i in re.findall(r": \((\d+), ", aliasing.group(1))} if aliasing else set()
    seen: set[str] = set()
    out = []
    for index, (name, size) in enumerate(zip(names, operands, strict=True)):
        out.append(0 if index in aliased or name in seen else size)
        seen.add(name)
    return out


def source(line: str) -> str:
    """What an instruction computes, by the model code it was traced from: "fwd" or "bwd"
    (a transposed, i.e. backward, computation) and the last three parts of its ``op_name``
    with layer numbers as ``#`` (``bwd layer_#/layer_#.feed_forward/mul``), so that every
    layer's share adds up; "(no source)" without metadata."""
    m = re.search(r'op_name="([^"]*)"', line)
    if not m:
        return "(no source)"
    tail = re.sub(r"\d+", "#", "/".join(m.group(1).split("/")[-3:]))
    return f"{'bwd' if 'transpose(' in m.group(1) else 'fwd'} {tail}"


def loop_costs(lines: list[str], bodies: dict[str, list[str]]) -> tuple[int, int]:
    """(kernels launched, bytes read and written) by one pass of a computation's own
    instructions (loops it runs are `step_costs`')."""
    moved = [b for b, _ in _kernel_bytes(lines, bodies)]
    return len(moved), sum(moved)


def layer_loops(hlo: str) -> list[tuple[int, int]]:
    """(kernels, bytes) of each layer loop's body, in program order (forward, backward)."""
    bodies = computations(hlo)
    return [loop_costs(bodies[b], bodies) for b in re.findall(r"%while(?:\.\d+)? = .*? body=%([^,\s]+)", hlo)]


_LOOP = re.compile(r" while\(.*? body=%([^,\s]+).*?\"known_trip_count\":\{\"n\":\"(\d+)\"")


def _loops(lines: list[str]) -> Iterator[tuple[str, int]]:
    """(body, trip count) of each loop a computation runs."""
    for line in lines:
        loop = _LOOP.search(line)
        if loop:
            yield loop.group(1), int(loop.group(2))


Kernel = tuple[int, int, str]  # launches a step, bytes a launch moves, `source`


def _program_kernels(name: str, bodies: dict[str, list[str]], times: int = 1) -> Iterator[Kernel]:
    """(launches, bytes a launch moves, `source`) of each kernel a computation runs, the
    kernels of the loops it runs included (a body's launches times its trip count)."""
    for moved, where in _kernel_bytes(bodies[name], bodies):
        yield times, moved, where
    for body, trips in _loops(bodies[name]):
        yield from _program_kernels(body, bodies, times * trips)


def _step_kernels(hlo: str) -> list[Kernel]:
    """`_program_kernels` of the module's entry: the whole step."""
    entry = re.search(r"^ENTRY %(\S+) ", hlo, re.MULTILINE)
    return list(_program_kernels(entry.group(1), computations(hlo))) if entry else []


def step_costs(hlo: str) -> tuple[int, int]:
    """(kernels, bytes) of the whole step: the entry's kernels and every loop's body times
    its trip count (scanned and unrolled layers compare here)."""
    kernels = _step_kernels(hlo)
    return sum(n for n, _, _ in kernels), sum(n * moved for n, moved, _ in kernels)


def source_bytes(hlo: str) -> collections.Counter:
    """The step's modelled bytes (`step_costs`) by `source`: where they go."""
    out: collections.Counter = collections.Counter()
    for n, moved, where in _step_kernels(hlo):
        out[where] += n * moved
    return out


def gpu_devices(target_config: str = H100) -> list:
    """The compile-only device of a GPU described by `target_config` (no GPU needed)."""
    import jax
    from jax.experimental import topologies

    try:
        topology = topologies.get_topology_desc(
            platform="cuda", target_config=target_config, topology="1x1x1"
        )
    except NotImplementedError:  # no CUDA plugin: JAX knows no "cuda" platform
        wheel = f"jax[cuda12]=={jax.__version__}"
        message = f'bench/gpu_compile.py compiles with JAX\'s CUDA plugin: pip install "{wheel}"'
        raise SystemExit(message) from None
    return list(topology.devices)


def compile_one(shape: str, changes: dict, devices: list) -> dict:
    from bert_jax.commands import run_settings
    from bert_jax.pretraining import pretrain
    from bert_jax.training import compile_cache, sharding

    c = gpu_pretrain.run_config(gpu_pretrain.SHAPES[shape], False, changes)
    mesh = sharding.make_mesh((1, 1, 1), devices)
    setup = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    start = time.perf_counter()
    with compile_cache.off():  # a program for a GPU this process lacks cannot be cached here
        compiled = setup.compile_train_step(c.global_batch_size, c.max_seq_length, c.max_predictions_per_seq)
    hlo = compiled.as_text()
    kernels = r'custom_call_target="(__cudnn[^"]*|__gpu\$xla\.gpu\.triton)"'  # cuDNN's and Triton's
    custom = collections.Counter(re.findall(kernels, hlo))
    return {
        "compile_s": time.perf_counter() - start,
        "temp_bytes": compiled.memory_analysis().temp_size_in_bytes,
        "loops": layer_loops(hlo),
        "step": step_costs(hlo),
        "sources": source_bytes(hlo),
        "attention_calls": dict(custom),
        "device": devices[0].device_kind,
    }


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(gpu_pretrain.SHAPES), help="shapes, comma-separated")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[;KEY=VALUE]")
    parser.add_argument("--target_config", help="a GPU's target description (text proto); default: an H100")
    parser.add_argument("--by_source", type=int, default=0, metavar="N", help="the N costliest sources")
    args = parser.parse_args()
    devices = gpu_devices(Path(args.target_config).read_text() if args.target_config else H100)
    contenders = {"bert_jax": {}}
    for text in args.variant:
        name, _, keys = text.partition(":")
        contenders[name] = gpu_pretrain.parse_keys([k for k in keys.split(";") if k])
    shapes = args.only.split(",")
    if unknown := [s for s in shapes if s not in gpu_pretrain.SHAPES]:
        parser.error(f"--only: unknown {', '.join(unknown)} (known: {', '.join(gpu_pretrain.SHAPES)})")
    device = ""
    for shape in shapes:
        print(f"\n{shape}: {gpu_pretrain.SHAPES[shape].title}")
        print(
            f"{'':<22}{'temp GiB':>9}{'kernels fwd/bwd':>17}{'GB fwd/bwd':>14}"
            f"{'step kernels':>14}{'step GB':>9}{'compile s':>11}  attention"
        )
        for name, changes in contenders.items():
            r = compile_one(shape, changes, devices)
            if r["device"] != device:
                device = r["device"]
                print(f"(compiled for {device}, without one)")
            loops = r["loops"] or [(0, 0)]
            kernels = "/".join(str(k) for k, _ in loops)
            moved = "/".join(f"{b / 1e9:.1f}" for _, b in loops)
            calls = ", ".join(f"{k} x{v}" for k, v in sorted(r["attention_calls"].items())) or "XLA"
            temp = r["temp_bytes"] / 2**30
            step_kernels, step_bytes = r["step"]
            print(
                f"{name:<22}{temp:>9.2f}{kernels:>17}{moved:>14}{step_kernels:>14}{step_bytes / 1e9:>9.1f}"
                f"{r['compile_s']:>11.1f}  {calls}"
            )
            for where, moved in r["sources"].most_common(args.by_source):
                print(f"{'':<4}{moved / 1e9:>7.2f} GB  {where}")


if __name__ == "__main__":
    main()
