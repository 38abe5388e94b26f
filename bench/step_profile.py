"""Where a pre-training step's time goes: a profile of bert_jax's step, summed by operation.

Runs bert_jax's step of a `bench/gpu_pretrain.py` shape (its run preset, bfloat16) under
`jax.profiler`, reads the trace back (`jax.profiler.ProfileData`) and prints, per step:

- the wall time, the time the device spent in operations, and the rest (idle: dispatch,
  host work, waits; each step's loss is read once the next step is queued, as in
  `bench/gpu_pretrain.py`);
- the time per kind of operation (matmuls, fused attention, fusions that end in a
  reduction, elementwise fusions, copies, collectives, the rest), from the HLO category
  XLA records for each operation, or from its name where none is recorded;
- the `--top` operations by time, with each one's category.

    python bench/step_profile.py [--shape 128|128-nodrop|512|modernbert-1024] [--steps 5]
                                 [--top 25] [--set KEY=VALUE] [--tiny] [--keep DIR]

On a machine without a GPU it profiles the CPU step (use `--tiny`). `--keep DIR`
copies the trace (`*.xplane.pb`, readable by TensorBoard's profile plugin or xprof) into
DIR. The last line is ``busy=<fraction of the wall time the device was in operations>``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import gpu_pretrain  # noqa: E402

# HLO categories (as the GPU profiler records them) and name fragments, to the kinds printed.
KINDS = (
    ("attention", ("fmha", "flash", "cudnn", "attention")),
    ("matmul", ("gemm", "dot", "convolution", "cublas", "matmul", "nvjet", "xmma", "cutlass")),
    ("reduction fusion", ("input fusion", "reduction", "reduce", "input_fusion")),
    ("elementwise fusion", ("loop fusion", "fusion", "elementwise")),
    ("copy / layout", ("copy", "transpose", "data formatting", "dynamic-update-slice", "memcpy", "memset")),
    ("collective", ("all-reduce", "all-gather", "reduce-scatter", "collective")),
)


def kind_of(name: str, category: str) -> str:
    """The printed kind of an operation from its HLO category (if recorded) and its name."""
    for text in (category.lower(), name.lower()):
        if not text:
            continue
        for kind, fragments in KINDS:
            if any(f in text for f in fragments):
                return kind
    return "other"


def device_events(path: str) -> list[tuple[str, str, float, str]]:
    """(operation name, HLO category, seconds, where in the program) of every operation the
    device ran; where: the JAX name stack the profiler recorded, if any."""
    import warnings

    from jax.profiler import ProfileData

    warnings.filterwarnings("ignore", "builtin type event_stats", DeprecationWarning)
    data = ProfileData.from_file(path)
    planes = list(data.planes)
    gpus = [p for p in planes if p.name.startswith("/device:GPU:0")]
    events = []
    if gpus:
        lines = list(gpus[0].lines)
        ops = [ln for ln in lines if ln.name == "XLA Ops"] or [
            ln for ln in lines if ln.name.startswith("Stream")
        ]
        for line in ops:
            for e in line.events:
                stats = dict(e.stats)
                where = str(stats.get("tf_op", "") or stats.get("long_name", ""))
                events.append((str(e.name), str(stats.get("hlo_category", "")), e.duration_ns * 1e-9, where))
        return events
    # The CPU backend: operations carry hlo_op and hlo_module stats; keep the module that took
    # the most time (the step). Its threads run operations side by side, so the sums overcount.
    by_module: dict[str, list] = collections.defaultdict(list)
    for plane in planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        for line in plane.lines:
            for e in line.events:
                stats = dict(e.stats)
                if "hlo_op" in stats:
                    op = (str(stats["hlo_op"]), "", e.duration_ns * 1e-9, "")
                    by_module[str(stats.get("hlo_module", ""))].append(op)
    if by_module:
        events = max(by_module.values(), key=lambda es: sum(e[2] for e in es))
    return events


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", choices=sorted(gpu_pretrain.SHAPES), default="128")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--tiny", action="store_true", help="the shape at a tiny size (for a CPU)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep", default="", help="a folder to copy the trace into")
    args = parser.parse_args()

    import jax

    from bench import peers
    from bert_jax.commands import run_settings

    changes = gpu_pretrain.parse_keys(args.set)
    c = gpu_pretrain.run_config(gpu_pretrain.SHAPES[args.shape], args.tiny, changes)
    batch, seq = c.global_batch_size, c.max_seq_length
    step, _ = peers.bert_jax_step(run_settings.pretrain_settings(c))
    for _ in range(3):
        float(step())
    trace_dir = tempfile.mkdtemp(prefix="step_profile_")
    with jax.profiler.trace(trace_dir):  # each loss read once the next step is queued
        wall = peers.time_steps(step, warmup=0, iters=args.steps)
    path = sorted(glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True))[-1]
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        shutil.copy(path, os.path.join(args.keep, "step.xplane.pb"))
    events = device_events(path)
    by_op: dict[str, list] = collections.defaultdict(lambda: [0.0, 0, "", ""])
    for name, category, seconds, where in events:
        entry = by_op[name]
        entry[0] += seconds / args.steps
        entry[1] += 1
        entry[2] = entry[2] or category
        entry[3] = entry[3] or where
    busy = sum(v[0] for v in by_op.values())
    kinds: dict[str, float] = collections.Counter()
    for name, (seconds, _, category, _) in by_op.items():
        kinds[kind_of(name, category)] += seconds
    device = jax.devices()[0].device_kind
    title = gpu_pretrain.SHAPES[args.shape].title
    print(f"{device}: {title}, batch {batch} x seq {seq}, {args.steps} steps profiled")
    print(
        f"per step: wall {wall * 1e3:.2f} ms, in operations {busy * 1e3:.2f} ms,"
        f" other {(wall - busy) * 1e3:.2f} ms"
    )
    print(f"\n{'kind':<22}{'ms/step':>10}{'share':>8}")
    for kind, seconds in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"{kind:<22}{seconds * 1e3:>10.2f}{seconds / max(busy, 1e-12):>8.1%}")
    print(f"\n{'operation':<48}{'category':<24}{'ms/step':>9}{'share':>8}{'calls':>7}")
    for name, (seconds, calls, category, where) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[
        : args.top
    ]:
        print(
            f"{name[:47]:<48}{(category or kind_of(name, ''))[:23]:<24}{seconds * 1e3:>9.3f}"
            f"{seconds / max(busy, 1e-12):>8.1%}{calls // args.steps:>7}"
        )
        if where.strip() not in ("", "XlaModule:"):
            print(f"    {where[-100:]}")
    print(f"\nbusy={busy / max(wall, 1e-12):.2f}")


if __name__ == "__main__":
    main()
