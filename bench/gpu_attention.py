"""Attention alone on one NVIDIA GPU: forward and backward of each kernel at the shapes the
recipes pre-train at, the Triton kernel at several tile sizes.

What it answers: how much of the step attention costs per kernel, and whether the Triton
kernel (`model.triton_attention`, attention dropout inside the kernel) beats the XLA path
that the paper's recipe (attention dropout 0.1) takes otherwise, and at which tiles.

Shapes (B x S, 12 heads of 64, bfloat16, padding-free rows): ``128`` (256 x 128) and
``512`` (64 x 512) at dropout 0.1, BERT-Base's phases; ``1024-window`` (32 x 1,024, a
two-sided window of 128, no dropout), ModernBERT-base's local layers. Contenders:
``xla`` (the XLA path with the recipe's dropout), ``triton:<tiles>`` (the same dropout
masks in the kernel), ``triton-hash16`` (the first tiles with ``dropout_rng=hash16``'s
masks: one hash for two elements), and without dropout ``triton (no dropout)``,
``cudnn`` and ``xla-nodrop`` for reference. Each is jitted as d/d(q, k, v) of a
projection of its output (forward and backward), warmed up, then timed over ``--iters``
calls; the lines ``ratio_<shape>=<x>`` are the XLA path's time over the best Triton
tiles' (> 1: the kernel is faster), ``hash16_<shape>=<x>`` the first tiles' time with
the "hash" masks over theirs with "hash16".

    python bench/gpu_attention.py [--only 128,512] [--iters 20] [--blocks Q,K,QB,KB,WARPS,STAGES ...]
    python bench/gpu_attention.py --tiny   # the script on a CPU (kernels interpreted)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SHAPES = {  # name: (batch, seq, window, dropout)
    "128": (256, 128, None, 0.1),
    "512": (64, 512, None, 0.1),
    "1024-window": (32, 1024, 128, 0.0),
}
HEADS, HEAD_DIM = 12, 64
TILES = ("128,64,64,64,4,2", "64,64,32,32,4,2", "128,128,64,64,8,2", "64,128,64,64,4,3")


def _time(fn, args, iters: int) -> float:
    """Seconds per call of a jitted ``fn`` (after two warm-up calls)."""
    import jax

    for _ in range(2):
        jax.block_until_ready(fn(*args))
    start = time.perf_counter()
    for _ in range(iters):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / iters


def _contenders(mask, rate: float, tiles: dict, gpu: bool) -> dict:
    """name: attention(q, k, v) for one shape (dropout masks from one fixed key)."""
    import jax

    from bert_jax.model import attention, ops

    key = jax.random.key(0)
    seeds = ops.hash_seeds(key)

    def xla(q, k, v):
        dropped = lambda p: ops.inverted_dropout(key, rate, p)
        return attention.xla_attention(q, k, v, mask, dropout_fn=dropped if rate else None)

    def triton(blocks, paired: bool = False, rate: float = rate):
        return lambda q, k, v: attention.triton_path(
            q,
            k,
            v,
            mask,
            dropout_rate=rate,
            dropout_seeds=seeds,
            paired_dropout=paired,
            interpret=not gpu,
            blocks=blocks,
        )

    out = {"xla": xla, **{f"triton:{name}": triton(blocks) for name, blocks in tiles.items()}}
    if rate:
        # What the in-kernel masks cost: the "hash16" masks (one hash for two elements)
        # and no dropout, at the first tiles.
        first = next(iter(tiles.values()))
        out["triton-hash16"] = triton(first, paired=True)
        out["triton (no dropout)"] = triton(first, rate=0.0)
        out["xla-nodrop"] = lambda q, k, v: attention.xla_attention(q, k, v, mask)
    if gpu:
        out["cudnn (no dropout)"] = lambda q, k, v: attention.cudnn_attention(q, k, v, mask)
    return out


def _measure(fn, q, k, v, ct, iters: int) -> tuple[float, float]:
    """(forward and backward, forward) seconds per call of attention ``fn``."""
    import jax
    import jax.numpy as jnp

    loss = lambda q, k, v: jnp.sum(fn(q, k, v).astype(jnp.float32) * ct.astype(jnp.float32))
    both = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))
    return _time(both, (q, k, v), iters), _time(jax.jit(fn), (q, k, v), iters)


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(SHAPES))
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--blocks", action="append", default=None, metavar="Q,K,QB,KB,WARPS,STAGES")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, kernels interpreted: a check")
    args = parser.parse_args()
    if unknown := [s for s in args.only.split(",") if s not in SHAPES]:
        parser.error(f"--only: unknown {', '.join(unknown)} (known: {', '.join(SHAPES)})")

    import jax
    import jax.numpy as jnp
    import numpy as np

    from bert_jax.model import attention, triton_attention

    gpu = jax.default_backend() == "gpu"
    print(f"{jax.devices()[0].device_kind}, jax {jax.__version__}")
    tiles = {t: triton_attention.Blocks(*map(int, t.split(","))) for t in (args.blocks or TILES)}
    for shape in args.only.split(","):
        b, s, window, rate = SHAPES[shape]
        n, d, dtype = HEADS, HEAD_DIM, jnp.bfloat16
        if args.tiny:
            b, s, n, d, dtype = 2, min(s, 128), 2, 32, jnp.float32
            window = window and 32
        rng = np.random.default_rng(0)
        q, k, v, ct = (jnp.asarray(rng.normal(size=(b, s, n, d)), dtype) for _ in range(4))
        mask = attention.AttentionMask(jnp.ones((b, s), jnp.int32), window=window)
        print(f"\n{shape}: batch {b} x seq {s}, {n} heads of {d}, window {window}, dropout {rate}")
        print(f"{'':<26}{'fwd+bwd ms':>11}{'fwd ms':>9}")
        times = {}
        for name, fn in _contenders(mask, rate, tiles, gpu).items():
            try:
                times[name], fwd = _measure(fn, q, k, v, ct, args.iters)
            except Exception as e:  # a tile that does not compile: say so and go on
                print(f"{name:<26}failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
                continue
            print(f"{name:<26}{times[name] * 1e3:>11.3f}{fwd * 1e3:>9.3f}")
        best = min((t for name, t in times.items() if name.startswith("triton:")), default=None)
        if best and "xla" in times:
            print(f"ratio_{shape}={times['xla'] / best:.2f}")
        first = f"triton:{next(iter(tiles))}"
        if first in times and "triton-hash16" in times:
            print(f"hash16_{shape}={times[first] / times['triton-hash16']:.2f}")


if __name__ == "__main__":
    main()
