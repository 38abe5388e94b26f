"""The attention-dropout kernels' instructions, read from the PTX XLA compiles them to for an
NVIDIA H100 on a machine without a GPU: how much of each kernel is the dropout masks'
integer hash, per way of drawing the masks.

Each row compiles the Triton kernels (`model.triton_attention`: forward, dK/dV, dQ) of one
shape's attention forward and backward (`bench/gpu_compile.py`'s H100 target), with XLA
dumping the PTX, and counts per kernel the integer instructions (32-bit integer
arithmetic, logic, shifts and comparisons) and all instructions. The counts are static
(the tile loop's body once): for comparing variants, not a time. Rows:

- ``two-word index``: the masks' general form (the flat index as two uint32 words);
- ``one-word index``: the same masks where the global probabilities hold at most 2**32
  elements (`kernel_tiles.narrow_index`), what `attention.triton_path` compiles there;
- ``+ rows not packed``: visibility from the keys alone (`AttentionMask.packed` False),
  the paper's recipe;
- ``hash16``: `dropout_rng=hash16`'s masks, one hash for two elements.

    python bench/triton_ptx.py [--shape B,S,N,D] [--rate 0.1]

Needs JAX's CUDA plugin at the installed jax's version (see `bench/gpu_compile.py`).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = {  # name: triton_attention.Options fields
    "two-word index": {},
    "one-word index": {"narrow": True},
    "+ rows not packed": {"narrow": True, "packed": False},
    "hash16": {"narrow": True, "packed": False, "paired": True},
}
_INTEGER = re.compile(
    r"^\s+(?:@%p\d+\s+)?(?:mul|mad|xor|shr|shl|add|sub|setp|selp|and|or|not|lop3|prmt|shf|min|max)"
    r"(?:\.[a-z0-9]+)*\.(?:s32|u32|b32)\s"
)
_INSTRUCTION = re.compile(r"^\s+(?:@%p\d+\s+)?[a-z][\w.]*[\s;]")


def count(ptx: str) -> tuple[int, int]:
    """(integer instructions, all instructions) of one PTX module."""
    lines = ptx.splitlines()
    return sum(bool(_INTEGER.match(x)) for x in lines), sum(bool(_INSTRUCTION.match(x)) for x in lines)


def _compile_one(fields: str, shape: str, rate: float, dump: str) -> None:
    """In this process: compile the kernels for an H100 with XLA dumping to ``dump``."""
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["XLA_FLAGS"] = f"--xla_dump_to={dump}"
    sys.path.insert(0, str(ROOT))
    import jax
    import jax.numpy as jnp

    from bench import gpu_compile
    from bert_jax.model import kernel_tiles, ops, triton_attention

    b, s, n, d = map(int, shape.split(","))
    options = json.loads(fields)
    opts = triton_attention.Options(rate=rate, **options)

    def loss(q, k, v, seg, key):
        words = kernel_tiles.dropout_words(ops.hash_seeds(key), (b, n), n, s)
        return triton_attention.flash_attention(q, k, v, seg, words, opts).astype(jnp.float32).sum()

    devices = gpu_compile.gpu_devices(gpu_compile.H100)
    mesh = jax.sharding.Mesh(devices, ("x",))
    whole = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    x = jax.ShapeDtypeStruct((b, s, n, d), jnp.bfloat16)
    seg = jax.ShapeDtypeStruct((b, s), jnp.int32)
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)
    grad = jax.jit(jax.grad(loss, argnums=(0, 1, 2)), in_shardings=(whole,) * 5)
    grad.trace(x, x, x, seg, key).lower().compile()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shape", default="64,512,12,64", help="B,S,N,D (default: BERT-Base at 512)")
    parser.add_argument("--rate", type=float, default=0.1)
    parser.add_argument("--_compile", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._compile:
        _compile_one(args._compile[0], args.shape, args.rate, args._compile[1])
        return
    print(f"attention dropout kernels, [B, S, N, D] = [{args.shape}], rate {args.rate}, compiled for an H100")
    print("integer / all instructions in each kernel's PTX")
    print(f"{'':<20}{'forward':>14}{'dK/dV':>14}{'dQ':>14}")
    for name, fields in VARIANTS.items():
        with tempfile.TemporaryDirectory() as dump:
            # One process a variant: XLA reads its flags (the dump folder) once.
            cmd = [sys.executable, __file__, "--shape", args.shape, "--rate", str(args.rate)]
            done = subprocess.run(
                [*cmd, "--_compile", json.dumps(fields), dump], capture_output=True, text=True
            )
            if done.returncode:
                raise SystemExit(done.stderr[-2000:])
            found = {}
            for path in glob.glob(os.path.join(dump, "*.ptx")):
                ptx = Path(path).read_text()
                entry = re.search(r"\.entry (attention_dropout_\w+)", ptx)
                if entry:
                    found[entry.group(1).removeprefix("attention_dropout_")] = count(ptx)
        cells = [found.get(k) for k in ("forward", "dkv", "dq")]
        print(f"{name:<20}" + "".join(f"{f'{c[0]:,} / {c[1]:,}' if c else '-':>14}" for c in cells))


if __name__ == "__main__":
    main()
