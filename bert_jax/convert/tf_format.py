"""The original google-research TF release: a checkpoint (``bert_model.ckpt.*``, variables
``bert/encoder/layer_N/attention/self/query/kernel``, ...) with ``bert_config.json`` beside."""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from bert_jax.convert import layout, names
from bert_jax.convert.hf_format import hf_config_dict
from bert_jax.convert.layout import Params
from bert_jax.model.config import BertConfig
from bert_jax.storage import tensorflow_runtime

# Optimizer and bookkeeping variables of a training checkpoint: not parameters.
_SKIP = ("global_step", "adam_", "/Adam", "bad_steps", "good_steps", "loss_scale")


def _tf_prefix(path: str) -> str:
    """An original TF checkpoint's prefix, from a folder, a prefix or its ``.index`` file."""
    if os.path.isdir(path):
        index = sorted(glob.glob(os.path.join(path, "*.index")))
        if not index:
            raise FileNotFoundError(f"{path}: no TF checkpoint (*.index) in this folder")
        return index[0][: -len(".index")]
    return path[: -len(".index")] if path.endswith(".index") else path


def read_tf_config(path: str) -> tuple[str, BertConfig]:
    """An original TF checkpoint's prefix and the `bert_config.json` beside it."""
    prefix = _tf_prefix(path)
    return prefix, layout.read_config(os.path.join(os.path.dirname(prefix), "bert_config.json"), prefix)


def load_tf(path: str, expected: BertConfig | None = None) -> tuple[Params, BertConfig]:
    tf = tensorflow_runtime.tensorflow()

    prefix, config = read_tf_config(path)
    layout.check_expected(config, expected, prefix)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except Exception as e:
        raise ValueError(f"{prefix} is not a readable TF checkpoint: {e}") from e
    variables = set(reader.get_variable_to_shape_map())
    heads = "cls/predictions/output_bias" in variables
    flat, used = {}, set()
    for entry in names.entries(config, heads):
        if entry.tf in variables:
            flat[entry.path] = layout.relayout(
                reader.get_tensor(entry.tf), entry.tf_layout, entry.tf, prefix, config
            )
            used.add(entry.tf)
    extra = sorted(n for n in variables - used if not any(s in n for s in _SKIP))
    if extra:
        raise ValueError(f"{prefix}: unexpected variables not in a BERT model: {', '.join(extra[:10])}")
    params = layout.nest(flat)
    layout.validate(params, config, prefix)
    return layout.for_config(params, config), config


def save_tf(prefix: str, params: Params, config: BertConfig) -> None:
    """Writes the original release's variable names (tf.compat.v1 Saver), bert_config.json beside."""
    layout.check_exportable(config, "tf")
    tf = tensorflow_runtime.tensorflow()

    params = layout.canonical(params, config)
    layout.validate(params, config, "params to export")
    flat = layout.flatten(params)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    graph = tf.Graph()
    with graph.as_default():
        variables = [
            tf.compat.v1.Variable(
                names.from_jax(np.asarray(flat[entry.path], np.float32), entry.tf_layout), name=entry.tf
            )
            for entry in names.entries(config, "mlm" in params)
        ]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, prefix, write_meta_graph=False)
    with open(os.path.join(os.path.dirname(os.path.abspath(prefix)), "bert_config.json"), "w") as f:
        json.dump(hf_config_dict(config) | {"hidden_act": config.hidden_act}, f, indent=2)
