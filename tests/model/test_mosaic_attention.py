"""`model.mosaic_attention`: the Pallas (Mosaic) attention for TPUs with in-kernel attention
dropout (interpreted against the XLA path: `test_dropout_kernels.py`). Compiled by libtpu
for a TPU topology (no TPU needed): BERT-Base's attention at seq 512 with dropout becomes
two Mosaic kernels and keeps none of the XLA path's [B, N, S, S] temporaries; the kernel
choice; the query tiles."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from bert_jax.model import attention, mosaic_attention, ops
from bert_jax.model.attention import AttentionMask, choose_kernel

B, N, D = 2, 2, 32


@pytest.mark.parametrize("topology", ["v5e:2x2"])
def test_compiled_by_libtpu_without_the_xla_paths_temporaries(topology) -> None:
    """BERT-Base's attention at seq 512 (8 rows, 12 heads of 64, bfloat16) with dropout 0.1,
    forward and gradients, compiled for one chip of a TPU topology: the Mosaic kernels
    lower (two TPU custom calls) and the program's temporaries stay under one bfloat16
    [B, N, S, S] array, where the XLA path's (scores, probabilities, masks) pass it."""
    pytest.importorskip("libtpu")
    from bert_jax.pretraining import plan_compile

    device = plan_compile.topology_devices(topology)[0]
    on_chip = jax.sharding.SingleDeviceSharding(device)
    x = jax.ShapeDtypeStruct((8, 512, 12, 64), jnp.bfloat16, sharding=on_chip)
    seg = jax.ShapeDtypeStruct((8, 512), jnp.int32, sharding=on_chip)
    seeds = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=on_chip)
    temps = {}
    for kernel in ("mosaic", "xla"):

        def loss(q, k, v, m, seeds, kernel=kernel):
            key_data = jax.random.wrap_key_data(seeds, impl="threefry2x32")
            out = attention.attend(
                q,
                k,
                v,
                AttentionMask(m),
                kernel,
                dropout_rate=0.1,
                dropout_fn=lambda p: ops.inverted_dropout(key_data, 0.1, p),
                dropout_seeds=lambda: seeds,
                dtype=jnp.bfloat16,
                platform="tpu",
            )
            return out.astype(jnp.float32).sum()

        compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))).lower(x, x, x, seg, seeds).compile()
        temps[kernel] = compiled.memory_analysis().temp_size_in_bytes
        if kernel == "mosaic":
            assert compiled.as_text().count("tpu_custom_call") == 2
    scores = 8 * 12 * 512 * 512 * 2  # one bfloat16 [B, N, S, S]
    assert temps["mosaic"] < scores < temps["xla"], temps


@pytest.mark.parametrize(
    ("requested", "platform", "seq", "rate", "hashed", "kernel", "warning"),
    [
        ("mosaic", "tpu", 512, 0.1, True, "mosaic", None),
        ("mosaic", "tpu", 2048, 0.0, True, "mosaic", None),
        ("mosaic", "cpu", 128, 0.1, True, "mosaic", "interpret mode"),
        ("mosaic", "tpu", 128, 0.1, False, "xla", "threefry"),
        ("mosaic", "gpu", 128, 0.1, True, "xla", "runs on TPUs (interpreted on CPU), not on gpu"),
        ("mosaic", "tpu", 200, 0.1, True, "mosaic", None),  # padded to 256
        ("mosaic", "tpu", 4096, 0.1, True, "xla", "up to 2048 long, not 4096"),
        ("auto", "tpu", 512, 0.1, True, "xla", "XLA and Mosaic paths"),
        ("auto", "tpu", 512, 0.0, True, "splash", None),
    ],
)
def test_choose_kernel_for_mosaic(requested, platform, seq, rate, hashed, kernel, warning) -> None:
    mask = AttentionMask(jnp.ones((B, seq), jnp.int32))
    got, line = choose_kernel(requested, platform, mask, 64, rate, jnp.bfloat16, hash_dropout=hashed)
    assert got == kernel
    if warning is None:
        assert line is None
    else:
        assert line is not None and warning in line and "\n" not in line


def test_query_tiles_fit_the_sequence() -> None:
    """Tiles of up to 256 query rows that divide S, the [bq, S] tile within the bound."""
    got = {s: mosaic_attention.query_block(s) for s in (128, 256, 512, 1024, 2048, 384)}
    assert got == {128: 128, 256: 256, 512: 256, 1024: 128, 2048: 64, 384: 128}
