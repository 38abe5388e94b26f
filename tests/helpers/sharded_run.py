"""Subprocess body of the sharding tests: runs with 8 virtual CPU devices.

Prints one JSON object: losses per mesh for a few steps, the shardings on 2x2x2, and the
result of a save on one mesh restored on another.
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import jax
import numpy as np

from bert_jax.commands import run_settings
from bert_jax.data import synthetic
from bert_jax.pretraining import pretrain
from bert_jax.training import checkpoints, sharding
from configs import pretrain as pretrain_config
from tests.helpers import results

STEPS = 3


def config():
    c = pretrain_config.get_config("tiny")
    c.data.source = "synthetic"
    c.global_batch_size = 8
    c.max_seq_length = 32
    c.max_predictions_per_seq = 5
    c.num_train_steps = 10
    c.warmup_steps = 2
    c.model.num_attention_heads = 8  # 8 heads of 16: tensor parallelism up to 8
    return c


def run(mesh_shape, devices, workdir=None):
    c = config()
    mesh = sharding.make_mesh(mesh_shape, devices)
    setup = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    with jax.set_mesh(mesh):
        state = setup.engine.init_state(c.seed)
        losses = []
        for local in synthetic.create_iterator(
            global_batch_size=c.global_batch_size,
            max_seq_length=c.max_seq_length,
            max_predictions_per_seq=c.max_predictions_per_seq,
            vocab_size=c.model.vocab_size,
            seed=c.seed,
            num_batches=STEPS,
        ):
            state, metrics = setup.train_step(state, setup.global_batch(local))
            losses.append(float(metrics["loss"]))
        if workdir:
            ckpt = checkpoints.Checkpointer(workdir, keep=1)
            ckpt.save(STEPS, state)
            ckpt.close()
    return setup, state, losses


def main(workdir):
    devices = jax.devices()
    assert len(devices) == 8, devices
    out = {"losses": {}}
    # (2, 1, 4) is covered with BERT's padded vocabulary by vocab_tensor_parallel.py.
    for shape in [(1, 1, 1), (8, 1, 1), (2, 4, 1), (2, 2, 2), (1, 1, 8)]:
        n = int(np.prod(shape))
        setup, state, losses = run(shape, devices[:n], workdir if shape == (2, 4, 1) else None)
        out["losses"]["x".join(map(str, shape))] = losses
        if shape == (2, 2, 2):
            p = state.params["bert"]
            out["specs"] = {
                "word_embeddings": list(p["embeddings"]["word_embeddings"]["embedding"].sharding.spec),
                "query_kernel": list(p["encoder"]["layer_0"]["attention"]["query"]["kernel"].sharding.spec),
                "intermediate_kernel": list(p["encoder"]["layer_0"]["intermediate"]["kernel"].sharding.spec),
                "layer_norm_scale": list(p["embeddings"]["LayerNorm"]["scale"].sharding.spec),
                "query_shard_shape": list(
                    p["encoder"]["layer_0"]["attention"]["query"]["kernel"].addressable_shards[0].data.shape
                ),
            }
        if shape == (2, 4, 1):
            saved_params = jax.device_get(state.params)
        if shape == (1, 1, 8):
            emb = state.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
            out["tensor8_word_shard"] = list(emb.addressable_shards[0].data.shape)
    # The rules as config: the hidden axis left unsharded on the 2x2x2 mesh.
    overridden = config()
    overridden.sharding_rules = (("embed", None),)
    setup = pretrain.Pretraining(
        run_settings.pretrain_settings(overridden), sharding.make_mesh((2, 2, 2), devices)
    )
    word = setup.state_shardings.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    out["override_spec"] = [str(a) for a in word.spec]
    # Restore the 2x4x1 checkpoint onto an 8x1x1 mesh and onto 1 device.
    restored = {}
    for shape in [(8, 1, 1), (1, 1, 1)]:
        n = int(np.prod(shape))
        mesh = sharding.make_mesh(shape, devices[:n])
        setup = pretrain.Pretraining(run_settings.pretrain_settings(config()), mesh)
        ckpt = checkpoints.Checkpointer(workdir, keep=1)
        with jax.set_mesh(mesh):
            state = ckpt.restore(setup.abstract_state)
        ckpt.close()
        same = jax.tree.all(
            jax.tree.map(
                lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))),
                saved_params,
                jax.device_get(state.params),
            )
        )
        emb = state.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
        restored["x".join(map(str, shape))] = {
            "equal": bool(same),
            "num_devices": len(emb.sharding.device_set),
            "step": int(state.step),
        }
    out["restored"] = restored
    results.emit(out)


if __name__ == "__main__":
    main(sys.argv[1])
