"""Subprocess body of the dropout kernels' tests: runs with 4 virtual CPU devices.

`attend` with ``attention_kernel=KERNEL`` (``triton`` or ``mosaic``, the first argument;
interpreted) and attention dropout, or (``triton-stacked``, ``triton-rotary``)
`attend_stacked` of a stacked product (with rotary tables of each row's own positions),
jitted over
a (data 2, fsdp 1, tensor 2) mesh under the project's logical-axis rules, against the XLA
path with the same dropout key. Prints one JSON object: the largest difference on the real
queries' outputs, and on them when the XLA path draws with another key.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.model import attention, layers, ops, triton_attention
from bert_jax.training import sharding

B, S, N, D, RATE = 4, 128, 4, 16, 0.1


def main() -> None:
    rotary = sys.argv[1] == "triton-rotary"
    d = 2 * D if rotary else D  # rotation inside takes a head of at least 32
    rng = np.random.default_rng(0)
    qkv = jnp.asarray(rng.normal(size=(B, S, N, 3, d)), jnp.float32)
    rope = layers.rotary_tables(jnp.arange(S)[None] + 3 * jnp.arange(B)[:, None], d, 10_000.0)
    # The stacked kernels add a bias [N, 3, D] (split with the heads); the others get it added.
    bias = jnp.asarray(rng.normal(size=(N, 3, d)), jnp.float32)
    m = np.ones((B, S), np.int32)
    m[1, 40:] = 0
    m[3, 20:] = 2
    mask = attention.AttentionMask(jnp.asarray(m), packed=True)
    real = (m > 0)[:, :, None, None]

    def run(kernel: str, key: jax.Array) -> np.ndarray:
        drop = lambda p: ops.inverted_dropout(key, RATE, p)
        seeds = lambda: ops.hash_seeds(key)
        if kernel in ("triton-stacked", "triton-rotary"):
            fn = lambda qkv: attention.attend_stacked(
                qkv, bias, rope if rotary else None, mask, "triton", dropout_rate=RATE, dropout_seeds=seeds
            )
            return np.asarray(jax.jit(fn)(qkv)) * real

        def fn(qkv: jax.Array) -> jax.Array:
            biased = qkv + bias
            slots = (triton_attention.KEY, triton_attention.VALUE, triton_attention.QUERY)
            k, v, q = (biased[..., i, :] for i in slots)
            if rotary:
                q, k = (layers.apply_rotary(x, *rope) for x in (q, k))
            return attention.attend(
                q, k, v, mask, kernel, dropout_rate=RATE, dropout_fn=drop, dropout_seeds=seeds
            )

        return np.asarray(jax.jit(fn)(qkv)) * real

    mesh = sharding.make_mesh((2, 1, 2), jax.devices()[:4])
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.LOGICAL_AXIS_RULES):
        ours = run(sys.argv[1], jax.random.key(7))
        same = run("xla", jax.random.key(7))
        other = run("xla", jax.random.key(8))
    print(
        json.dumps(
            {"same_key": float(np.abs(ours - same).max()), "other_key": float(np.abs(ours - other).max())}
        )
    )


if __name__ == "__main__":
    main()
