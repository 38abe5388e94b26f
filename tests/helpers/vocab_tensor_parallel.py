"""Subprocess body of the vocabulary tensor-parallelism tests: 8 virtual CPU devices.

BERT's 30522-word vocabulary padded to a multiple of 128 (`BertConfig.vocab_pad_multiple`)
on meshes with tensor=4 and tensor=8 (with a GeGLU feed-forward block and rotary positions):
initialised in its shards, one forward/backward compared with the data-parallel (8,1,1)
mesh; an unpadded checkpoint restored onto the tensor=4 mesh; the bundled MiniLM loaded
padded and stepped as a classifier on tensor=4.
Prints one line ``RESULT {json}``.
"""

import json
import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
os.environ["JAX_PLATFORMS"] = "cpu"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from bert_jax import convert
from bert_jax.model import ops, param_shapes
from bert_jax.model.config import BertConfig
from bert_jax.model.heads import BertForPreTraining, BertForSequenceClassification
from bert_jax.model.vocab_padding import RowResize
from bert_jax.training import checkpoints, sharding
from tests.helpers import results

MESHES = ((8, 1, 1), (2, 1, 4), (1, 1, 8))
CONFIG = BertConfig(
    vocab_size=30522,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=8,
    intermediate_size=128,
    max_position_embeddings=64,
    vocab_pad_multiple=128,
    gated_ffn=True,  # GeGLU's stacked [H, 2, F] product sharded over F, too
    position_embedding_type="rotary",  # and the stacked query/key/value product over the heads
)
RULES = sharding.LOGICAL_AXIS_RULES


def _batch(seed: int, batch: int = 8, seq: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 30522, (batch, seq)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 10:] = 0
    return {
        "ids": ids,
        "mask": mask,
        "seg": (np.arange(seq)[None, :] >= seq // 2).astype(np.int32).repeat(batch, 0),
        "positions": rng.integers(1, seq, (batch, 3)).astype(np.int32),
        "mlm_labels": rng.integers(0, 30522, (batch, 3)).astype(np.int32),
        "labels": rng.integers(0, 2, (batch,)).astype(np.int32),
    }


def _pretraining_loss(config: BertConfig, batch: dict) -> callable:
    model = BertForPreTraining(config)

    def loss(params: dict) -> jax.Array:
        mlm, nsp = model.apply(
            {"params": params}, batch["ids"], batch["mask"], batch["seg"], batch["positions"]
        )
        mlm_ce = ops.softmax_cross_entropy(mlm, batch["mlm_labels"])[0]
        nsp_ce = optax.softmax_cross_entropy_with_integer_labels(nsp, batch["labels"])
        return jnp.mean(mlm_ce) + jnp.mean(nsp_ce)

    return loss


def _step(loss: callable, params: dict, mesh: jax.sharding.Mesh) -> tuple[float, dict]:
    with jax.set_mesh(mesh), nn.logical_axis_rules(RULES):
        value, grads = jax.jit(jax.value_and_grad(loss))(params)
    return float(value), jax.device_get(grads)


def _max_diff(a: dict, b: dict) -> float:
    return max(
        float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def pretraining(devices: list, workdir: str) -> dict:
    """Init in shards on each mesh, one forward/backward; compared with the (8,1,1) mesh."""
    batch = _batch(0)
    ids = jnp.zeros((1, 8), jnp.int32)
    init = lambda key: BertForPreTraining(CONFIG).init(key, ids, ids, ids, ids[:, :2])["params"]
    boxed = jax.eval_shape(init, jax.random.key(0))
    out, reference = {}, None
    for shape in MESHES:
        mesh = sharding.make_mesh(shape, devices)
        sharding.check_param_sharding(boxed, mesh, RULES)
        shardings = sharding.logical_sharding(boxed, mesh, RULES)
        with jax.set_mesh(mesh):
            params = jax.jit(lambda k: nn.meta.unbox(init(k)), out_shardings=shardings)(jax.random.key(0))
        word = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
        loss, grads = _step(_pretraining_loss(CONFIG, batch), params, mesh)
        host = jax.device_get(params)
        if reference is None:
            reference = (host, loss, grads)
        name = "x".join(map(str, shape))
        out[name] = {
            "word_spec": [str(a) for a in word.sharding.spec],
            "word_local": list(word.addressable_shards[0].data.shape),
            "bias_local": list(params["mlm"]["bias"].addressable_shards[0].data.shape),
            "init_max_diff": _max_diff(host, reference[0]),
            "loss": loss,
            "grad_max_diff": _max_diff(grads, reference[2]),
            "padding_grad": float(np.abs(grads["mlm"]["bias"][30522:]).max()),
        }
    # The same model unpadded: refused on tensor=4 by the check, naming the parameter.
    unpadded = jax.eval_shape(
        lambda k: BertForPreTraining(CONFIG.replace(vocab_pad_multiple=1)).init(k, ids, ids, ids, ids[:, :2])[
            "params"
        ],
        jax.random.key(0),
    )
    try:
        sharding.check_param_sharding(unpadded, sharding.make_mesh((2, 1, 4), devices), RULES)
        out["unpadded_error"] = ""
    except ValueError as e:
        out["unpadded_error"] = str(e)
    out["restore"] = restore_unpadded(devices, reference[0], boxed, workdir)
    return out


def restore_unpadded(devices: list, padded_host: dict, boxed: dict, workdir: str) -> dict:
    """A checkpoint saved unpadded on (8,1,1) (its bert_config.json without the padding key)
    restored onto the padded model on (2,1,4)."""
    params = convert.canonical(padded_host, CONFIG)  # 30522 rows
    values = CONFIG.to_dict()
    del values["vocab_pad_multiple"]
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "bert_config.json"), "w") as f:
        json.dump(values, f)
    mesh = sharding.make_mesh((8, 1, 1), devices)
    ckpt = checkpoints.Checkpointer(workdir, async_save=False)
    ckpt.save(1, {"params": jax.device_put(params, sharding.replicated(mesh))}, force=True)
    ckpt.close()
    mesh = sharding.make_mesh((2, 1, 4), devices)
    shardings = sharding.logical_sharding(boxed, mesh, RULES)
    target = {
        "params": jax.tree.map(
            lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), nn.meta.unbox(boxed), shardings
        )
    }
    ckpt = checkpoints.Checkpointer(workdir, async_save=False, restore_transform=RowResize(30522))
    with jax.set_mesh(mesh):
        restored, _ = ckpt.restore_latest(target)
    ckpt.close()
    word = restored["params"]["bert"]["embeddings"]["word_embeddings"]["embedding"]
    host = np.asarray(word)
    return {
        "word_spec": [str(a) for a in word.sharding.spec],
        "shape": list(host.shape),
        "real_rows_equal": bool(
            np.array_equal(host[:30522], params["bert"]["embeddings"]["word_embeddings"]["embedding"])
        ),
        "padding_zero": not host[30522:].any(),
        "others_equal": bool(
            np.array_equal(np.asarray(restored["params"]["nsp"]["kernel"]), params["nsp"]["kernel"])
        ),
    }


def minilm(devices: list) -> dict:
    """The bundled MiniLM, loaded padded, as a 2-class classifier on (8,1,1) and (2,1,4)."""
    from bert_jax.finetuning import finetune

    loaded, config = convert.load_checkpoint(finetune.default_checkpoint(), vocab_pad_multiple=128)
    batch = _batch(1)
    model = BertForSequenceClassification(config, num_labels=2)
    init = lambda key: model.init(key, batch["ids"][:1], batch["mask"][:1], batch["seg"][:1])["params"]
    boxed = jax.eval_shape(init, jax.random.key(0))
    host = jax.device_get(nn.meta.unbox(init(jax.random.key(0))))
    host = {**host, "bert": param_shapes.merge_params(host["bert"], loaded["bert"], "minilm")}

    def loss(params: dict) -> jax.Array:
        logits = model.apply({"params": params}, batch["ids"], batch["mask"], batch["seg"])
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, batch["labels"]))

    out, reference = {"padded_vocab": config.padded_vocab_size}, None
    for shape in ((8, 1, 1), (2, 1, 4)):
        mesh = sharding.make_mesh(shape, devices)
        sharding.check_param_sharding(boxed, mesh, RULES)
        params = jax.device_put(host, sharding.logical_sharding(boxed, mesh, RULES))
        value, grads = _step(loss, params, mesh)
        reference = reference or (value, grads)
        word = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
        out["x".join(map(str, shape))] = {
            "loss": value,
            "grad_max_diff": _max_diff(grads, reference[1]),
            "word_local": list(word.addressable_shards[0].data.shape),
        }
    return out


def main(workdir: str) -> None:
    devices = jax.devices()
    assert len(devices) == 8, devices
    result = {"pretraining": pretraining(devices, workdir), "minilm": minilm(devices)}
    results.emit(result)


if __name__ == "__main__":
    main(sys.argv[1])
