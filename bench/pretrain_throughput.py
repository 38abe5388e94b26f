"""Pre-training throughput: bert_jax vs transformers (PyTorch and Flax), same machine, same run.

Each contender runs full forward + backward + AdamW update of BERT pre-training (MLM over
15% of positions + NSP) on the same shapes: a mini model (L4 H256 A4, seq 128, batch 32)
and BERT-Base (seq 128, batch 8), float32. Each runs in its own subprocess (so one
library's threads and allocator do not slow another), one after the other, and the
contenders take turns for ``--rounds`` rounds; each one's best round is reported, so a
burst of load from a neighbour on a shared machine does not decide the ratio. The matmul
peak of this machine is measured in each round of the same run (the best is the MFU
denominator).

    .venv/bin/python bench/pretrain_throughput.py [--steps 5] [--rounds 3] [--only mini]

Prints a table, then ``ratio_mini=<x>`` and ``ratio_base=<x>`` (bert_jax tokens/s over the
faster peer's) as its last two lines.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the matmul peak below: no TPU plugin probing
sys.path.insert(0, str(ROOT))

from bench import workers  # noqa: E402

SHAPES = {"mini": ("mini", 32, 128), "base": ("base", 8, 128)}
NUM_MASKED = 20  # 15% of 128


def _bert_jax_step(preset: str, batch: int, seq: int):
    from bench import peers
    from bert_jax.model.config import model_config_dict

    return peers.bert_jax_pretraining_step(model_config_dict(preset), batch, seq, NUM_MASKED)


def run_one(name: str, shape: str, steps: int) -> dict:
    """Body of one subprocess: time `steps` steps of one contender on one shape."""
    from bench import peers
    from bert_jax.model.config import MODEL_PRESETS

    preset, batch, seq = SHAPES[shape]
    config = MODEL_PRESETS[preset]
    if name == "bert_jax":
        step, flops = _bert_jax_step(preset, batch, seq)
    else:
        data = peers.random_batch(config, batch, seq, NUM_MASKED)
        step = peers.torch_step(config, data) if name == "torch" else peers.flax_step(config, data)
        flops = peers.full_vocab_flops_per_token(config, seq) * batch * seq
    seconds = peers.time_steps(step, warmup=2, iters=steps)
    return {"tokens_per_sec": batch * seq / seconds, "flops_per_sec": flops / seconds}


def measure_peak() -> float:
    """fp32 matmul FLOP/s of this machine (XLA, 2048^2), the MFU denominator for all."""
    import time

    import jax
    import jax.numpy as jnp

    n = 2048
    a = jnp.ones((n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(5):
            f(a).block_until_ready()
        best = max(best, 2 * n**3 * 5 / (time.perf_counter() - start))
    return best


_ISAS = (("avx512f", "AVX-512"), ("avx2", "AVX2"), ("avx", "AVX"))


def cpu_description() -> str:
    """The CPU model and its widest vector extension, so that runs can be compared."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown CPU"
    fields = dict(ln.split(":", 1) for ln in reversed(info.splitlines()) if ":" in ln)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = fields.get("flags", "").split()
    isa = next((name for flag, name in _ISAS if flag in flags), "SSE")
    # The family/model tell AMD Zen 4 (25/17: 256-bit AVX-512 units) from Zen 5 (26/..).
    family = f"family {fields.get('cpu family')} model {fields.get('model')}"
    return f"{fields.get('model name', '?')}, {os.cpu_count()} cores, {isa}, {family}"


def _run_worker(name: str, shape: str, steps: int, env: dict[str, str]) -> dict:
    argv = [sys.executable, __file__, "--worker", name, shape, "--steps", str(steps)]
    return workers.run(argv, env=env, what=f"{name} on {shape}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=sorted(SHAPES), default=None)
    parser.add_argument("--worker", nargs=2, metavar=("NAME", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        workers.report(run_one(*args.worker, args.steps))
        return
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "3"}
    print(f"cpu: {cpu_description()}")
    import transformers

    contenders = ["bert_jax", "torch"]
    if hasattr(transformers, "FlaxBertForPreTraining"):
        contenders.append("flax")
    else:
        print(
            f"flax: transformers {transformers.__version__} has no Flax models (transformers<5 has); not run"
        )
    peaks = []
    ratios = {}
    for shape in [args.only] if args.only else list(SHAPES):
        results: dict[str, dict] = {}
        for _ in range(args.rounds):
            peaks.append(measure_peak())  # each round: the best is the machine unloaded
            for name in contenders:
                result = _run_worker(name, shape, args.steps, env)
                if result["tokens_per_sec"] > results.get(name, {}).get("tokens_per_sec", 0.0):
                    results[name] = result
        peak = max(peaks)
        print(f"\nmatmul peak (fp32, XLA 2048^2, best so far): {peak / 1e9:.1f} GFLOP/s")
        print(f"{shape}: {SHAPES[shape]}, best of {args.rounds} rounds")
        print(f"{'':<12}{'tokens/s':>12}{'GFLOP/s':>10}{'MFU':>8}")
        for name, r in results.items():
            print(
                f"{name:<12}{r['tokens_per_sec']:>12,.0f}{r['flops_per_sec'] / 1e9:>10.1f}"
                f"{r['flops_per_sec'] / peak:>8.1%}"
            )
        best_peer = max(results[name]["tokens_per_sec"] for name in contenders if name != "bert_jax")
        ratios[shape] = results["bert_jax"]["tokens_per_sec"] / best_peer
    print()
    for shape, ratio in ratios.items():
        print(f"ratio_{shape}={ratio:.2f}")


if __name__ == "__main__":
    main()
