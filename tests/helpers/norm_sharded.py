"""Subprocess body of the Triton LayerNorm's sharded test: runs with 4 virtual CPU devices.

A post-LN and a pre-LN `BertLayer` with hidden dropout, ``norm_kernel=triton`` (interpreted) against
``norm_kernel=xla`` with the same parameters and dropout key, jitted over a (data 2, fsdp 1,
tensor 2) mesh under the project's logical-axis rules. Prints one JSON object: the largest
difference of the outputs (of both layers), and of them when the XLA path draws with
another key.
"""

import functools
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

from bert_jax.model.attention import AttentionMask
from bert_jax.model.encoder_layer import BertLayer
from bert_jax.model.numerics import Numerics
from bert_jax.training import sharding
from tests.helpers import attention_cases


def main() -> None:
    x = jnp.asarray(np.random.default_rng(0).normal(size=(4, 32, 64)), jnp.float32)
    mask = AttentionMask(jnp.ones((4, 32), jnp.int32))
    configs = [
        attention_cases.small_config(
            hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.0, pre_layer_norm=pre_ln
        )
        for pre_ln in (False, True)
    ]
    params = [BertLayer(c).init(jax.random.key(1), x, mask, True) for c in configs]

    def run(kernel: str, key: int) -> np.ndarray:
        outputs = []
        for config, p in zip(configs, params, strict=True):
            layer = BertLayer(config, Numerics(norm_kernel=kernel))
            fn = functools.partial(layer.apply, rngs={"dropout": jax.random.key(key)})
            outputs.append(np.asarray(jax.jit(lambda p, x, fn=fn: fn(p, x, mask, False))(p, x)))
        return np.stack(outputs)

    mesh = sharding.make_mesh((2, 1, 2), jax.devices()[:4])
    with jax.set_mesh(mesh), nn.logical_axis_rules(sharding.LOGICAL_AXIS_RULES):
        ours = run("triton", 5)
        same = run("xla", 5)
        other = run("xla", 6)
    print(
        json.dumps(
            {"same_key": float(np.abs(ours - same).max()), "other_key": float(np.abs(ours - other).max())}
        )
    )


if __name__ == "__main__":
    main()
