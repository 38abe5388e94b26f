"""Subprocess body of the dropout kernels' tests: runs with 4 virtual CPU devices.

`attend` with ``attention_kernel=KERNEL`` (``triton`` or ``mosaic``, the first argument;
interpreted) and attention dropout, jitted over
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

from bert_jax.model import attention, ops
from bert_jax.training import sharding

B, S, N, D, RATE = 4, 128, 4, 16, 0.1


def main() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(B, S, N, D)), jnp.float32) for _ in range(3))
    m = np.ones((B, S), np.int32)
    m[1, 40:] = 0
    m[3, 20:] = 2
    mask = attention.AttentionMask(jnp.asarray(m), packed=True)
    real = (m > 0)[:, :, None, None]

    def run(kernel: str, key: jax.Array) -> np.ndarray:
        drop = lambda p: ops.inverted_dropout(key, RATE, p)
        fn = lambda q, k, v: attention.attend(
            q,
            k,
            v,
            mask,
            kernel,
            dropout_rate=RATE,
            dropout_fn=drop,
            dropout_seeds=lambda: ops.hash_seeds(key),
        )
        return np.asarray(jax.jit(fn)(q, k, v)) * real

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
