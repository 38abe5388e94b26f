"""The one in-memory layout every format reads into and writes from, and its checks.

Readers produce nested numpy params with per-layer names (``bert/encoder/layer_i/...``)
and exactly `vocab_size` vocabulary rows, `validate` them against the model's own shapes
(`param_shapes.check`: nothing is loaded in part), then pad the vocabulary for the config
(`for_config`). Writers start from `canonical`, which undoes scanning and padding.
"""

from __future__ import annotations

import json
import os
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.convert import names
from bert_jax.model import param_shapes, vocab_padding
from bert_jax.model.config import ARCHITECTURE_KEYS, SHAPE_KEYS, BertConfig
from bert_jax.model.encoder import BertModel, unstack_layers
from bert_jax.model.heads import BertForPreTraining

Params = dict[str, Any]


def flatten(params: Params, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    out: dict[tuple[str, ...], Any] = {}
    for k, v in params.items():
        if isinstance(v, dict):
            out.update(flatten(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


def nest(flat: dict[tuple[str, ...], Any]) -> Params:
    out: Params = {}
    for path, value in flat.items():
        node = out
        for k in path[:-1]:
            node = node.setdefault(k, {})
        node[path[-1]] = value
    return out


def unpadded(config: BertConfig) -> BertConfig:
    """The config of the on-disk layout: per-layer names, no vocabulary padding."""
    return config.replace(vocab_pad_multiple=1)


def expected_tree(config: BertConfig, heads: bool) -> Params:
    """Abstract params of `BertForPreTraining` (or, without `heads`, ``{"bert": encoder}``)
    for `config`, from the model itself (`jax.eval_shape`: nothing is allocated)."""
    ids = jnp.zeros((1, 4), jnp.int32)
    if heads:
        model = BertForPreTraining(config)
        init = lambda: model.init(jax.random.key(0), ids, ids, ids, jnp.zeros((1, 1), jnp.int32))
        return nn.meta.unbox(jax.eval_shape(init)["params"])
    init = lambda: BertModel(config).init(jax.random.key(0), ids)
    return {"bert": nn.meta.unbox(jax.eval_shape(init)["params"])}


def expected_shapes(config: BertConfig, heads: bool) -> dict[tuple[str, ...], tuple[int, ...]]:
    """Parameter path → shape of the model for `config` (see `expected_tree`)."""
    return {p: tuple(x.shape) for p, x in flatten(expected_tree(config, heads)).items()}


def validate(params: Params, config: BertConfig, source: str) -> None:
    """Every tensor of the on-disk layout (`unpadded`) present with its shape, nothing else
    (the next-sentence head may be absent beside the MLM head: ModernBERT has none)."""
    heads = "mlm" in params or "nsp" in params
    expected = expected_tree(unpadded(config), heads)
    if heads and "nsp" not in params:
        expected = {k: v for k, v in expected.items() if k != "nsp"}
    param_shapes.check(expected, params, f"{source} ({describe(config)})")


def _resize_decoder(params: Params, config: BertConfig, rows: int) -> Params:
    """An untied MLM decoder ([V, H], ``mlm/decoder``) resized like the word embeddings."""
    mlm = params.get("mlm")
    if not isinstance(mlm, dict) or "decoder" not in mlm or np.shape(mlm["decoder"])[0] < config.vocab_size:
        return params
    decoder = vocab_padding.resize_rows(mlm["decoder"], config.vocab_size, rows)
    return {**params, "mlm": {**mlm, "decoder": decoder}}


def canonical(params: Params, config: BertConfig) -> Params:
    """Per-layer, unpadded numpy params: the one layout every saver writes.

    A model trained with scanned layers (``layer_loop="scan"``) holds ``encoder/layers/layer/...`` with a
    leading [L] axis; checkpoints on disk always use ``encoder/layer_i`` names so that a
    scanned and an unscanned run share them. Vocabulary padding rows are dropped.
    """
    params = unstack_layers(params, config.num_hidden_layers)
    params = nest({p: np.asarray(v) for p, v in flatten(params).items()})
    params = _resize_decoder(params, config, config.vocab_size)
    return vocab_padding.resize_vocab(params, config.vocab_size, config.vocab_size)


def for_config(params: Params, config: BertConfig) -> Params:
    """Validated on-disk params with the vocabulary padded for `config`."""
    params = _resize_decoder(params, config, config.padded_vocab_size)
    return vocab_padding.resize_vocab(params, config.vocab_size, config.padded_vocab_size)


def describe(c: BertConfig) -> str:
    return f"L={c.num_hidden_layers} H={c.hidden_size} A={c.num_attention_heads} vocab={c.vocab_size}"


def check_expected(config: BertConfig, expected: BertConfig | None, source: str) -> None:
    """The checkpoint's config has `expected`'s shape (`SHAPE_KEYS`), if one is given."""
    if expected is None:
        return
    diffs = [
        f"{k}={getattr(config, k)} (expected {getattr(expected, k)})"
        for k in SHAPE_KEYS + ARCHITECTURE_KEYS
        if getattr(config, k) != getattr(expected, k)
    ]
    if diffs:
        raise ValueError(f"{source} is a different model: " + ", ".join(diffs))


def hf_family(config: BertConfig) -> str:
    """The `transformers` model a ``--dst_format=hf`` export writes: "bert" for the paper's
    architecture (no recipe switch on but an untied MLM decoder, which `transformers`' BERT
    holds too), else "modernbert"."""
    return "modernbert" if [s for s in config.switches_on() if s != "tie_word_embeddings=False"] else "bert"


def split_classifier(params: Params) -> tuple[Params, Params | None]:
    """(the model's params without a sequence classifier, the classifier or None)."""
    return {k: v for k, v in params.items() if k != "classifier"}, params.get("classifier")


def check_classifier(classifier: Params, config: BertConfig, source: str) -> Params:
    """A sequence classifier (``kernel`` [H, labels], ``bias`` [labels]) that fits `config`."""
    kernel, bias = np.asarray(classifier["kernel"], np.float32), np.asarray(classifier["bias"], np.float32)
    if kernel.ndim != 2 or kernel.shape[0] != config.hidden_size or bias.shape != kernel.shape[1:]:
        raise ValueError(
            f"{source}: a classifier of shape {kernel.shape} (bias {bias.shape}) does not fit "
            f"hidden_size={config.hidden_size}"
        )
    return {"kernel": kernel, "bias": bias}


def check_exportable(config: BertConfig, fmt: str, fold_segment: bool = False) -> None:
    """Hugging Face's `BertModel` and the original TF graph are the paper's architecture:
    a model with a recipe switch on (pre-LN, GeGLU, rotary, sinusoidal or ALiBi positions,
    no biases, ...) has no faithful export to them. To Hugging Face such a model goes as a
    ModernBERT (`modernbert_format`) where that class can hold it; otherwise it is refused
    in one line naming the switches and what ModernBERT cannot hold."""
    from bert_jax.convert import modernbert_format  # (it imports this module)

    switches = config.switches_on()
    if not switches or (fmt == "hf" and hf_family(config) == "bert"):
        return
    if fmt == "hf":
        reasons = modernbert_format.cannot_hold(config, fold_segment)
        if reasons:
            raise ValueError(
                f"--dst_format=hf: the Hugging Face BertModel cannot represent {', '.join(switches)}; "
                f"ModernBERT cannot represent {', '.join(reasons)}; export with --dst_format=bert_jax"
            )
        return
    raise ValueError(
        f"--dst_format={fmt}: the original TF BERT cannot represent {', '.join(switches)}; "
        "export with --dst_format=bert_jax"
    )


def read_config(path: str, source: str) -> BertConfig:
    """A `config.json` / `bert_config.json` beside the weights (a BERT, or an error)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{source}: no {os.path.basename(path)} beside the weights")
    with open(path) as f:
        values = json.load(f)
    check_model_type(values, path, ("bert",))
    return BertConfig.from_dict(values)


# The `model_type`s of Hugging Face configs that load (`hf_format.load_hf`).
HF_MODEL_TYPES = ("bert", "modernbert")


def check_model_type(values: dict, path: str, loadable: tuple[str, ...] = HF_MODEL_TYPES) -> str:
    """The config's ``model_type`` (absent: "bert"), or one line naming it and the types that load."""
    model_type = values.get("model_type", "bert")
    if model_type not in loadable:
        raise ValueError(
            f"{path}: model_type {model_type!r} does not load; the types that load are {', '.join(loadable)}"
        )
    return model_type


def relayout(
    value: np.ndarray, layout: tuple[str, ...], name: str, source: str, config: BertConfig
) -> np.ndarray:
    """One foreign tensor into bert_jax's layout (`names.to_jax`); a reshape that cannot
    fit names the tensor."""
    try:
        return names.to_jax(np.asarray(value, np.float32), layout, config)
    except ValueError as e:
        raise ValueError(
            f"{source}: tensor {name} has shape {value.shape}, which does not fit the "
            f"model config ({describe(config)})"
        ) from e
