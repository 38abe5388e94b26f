"""The Hugging Face format: a folder with ``config.json`` and ``model.safetensors`` (or
``pytorch_model.bin``). A BERT (``model_type: bert``): encoder tensors with or without the
``bert.`` prefix, with or without the ``cls.*`` pre-training heads. A ModernBERT
(``model_type: modernbert``): `modernbert_format`. An export writes a BERT for the paper's
architecture and a ModernBERT for a model of that family (`layout.hf_family`)."""

from __future__ import annotations

import json
import os

import numpy as np
from safetensors.numpy import load_file, save_file

from bert_jax.convert import hf_configs, layout, modernbert_format, names
from bert_jax.convert.layout import Params
from bert_jax.model.config import BertConfig
from bert_jax.storage import atomic_files

# Tied or bookkeeping tensors that carry no parameters of their own.
_IGNORABLE = (
    "cls.predictions.decoder.weight",
    "cls.predictions.decoder.bias",
    "bert.embeddings.position_ids",
)


def from_hf_state_dict(
    state: dict[str, np.ndarray],
    config: BertConfig,
    source: str = "state dict",
    architectures: list[str] | None = None,
) -> Params:
    """A Hugging Face BERT state dict (with or without the ``bert.`` prefix; a fine-tuned
    class's task head too: ``classifier.*``, as the folder's `architectures` say which
    head it is, or ``qa_outputs.*``) → params, the vocabulary padded for `config`."""
    state = {k: np.asarray(v, np.float32) for k, v in state.items()}
    if not any(k.startswith("bert.") for k in state):
        tops = ("cls.", "classifier.", "qa_outputs.")
        state = {(k if k.startswith(tops) else f"bert.{k}"): v for k, v in state.items()}
    heads = any(k.startswith("cls.predictions.transform") for k in state)
    if "cls.predictions.decoder.bias" in state:  # what transformers 5 computes with (4.x: the same tensor)
        state["cls.predictions.bias"] = state["cls.predictions.decoder.bias"]
    flat, used = {}, set()
    for entry in names.entries(config, heads):
        found = next((name for name in entry.hf if name in state), None)
        if found is None:
            continue  # reported as missing by `validate`
        used.add(found)
        flat[entry.path] = layout.relayout(state[found], entry.hf_layout, found, source, config)
    if heads:
        flat.update(_decoder_from(state, used, config, source))
    for prefix in ("classifier", "qa_outputs"):
        if f"{prefix}.weight" in state:
            name = prefix if prefix == "qa_outputs" else _classifier_key(architectures)
            flat[(name, "kernel")] = np.ascontiguousarray(state[f"{prefix}.weight"].T)
            outputs = state[f"{prefix}.weight"].shape[0]
            flat[(name, "bias")] = state.get(f"{prefix}.bias", np.zeros(outputs, np.float32))
            used.update((f"{prefix}.weight", f"{prefix}.bias"))
    extra = sorted(k for k in state if k not in used and k not in _IGNORABLE)
    if extra:
        raise ValueError(f"{source}: unexpected tensors not in a BERT model: {', '.join(extra[:10])}")
    params, head = layout.split_task_head(layout.nest(flat))
    if "pooler" not in params.get("bert", {}):
        params["bert"]["pooler"] = _fresh_pooler(config, source)
    layout.validate(params, config, source)
    params = layout.for_config(params, config)
    return layout.with_task_head(params, head, config, source)


def _classifier_key(architectures: list[str] | None) -> str:
    """Which task head a folder's ``classifier.*`` is, by the class `architectures` names
    (a sequence classifier when it names none of the others)."""
    for name, (_, cls) in layout.TASK_HEADS.items():
        if cls in (architectures or []):
            return name
    return "classifier"


def _decoder_from(state: dict, used: set[str], config: BertConfig, source: str) -> dict:
    """An untied decoder's own matrix (``tie_word_embeddings: false``), or nothing: a tied
    one must equal the word embeddings."""
    decoder = state.get("cls.predictions.decoder.weight")
    word = state.get("bert.embeddings.word_embeddings.weight")
    if not config.tie_word_embeddings:
        if decoder is None:
            raise ValueError(f"{source}: tie_word_embeddings=false but no cls.predictions.decoder.weight")
        used.add("cls.predictions.decoder.weight")
        return {("mlm", "decoder"): decoder}
    if decoder is not None and word is not None and not np.array_equal(decoder, word):
        raise ValueError(
            f"{source}: the MLM decoder is not tied to the word embeddings (tie_word_embeddings=true)"
        )
    return {}


def _fresh_pooler(config: BertConfig, source: str) -> Params:
    """A pooler as `transformers` initialises BERT's (a BertForMaskedLM folder has none),
    with a warning line: the sentence-level tasks start it afresh either way."""
    print(
        f"warning: {source} has no bert.pooler.* tensors: the pooler starts from a fresh initialisation "
        "(only the next-sentence, sentence-classification and multiple-choice heads read it)"
    )
    h = config.hidden_size
    kernel = np.random.default_rng(0).normal(0.0, config.initializer_range, (h, h)).astype(np.float32)
    return {"dense": {"kernel": kernel, "bias": np.zeros(h, np.float32)}}


def to_hf_state_dict(params: Params, config: BertConfig) -> dict[str, np.ndarray]:
    """Params → a `transformers` BertForPreTraining (or the class of its task head,
    `layout.TASK_HEADS`, or BertModel without heads) state dict.

    The tied decoder weight (and its bias alias) are written too: `from_pretrained`
    then reports no missing keys, and the tie makes them the same tensors again.
    """
    layout.check_exportable(config, "hf")
    if layout.hf_family(config) != "bert":
        raise ValueError(
            f"the Hugging Face BertModel cannot represent {', '.join(config.switches_on())}: "
            "a model of the ModernBERT family exports with save_hf"
        )
    params, head = layout.split_task_head(params)
    params = layout.canonical(params, config)
    layout.validate(params, config, "params to export")
    heads = "mlm" in params
    flat = layout.flatten(params)
    out = {
        entry.hf[0]: names.from_jax(np.asarray(flat[entry.path], np.float32), entry.hf_layout)
        for entry in names.entries(config, heads)
        if entry.path in flat  # (`validate` allows a masked-LM head without the next-sentence one)
    }
    if heads:
        decoder = out["bert.embeddings.word_embeddings.weight"]
        if not config.tie_word_embeddings:
            decoder = np.asarray(flat[("mlm", "decoder")], np.float32)
        out["cls.predictions.decoder.weight"] = decoder
        out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    if head is not None:
        tensors = layout.check_task_head(head, config, "params to export")
        prefix = layout.head_module_name(head[0])
        out[f"{prefix}.weight"] = np.ascontiguousarray(tensors["kernel"].T)
        out[f"{prefix}.bias"] = tensors["bias"]
        if head[0] in ("token_classifier", "qa_outputs"):  # their classes have no pooler
            out = {k: v for k, v in out.items() if not k.startswith("bert.pooler.")}
    return out


def hf_config_dict(
    config: BertConfig,
    architecture: str = "BertForPreTraining",
    num_labels: int = 0,
    label_names: list[str] | None = None,
) -> dict:
    """`config.json` of `transformers.BertConfig` (the vocabulary unpadded, as the weights)."""
    out = {
        "architectures": [architecture],
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
        "tie_word_embeddings": config.tie_word_embeddings,
        "pad_token_id": 0,
    }
    return {**out, **hf_configs.labels_dict(num_labels, label_names)}


def bert_architecture(params: Params) -> str:
    """The `transformers` BERT class that holds `params`' heads."""
    _, head = layout.split_task_head(params)
    if head is not None:
        return layout.TASK_HEADS[head[0]][1]
    if "mlm" in params:
        return "BertForPreTraining" if "nsp" in params else "BertForMaskedLM"
    return "BertModel"


def _read_state(folder: str) -> dict[str, np.ndarray]:
    st = os.path.join(folder, "model.safetensors")
    pt = os.path.join(folder, "pytorch_model.bin")
    if os.path.exists(st):
        try:
            return load_file(st)
        except Exception as e:
            raise ValueError(f"{st} is not a readable safetensors file: {e}") from e
    if os.path.exists(pt):
        import torch  # deferred: PyTorch is heavy to import

        try:
            raw = torch.load(pt, map_location="cpu", weights_only=True)
        except Exception as e:
            raise ValueError(f"{pt} is not a readable PyTorch checkpoint: {e}") from e
        return {k: v.float().numpy() for k, v in raw.items()}
    raise FileNotFoundError(f"{folder}: neither model.safetensors nor pytorch_model.bin")


def read_hf_config(folder: str) -> tuple[BertConfig, dict]:
    """A BERT or ModernBERT folder's `BertConfig` and its ``config.json`` as written."""
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{folder}: no config.json beside the weights")
    with open(path) as f:
        values = json.load(f)
    if layout.check_model_type(values, path) == "modernbert":
        return modernbert_format.bert_config(values, path), values
    return hf_configs.bert_config(values, path), values


def load_hf(folder: str, expected: BertConfig | None = None) -> tuple[Params, BertConfig]:
    config, values = read_hf_config(folder)
    layout.check_expected(config, expected, folder)
    state, architectures = _read_state(folder), values.get("architectures")
    if values.get("model_type") == "modernbert":
        return modernbert_format.from_state_dict(state, config, folder, architectures), config
    return from_hf_state_dict(state, config, folder, architectures), config


def save_hf(
    folder: str,
    params: Params,
    config: BertConfig,
    fold_segment: bool = False,
    label_names: list[str] | None = None,
) -> None:
    """A BERT folder, or a ModernBERT one for a model of that family (`fold_segment`: fold
    row 0 of a segment embedding trained on segment 0 only; `modernbert_format`); a
    classifier's `label_names` become its ``id2label``."""
    os.makedirs(folder, exist_ok=True)
    labels = layout.head_outputs(params)
    if layout.hf_family(config) == "bert":
        state = to_hf_state_dict(params, config)
        hf_config = hf_config_dict(config, bert_architecture(params), labels, label_names)
    else:
        state, architecture, held = modernbert_format.to_state_dict(params, config, fold_segment)
        hf_config = modernbert_format.hf_config(held, architecture, labels, label_names)
    # safetensors refuses shared memory: the tied decoder is written as its own copy.
    tensors = {k: np.array(v, copy=True) for k, v in state.items()}
    atomic_files.write_with(  # whole, and with the umask's mode (safetensors' own file is 0600)
        os.path.join(folder, "model.safetensors"),
        lambda name: save_file(tensors, name, metadata={"format": "pt"}),
    )
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2)
