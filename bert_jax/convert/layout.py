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
from bert_jax.model import heads, param_shapes, vocab_padding
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


# A fine-tuned model's task head beside the encoder: its params key → what it is and the
# `transformers` BERT class that holds it (the same tensor names: ``classifier.*``, or
# ``qa_outputs.*`` for the span head). At most one per checkpoint.
TASK_HEADS = {
    "classifier": ("sequence classifier", "BertForSequenceClassification"),
    "token_classifier": ("token classifier", "BertForTokenClassification"),
    "choice_classifier": ("multiple-choice scorer", "BertForMultipleChoice"),
    "qa_outputs": ("span head (question answering)", "BertForQuestionAnswering"),
}
_HEAD_OUTPUTS = {"choice_classifier": 1, "qa_outputs": 2}  # the others: one per label
# The bert_jax model of each (`bert_jax.model.heads`), whose own params name it ``classifier``
# (``qa_outputs`` for the span head).
_HEAD_MODELS = {
    heads.BertForSequenceClassification: "classifier",
    heads.BertForTokenClassification: "token_classifier",
    heads.BertForMultipleChoice: "choice_classifier",
    heads.BertForQuestionAnswering: "qa_outputs",
}


def head_module_name(key: str) -> str:
    """The name a task head's tensors go by in its bert_jax model (`bert_jax.model.heads`)
    and in its `transformers` class alike: ``qa_outputs`` for the span head, ``classifier``
    for the others."""
    return "qa_outputs" if key == "qa_outputs" else "classifier"


def task_head_name(model: Any) -> str | None:
    """The `TASK_HEADS` key of a fine-tuning model's head (None for another model: the
    BiLSTM of the feature-based runs)."""
    return _HEAD_MODELS.get(type(model))


TaskHead = tuple[str, Params]  # (its key in TASK_HEADS, its kernel and bias)


def split_task_head(params: Params) -> tuple[Params, TaskHead | None]:
    """(the model's params without a task head, the task head or None)."""
    found = [k for k in TASK_HEADS if k in params]
    if len(found) > 1:
        raise ValueError(f"params hold {len(found)} task heads ({', '.join(found)}): one at most")
    rest = {k: v for k, v in params.items() if k not in TASK_HEADS}
    return rest, ((found[0], params[found[0]]) if found else None)


def with_task_head(params: Params, head: TaskHead | None, config: BertConfig, source: str) -> Params:
    """`params` with `head` checked (`check_task_head`) beside them; as they are without one."""
    if head is None:
        return params
    return {**params, head[0]: check_task_head(head, config, source)}


def check_task_head(head: TaskHead, config: BertConfig, source: str) -> Params:
    """A task head's ``kernel`` [H, outputs] and ``bias`` [outputs] that fit `config`: one
    output per label, one for the multiple-choice scorer, two (start, end) for the span head."""
    name, tensors = head
    kernel, bias = np.asarray(tensors["kernel"], np.float32), np.asarray(tensors["bias"], np.float32)
    outputs = _HEAD_OUTPUTS.get(name)
    fits = kernel.ndim == 2 and kernel.shape[0] == config.hidden_size and bias.shape == kernel.shape[1:]
    if not fits or (outputs is not None and kernel.shape[1] != outputs):
        want = f"[{config.hidden_size}, {outputs if outputs is not None else 'labels'}]"
        raise ValueError(
            f"{source}: a {TASK_HEADS[name][0]} of shape {kernel.shape} (bias {bias.shape}) does not "
            f"fit hidden_size={config.hidden_size}: it needs {want}"
        )
    return {"kernel": kernel, "bias": bias}


def head_outputs(params: Params) -> int:
    """The labels of a sequence or token classifier in `params` (0 for none or another head)."""
    for name in ("classifier", "token_classifier"):
        if name in params:
            return int(np.shape(params[name]["bias"])[0])
    return 0


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
