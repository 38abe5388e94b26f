"""Checkpoint conversion: Hugging Face ⇄ bert_jax ⇄ the original google-research TF release.

All three formats go through one flat table of names (`_name_table`) that maps each
bert_jax parameter to its Hugging Face and TF names and says how the array is laid out in
each (transposed Linear weights, [H, N, D] attention kernels). Every load is checked
against the shapes the model expects: a missing tensor, an unexpected one, or a shape
from another model size fails with the names, and nothing is ever loaded in part.

Formats on disk:
- ``hf``: a folder with ``config.json`` and ``model.safetensors`` (or ``pytorch_model.bin``);
- ``tf``: an original TF checkpoint (``bert_model.ckpt.*``) with ``bert_config.json`` beside it;
- ``bert_jax``: a folder with ``bert_config.json`` and an orbax checkpoint of the params
  under ``params/``; a pre-training workdir (``checkpoints/<step>/``) is read as well.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np
from absl import logging

from bert_jax.config import SHAPE_KEYS, BertConfig

Params = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class _Entry:
    path: tuple[str, ...]  # bert_jax path
    hf: str  # Hugging Face state-dict key (without the "bert." prefix for encoder tensors)
    tf: str  # original TF variable name
    to_jax_hf: Callable[[np.ndarray], np.ndarray]  # HF array → bert_jax array
    to_hf: Callable[[np.ndarray], np.ndarray]  # bert_jax array → HF array
    to_jax_tf: Callable[[np.ndarray], np.ndarray]
    to_tf: Callable[[np.ndarray], np.ndarray]


def _same(x: np.ndarray) -> np.ndarray:
    return x


def _t(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.T)


def _name_table(config: BertConfig, heads: bool) -> list[_Entry]:
    h, n, d = config.hidden_size, config.num_attention_heads, config.head_dim
    # Attention kernels: HF Linear [out, in]; TF [in, out]; bert_jax [H, N, D] / [N, D, H].
    qkv_hf = lambda x: np.ascontiguousarray(x.T.reshape(h, n, d))
    qkv_to_hf = lambda x: np.ascontiguousarray(x.reshape(h, n * d).T)
    qkv_tf = lambda x: np.ascontiguousarray(x.reshape(h, n, d))
    qkv_to_tf = lambda x: np.ascontiguousarray(x.reshape(h, n * d))
    bias_heads = lambda x: np.ascontiguousarray(x.reshape(n, d))
    bias_flat = lambda x: np.ascontiguousarray(x.reshape(n * d))
    out_hf = lambda x: np.ascontiguousarray(x.T.reshape(n, d, h))
    out_to_hf = lambda x: np.ascontiguousarray(x.reshape(n * d, h).T)
    out_tf = lambda x: np.ascontiguousarray(x.reshape(n, d, h))
    out_to_tf = lambda x: np.ascontiguousarray(x.reshape(n * d, h))

    def linear(path: tuple[str, ...], hf: str, tf: str) -> list[_Entry]:
        return [
            _Entry((*path, "kernel"), f"{hf}.weight", f"{tf}/kernel", _t, _t, _same, _same),
            _Entry((*path, "bias"), f"{hf}.bias", f"{tf}/bias", _same, _same, _same, _same),
        ]

    def norm(path: tuple[str, ...], hf: str, tf: str) -> list[_Entry]:
        return [
            _Entry((*path, "scale"), f"{hf}.weight", f"{tf}/gamma", _same, _same, _same, _same),
            _Entry((*path, "bias"), f"{hf}.bias", f"{tf}/beta", _same, _same, _same, _same),
        ]

    e = ("bert", "embeddings")
    table = [
        _Entry(
            (*e, "word_embeddings", "embedding"),
            "embeddings.word_embeddings.weight",
            "bert/embeddings/word_embeddings",
            _same,
            _same,
            _same,
            _same,
        ),
        _Entry(
            (*e, "position_embeddings", "embedding"),
            "embeddings.position_embeddings.weight",
            "bert/embeddings/position_embeddings",
            _same,
            _same,
            _same,
            _same,
        ),
        _Entry(
            (*e, "token_type_embeddings", "embedding"),
            "embeddings.token_type_embeddings.weight",
            "bert/embeddings/token_type_embeddings",
            _same,
            _same,
            _same,
            _same,
        ),
        *norm((*e, "LayerNorm"), "embeddings.LayerNorm", "bert/embeddings/LayerNorm"),
    ]
    for i in range(config.num_hidden_layers):
        p = ("bert", "encoder", f"layer_{i}")
        hf = f"encoder.layer.{i}"
        tf = f"bert/encoder/layer_{i}"
        for name in ("query", "key", "value"):
            table += [
                _Entry(
                    (*p, "attention", name, "kernel"),
                    f"{hf}.attention.self.{name}.weight",
                    f"{tf}/attention/self/{name}/kernel",
                    qkv_hf,
                    qkv_to_hf,
                    qkv_tf,
                    qkv_to_tf,
                ),
                _Entry(
                    (*p, "attention", name, "bias"),
                    f"{hf}.attention.self.{name}.bias",
                    f"{tf}/attention/self/{name}/bias",
                    bias_heads,
                    bias_flat,
                    bias_heads,
                    bias_flat,
                ),
            ]
        table += [
            _Entry(
                (*p, "attention", "output", "kernel"),
                f"{hf}.attention.output.dense.weight",
                f"{tf}/attention/output/dense/kernel",
                out_hf,
                out_to_hf,
                out_tf,
                out_to_tf,
            ),
            _Entry(
                (*p, "attention", "output", "bias"),
                f"{hf}.attention.output.dense.bias",
                f"{tf}/attention/output/dense/bias",
                _same,
                _same,
                _same,
                _same,
            ),
            *norm(
                (*p, "attention_LayerNorm"),
                f"{hf}.attention.output.LayerNorm",
                f"{tf}/attention/output/LayerNorm",
            ),
            *linear((*p, "intermediate"), f"{hf}.intermediate.dense", f"{tf}/intermediate/dense"),
            *linear((*p, "output"), f"{hf}.output.dense", f"{tf}/output/dense"),
            *norm((*p, "output_LayerNorm"), f"{hf}.output.LayerNorm", f"{tf}/output/LayerNorm"),
        ]
    table += linear(("bert", "pooler", "dense"), "pooler.dense", "bert/pooler/dense")
    if heads:
        table += [
            *linear(
                ("mlm", "transform"), "cls.predictions.transform.dense", "cls/predictions/transform/dense"
            ),
            *norm(
                ("mlm", "transform_LayerNorm"),
                "cls.predictions.transform.LayerNorm",
                "cls/predictions/transform/LayerNorm",
            ),
            _Entry(
                ("mlm", "bias"),
                "cls.predictions.bias",
                "cls/predictions/output_bias",
                _same,
                _same,
                _same,
                _same,
            ),
            # TF stores the NSP weights as [2, H] ("output_weights"), like HF's Linear.
            _Entry(
                ("nsp", "kernel"),
                "cls.seq_relationship.weight",
                "cls/seq_relationship/output_weights",
                _t,
                _t,
                _t,
                _t,
            ),
            _Entry(
                ("nsp", "bias"),
                "cls.seq_relationship.bias",
                "cls/seq_relationship/output_bias",
                _same,
                _same,
                _same,
                _same,
            ),
        ]
    return table


# ------------------------------------------------------------------ validation


def expected_shapes(config: BertConfig, heads: bool) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Parameter shapes of `BertForPreTraining` (or just the encoder), from the model itself."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from bert_jax.heads import BertForPreTraining
    from bert_jax.modeling import BertModel

    config = config.replace(scan_layers=False)
    ids = jnp.zeros((1, 4), jnp.int32)
    if heads:
        init = lambda: BertForPreTraining(config).init(
            jax.random.key(0), ids, ids, ids, jnp.zeros((1, 1), jnp.int32)
        )
        tree = nn.meta.unbox(jax.eval_shape(init)["params"])
    else:
        init = lambda: BertModel(config).init(jax.random.key(0), ids)
        tree = {"bert": nn.meta.unbox(jax.eval_shape(init)["params"])}
    return {
        tuple(str(k.key) for k in path): tuple(leaf.shape)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def _nest(flat: dict[tuple[str, ...], np.ndarray]) -> Params:
    out: Params = {}
    for path, value in flat.items():
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
    return out


def flatten(params: Params, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for k, v in params.items():
        if isinstance(v, dict):
            out.update(flatten(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


def canonical(params: Params, config: BertConfig) -> Params:
    """Per-layer (unscanned) numpy params: the one layout every saver writes.

    A model trained with ``scan_layers=True`` holds ``encoder/layers/layer/...`` with a
    leading [L] axis; checkpoints on disk always use ``encoder/layer_i`` names so that a
    scanned and an unscanned run share them.
    """
    from bert_jax.modeling import unstack_layers

    params = unstack_layers(params, config.num_hidden_layers)
    return _nest({p: np.asarray(v) for p, v in flatten(params).items()})


def validate(params: Params, config: BertConfig, source: str) -> None:
    """Every expected tensor present with the expected shape, nothing else."""
    flat = flatten(params)
    heads = "mlm" in params or "nsp" in params
    want = expected_shapes(config, heads)
    missing = sorted("/".join(p) for p in set(want) - set(flat))
    extra = sorted("/".join(p) for p in set(flat) - set(want))
    wrong = [
        f"{'/'.join(p)}: {tuple(np.shape(flat[p]))} but the model needs {want[p]}"
        for p in sorted(set(want) & set(flat))
        if tuple(np.shape(flat[p])) != want[p]
    ]
    problems = []
    if wrong:
        problems.append("shape mismatch: " + "; ".join(wrong[:6]))
    if missing:
        problems.append("missing tensors: " + ", ".join(missing[:10]))
    if extra:
        problems.append("unexpected tensors: " + ", ".join(extra[:10]))
    if problems:
        raise ValueError(
            f"{source} does not match the model config ({_describe(config)}): " + " | ".join(problems)
        )


def _describe(c: BertConfig) -> str:
    return f"L={c.num_hidden_layers} H={c.hidden_size} A={c.num_attention_heads} vocab={c.vocab_size}"


def _check_expected(config: BertConfig, expected: BertConfig | None, source: str) -> None:
    if expected is None:
        return
    diffs = [
        f"{k}={getattr(config, k)} (expected {getattr(expected, k)})"
        for k in SHAPE_KEYS
        if getattr(config, k) != getattr(expected, k)
    ]
    if diffs:
        raise ValueError(f"{source} is a different model: " + ", ".join(diffs))


# ------------------------------------------------------------------ Hugging Face


def _relayout(
    fn: Callable[[np.ndarray], np.ndarray],
    value: np.ndarray,
    name: str,
    source: str,
    config: BertConfig,
) -> np.ndarray:
    """One tensor into bert_jax layout; a reshape that cannot fit names the tensor."""
    try:
        return fn(value)
    except ValueError as e:
        raise ValueError(
            f"{source}: tensor {name} has shape {value.shape}, which does not fit the "
            f"model config ({_describe(config)})"
        ) from e


def from_hf_state_dict(
    state: dict[str, np.ndarray], config: BertConfig, source: str = "state dict"
) -> Params:
    """A Hugging Face BERT state dict (with or without the ``bert.`` prefix) → params."""
    state = {k: np.asarray(v, np.float32) for k, v in state.items()}
    if not any(k.startswith("bert.") for k in state):
        state = {(k if k.startswith("cls.") else f"bert.{k}"): v for k, v in state.items()}
    heads = any(k.startswith("cls.predictions.transform") for k in state)
    flat: dict[tuple[str, ...], np.ndarray] = {}
    used = set()
    for entry in _name_table(config, heads):
        key = entry.hf if entry.path[0] != "bert" else f"bert.{entry.hf}"
        candidates = [key]
        if key.endswith(".weight") and "LayerNorm" in key:
            candidates.append(key[: -len("weight")] + "gamma")
        if key.endswith(".bias") and "LayerNorm" in key:
            candidates.append(key[: -len("bias")] + "beta")
        found = next((c for c in candidates if c in state), None)
        if found is None:
            continue  # reported as missing by `validate`
        used.add(found)
        flat[entry.path] = _relayout(entry.to_jax_hf, state[found], found, source, config)
    # Tied or bookkeeping tensors that carry no parameters of their own.
    ignorable = (
        "cls.predictions.decoder.weight",
        "cls.predictions.decoder.bias",
        "bert.embeddings.position_ids",
    )
    decoder = state.get("cls.predictions.decoder.weight")
    word = state.get("bert.embeddings.word_embeddings.weight")
    if decoder is not None and word is not None and not np.array_equal(decoder, word):
        raise ValueError(f"{source}: the MLM decoder is not tied to the word embeddings")
    extra = sorted(k for k in state if k not in used and k not in ignorable)
    if extra:
        raise ValueError(f"{source}: unexpected tensors not in a BERT model: {', '.join(extra[:10])}")
    params = _nest(flat)
    validate(params, config, source)
    return params


def to_hf_state_dict(params: Params, config: BertConfig) -> dict[str, np.ndarray]:
    """Params → a `transformers` BertForPreTraining (or BertModel, without heads) state dict.

    The tied decoder weight (and its bias alias) are written too: `from_pretrained`
    then reports no missing keys, and the tie makes them the same tensors again.
    """
    params = canonical(params, config)
    validate(params, config, "params to export")
    heads = "mlm" in params
    flat = flatten(params)
    out = {}
    for entry in _name_table(config, heads):
        key = entry.hf if entry.path[0] != "bert" else f"bert.{entry.hf}"
        out[key] = np.ascontiguousarray(entry.to_hf(np.asarray(flat[entry.path], np.float32)))
    if heads:
        out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
        out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


def hf_config_dict(config: BertConfig) -> dict[str, Any]:
    return {
        "architectures": ["BertForPreTraining"],
        "model_type": "bert",
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads,
        "intermediate_size": config.intermediate_size,
        "hidden_act": "gelu_new" if config.hidden_act == "gelu_tanh" else config.hidden_act,
        "hidden_dropout_prob": config.hidden_dropout_prob,
        "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_eps,
        "pad_token_id": 0,
    }


def _read_config(path: str, source: str) -> BertConfig:
    if not os.path.exists(path):
        raise FileNotFoundError(f"{source}: no {os.path.basename(path)} beside the weights")
    with open(path) as f:
        values = json.load(f)
    model_type = values.get("model_type", "bert")
    if model_type != "bert":
        raise ValueError(f"{path}: model_type {model_type!r} is not a BERT")
    return BertConfig.from_dict(values)


def load_hf(folder: str, expected: BertConfig | None = None) -> tuple[Params, BertConfig]:
    config = _read_config(os.path.join(folder, "config.json"), folder)
    _check_expected(config, expected, folder)
    st = os.path.join(folder, "model.safetensors")
    pt = os.path.join(folder, "pytorch_model.bin")
    if os.path.exists(st):
        from safetensors.numpy import load_file

        try:
            state = load_file(st)
        except Exception as e:
            raise ValueError(f"{st} is not a readable safetensors file: {e}") from e
    elif os.path.exists(pt):
        import torch

        try:
            raw = torch.load(pt, map_location="cpu", weights_only=True)
        except Exception as e:
            raise ValueError(f"{pt} is not a readable PyTorch checkpoint: {e}") from e
        state = {k: v.float().numpy() for k, v in raw.items()}
    else:
        raise FileNotFoundError(f"{folder}: neither model.safetensors nor pytorch_model.bin")
    return from_hf_state_dict(state, config, folder), config


def save_hf(folder: str, params: Params, config: BertConfig) -> None:
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    state = to_hf_state_dict(params, config)
    # safetensors refuses shared memory: the tied decoder is written as its own copy.
    save_file(
        {k: np.array(v, copy=True) for k, v in state.items()},
        os.path.join(folder, "model.safetensors"),
        metadata={"format": "pt"},
    )
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config_dict(config), f, indent=2)


# ------------------------------------------------------------------ original TF


def _tf_prefix(path: str) -> str:
    if os.path.isdir(path):
        index = sorted(glob.glob(os.path.join(path, "*.index")))
        if not index:
            raise FileNotFoundError(f"{path}: no TF checkpoint (*.index) in this folder")
        return index[0][: -len(".index")]
    return path[: -len(".index")] if path.endswith(".index") else path


def load_tf(path: str, expected: BertConfig | None = None) -> tuple[Params, BertConfig]:
    import tensorflow as tf

    prefix = _tf_prefix(path)
    config = _read_config(os.path.join(os.path.dirname(prefix), "bert_config.json"), prefix)
    _check_expected(config, expected, prefix)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as e:
        raise ValueError(f"{prefix} is not a readable TF checkpoint: {e}") from e
    names = set(reader.get_variable_to_shape_map())
    heads = "cls/predictions/output_bias" in names
    flat, used = {}, set()
    for entry in _name_table(config, heads):
        if entry.tf in names:
            value = np.asarray(reader.get_tensor(entry.tf), np.float32)
            flat[entry.path] = _relayout(entry.to_jax_tf, value, entry.tf, prefix, config)
            used.add(entry.tf)
    skip = ("global_step", "adam_", "/Adam", "bad_steps", "good_steps", "loss_scale")
    extra = sorted(n for n in names - used if not any(s in n for s in skip))
    if extra:
        raise ValueError(f"{prefix}: unexpected variables not in a BERT model: {', '.join(extra[:10])}")
    params = _nest(flat)
    validate(params, config, prefix)
    return params, config


def save_tf(prefix: str, params: Params, config: BertConfig) -> None:
    """Writes the original release's variable names (tf.compat.v1 Saver), bert_config.json beside."""
    import tensorflow as tf

    params = canonical(params, config)
    validate(params, config, "params to export")
    heads = "mlm" in params
    flat = flatten(params)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        variables = [
            tf.compat.v1.Variable(entry.to_tf(np.asarray(flat[entry.path], np.float32)), name=entry.tf)
            for entry in _name_table(config, heads)
        ]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, prefix, write_meta_graph=False)
    with open(os.path.join(os.path.dirname(os.path.abspath(prefix)), "bert_config.json"), "w") as f:
        json.dump(hf_config_dict(config) | {"hidden_act": config.hidden_act}, f, indent=2)


# ------------------------------------------------------------------ bert_jax


def save_bert_jax(folder: str, params: Params, config: BertConfig) -> None:
    import orbax.checkpoint as ocp

    params = canonical(params, config)
    validate(params, config, "params to export")
    folder = os.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "bert_config.json"), "w") as f:
        json.dump(config.replace(scan_layers=False).to_dict(), f, indent=2)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(folder, "params"), params, force=True)
    checkpointer.wait_until_finished()


def _restore_workdir_params(workdir: str) -> Params:
    """Only the ``params`` of the latest train state in ``workdir/checkpoints/<step>/``.

    A partial restore: the optimizer state (twice the size of the params for Adam) is
    never read.
    """
    import jax
    import orbax.checkpoint as ocp

    manager = ocp.CheckpointManager(
        os.path.join(workdir, "checkpoints"), item_handlers=ocp.PyTreeCheckpointHandler()
    )
    try:
        step = manager.latest_step()
        if step is None:
            raise ValueError(f"{workdir}: no params/ and no checkpoints/<step>/ in it")
        metadata = manager.item_metadata(step)
        tree = getattr(metadata, "tree", metadata)
        if not isinstance(tree, dict) or "params" not in tree:
            raise ValueError(f"{workdir}/checkpoints/{step} holds no train state with params")
        target = {"params": jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), tree["params"])}
        restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
        restored = manager.restore(
            step,
            args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args, partial_restore=True),
        )
    finally:
        manager.close()
    params = restored["params"]
    # A fine-tuning workdir holds `bert` plus a task head: the encoder is what converts.
    if "mlm" not in params:
        dropped = sorted(k for k in params if k != "bert")
        if dropped:
            logging.warning("%s: keeping the encoder, not converting %s", workdir, dropped)
        params = {"bert": params["bert"]} if "bert" in params else params
    return params


def load_bert_jax(path: str, expected: BertConfig | None = None) -> tuple[Params, BertConfig]:
    """A bert_jax export folder, or a pre-training workdir (its latest checkpoint)."""
    import orbax.checkpoint as ocp

    path = os.path.abspath(path)
    config = _read_config(os.path.join(path, "bert_config.json"), path)
    _check_expected(config, expected, path)
    if os.path.isdir(os.path.join(path, "params")):
        try:
            params = ocp.StandardCheckpointer().restore(os.path.join(path, "params"))
        except Exception as e:
            raise ValueError(f"{path}/params is not a readable orbax checkpoint: {e}") from e
    else:
        params = _restore_workdir_params(path)
    config = config.replace(scan_layers=False)
    params = canonical(params, config)
    validate(params, config, path)
    return params, config


# ------------------------------------------------------------------ dispatch


def detect_format(path: str) -> str:
    if os.path.isdir(path):
        names = set(os.listdir(path))
        if "bert_config.json" in names and ({"params", "checkpoints"} & names):
            return "bert_jax"
        if "config.json" in names and ({"model.safetensors", "pytorch_model.bin"} & names):
            return "hf"
        if any(n.endswith(".index") for n in names):
            return "tf"
    elif os.path.exists(path + ".index") or path.endswith(".index"):
        return "tf"
    raise ValueError(
        f"{path} is not a checkpoint: expected a Hugging Face folder (config.json + "
        "model.safetensors/pytorch_model.bin), an original TF checkpoint (*.index + "
        "bert_config.json) or a bert_jax folder (bert_config.json + params/ or checkpoints/)"
    )


def load_checkpoint(path: str, expected: BertConfig | None = None) -> tuple[Params, BertConfig]:
    """Params (``{"bert": ...}`` plus ``mlm``/``nsp`` when present) and the model config."""
    fmt = detect_format(path)
    return {"hf": load_hf, "tf": load_tf, "bert_jax": load_bert_jax}[fmt](path, expected)


def save_checkpoint(path: str, params: Params, config: BertConfig, fmt: str) -> str:
    """Writes the checkpoint; returns the folder it is in."""
    savers = {"hf": save_hf, "tf": save_tf, "bert_jax": save_bert_jax}
    if fmt not in savers:
        raise ValueError(f"unknown format {fmt!r}: bert_jax, hf or tf")
    if fmt == "tf" and "ckpt" not in os.path.basename(path.rstrip(os.sep)):
        path = os.path.join(path, "bert_model.ckpt")  # a folder, as the original release
    savers[fmt](path, params, config)
    return os.path.dirname(path) if fmt == "tf" else path


def source_casing(src: str) -> bool | None:
    """``do_lower_case`` of a checkpoint's `tokenizer_config.json`, if it has one."""
    folder = src if os.path.isdir(src) else os.path.dirname(src)
    path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        value = json.load(f).get("do_lower_case")
    return None if value is None else bool(value)


def write_tokenizer_files(folder: str, vocab_file: str, do_lower_case: bool, config: BertConfig) -> None:
    """The vocabulary and its casing beside a checkpoint, in every format: `vocab.txt` and
    a `tokenizer_config.json` that `transformers.AutoTokenizer` reads as a BertTokenizer."""
    import shutil

    dst = os.path.join(folder, "vocab.txt")
    if os.path.abspath(vocab_file) != os.path.abspath(dst):
        shutil.copyfile(vocab_file, dst)
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": do_lower_case,
        "model_max_length": config.max_position_embeddings,
        **{f"{t}_token": f"[{t.upper()}]" for t in ("unk", "sep", "pad", "cls", "mask")},
    }
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config, f, indent=2)
