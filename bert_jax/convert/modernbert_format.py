"""The Hugging Face ModernBERT format (``model_type: modernbert``; Warner et al., 2024):
a folder with ``config.json`` and ``model.safetensors`` (or ``pytorch_model.bin``) of
`transformers`' ModernBertModel, ModernBertForMaskedLM, or a fine-tuned ModernBERT of a task
class (`TASK_CLASSES`: sequence and token classification, multiple choice, question answering).

A ModernBERT is a bert_jax model of the ModernBERT family (`BertConfig`'s switches; the
config mapping is `bert_config` / `hf_config`, the tensors `modernbert_names`). Loaded:

- ``head.*`` (ModernBertPredictionHead) is the MLM transform of a masked-LM checkpoint and
  also the pooler (ModernBERT's classification head before its classifier): that is what
  `transformers` itself does when ModernBertForSequenceClassification loads a masked-LM
  checkpoint, so fine-tuning starts where it would there;
- ``decoder.weight`` must equal the embeddings when tied; ``decoder_bias=False`` loads a
  zero MLM bias; ``classifier.*`` becomes the task head of the folder's class
  (`TASK_CLASSES`; a sequence classifier where ``architectures`` names none), the head of
  the `bert_jax.model.heads` model that computes what the class does (its prediction head
  is ``bert/pooler``, at every token for the token and span heads).

Exported: a model the class can hold (`cannot_hold` names what it cannot, one reason per
switch). A segment embedding of one row (``type_vocab_size=1``) is folded into the word
embeddings exactly: BERT adds it to every token before the embedding LayerNorm, so
``word[i] + type[0]`` is the same sum either way (a decoder tied to the word embeddings
keeps the unfolded table, exported untied); with ``fold_segment`` so is row 0 of a larger
table trained on segment 0 only (FULL-SENTENCES rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bert_jax.convert import hf_configs, layout
from bert_jax.convert import modernbert_names as names
from bert_jax.convert.layout import Params
from bert_jax.model.config import BertConfig

# `transformers.ModernBertConfig`'s defaults (4.57 and 5.24), for keys a config.json leaves out.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50368,
    "hidden_size": 768,
    "intermediate_size": 1152,
    "num_hidden_layers": 22,
    "num_attention_heads": 12,
    "hidden_activation": "gelu",
    "max_position_embeddings": 8192,
    "initializer_range": 0.02,
    "norm_eps": 1e-5,
    "norm_bias": False,
    "global_rope_theta": 160000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "global_attn_every_n_layers": 3,
    "local_attention": 128,
    "local_rope_theta": 10000.0,
    "mlp_bias": False,
    "mlp_dropout": 0.0,
    "decoder_bias": True,
    "classifier_pooling": "cls",
    "classifier_bias": False,
    "classifier_activation": "gelu",
    "tie_word_embeddings": True,
}
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
_HF_ACTIVATION = {"gelu": "gelu", "gelu_tanh": "gelu_pytorch_tanh", "relu": "relu"}
_BIAS_FLAGS = ("attention_bias", "mlp_bias", "classifier_bias")
# The 5.x schema's rotary and attention-pattern keys (and 4.x's scaling key), read by `hf_configs`.
_ROPE_AND_PATTERN_KEYS = ("rope_parameters", "layer_types", "rope_scaling")


def bert_config(values: dict[str, Any], source: str) -> BertConfig:
    """A ModernBERT config.json (the 4.x or the 5.x schema: `hf_configs`) → the
    `BertConfig` of the same model (one line naming the key where bert_jax has no
    equivalent; one warning line naming keys it does not know)."""
    hf_configs.warn_unknown(values, {*HF_DEFAULTS, *_ROPE_AND_PATTERN_KEYS}, source)
    v = {**HF_DEFAULTS, **{k: x for k, x in values.items() if x is not None}}
    global_base, local_base = hf_configs.rotary_bases(
        values, HF_DEFAULTS["global_rope_theta"], HF_DEFAULTS["local_rope_theta"], source
    )
    every, layer_types = hf_configs.attention_pattern(
        values, v["num_hidden_layers"], HF_DEFAULTS["global_attn_every_n_layers"], source
    )
    acts = {k: v[k] for k in ("hidden_activation", "classifier_activation")}
    if any(a not in _ACTIVATIONS for a in acts.values()) or len({_ACTIVATIONS[a] for a in acts.values()}) > 1:
        raise ValueError(
            f"{source}: hidden_activation={acts['hidden_activation']!r} with classifier_activation="
            f"{acts['classifier_activation']!r}: bert_jax takes one of {sorted(_ACTIVATIONS)} for both"
        )
    biases = {k: bool(v[k]) for k in _BIAS_FLAGS}
    if len(set(biases.values())) > 1:
        raise ValueError(f"{source}: {biases} differ; bert_jax's use_bias sets all three alike")
    return BertConfig(
        vocab_size=v["vocab_size"],
        hidden_size=v["hidden_size"],
        num_hidden_layers=v["num_hidden_layers"],
        num_attention_heads=v["num_attention_heads"],
        intermediate_size=v["intermediate_size"],
        hidden_act=_ACTIVATIONS[acts["hidden_activation"]],
        hidden_dropout_prob=float(v["mlp_dropout"]),
        attention_probs_dropout_prob=float(v["attention_dropout"]),
        max_position_embeddings=v["max_position_embeddings"],
        type_vocab_size=0,
        initializer_range=v["initializer_range"],
        layer_norm_eps=v["norm_eps"],
        pre_layer_norm=True,
        gated_ffn=True,
        position_embedding_type="rotary",
        rotary_base=global_base,
        use_bias=biases["attention_bias"],
        first_layer_attention_norm=False,
        norm_bias=bool(v["norm_bias"]),
        global_attn_every_n_layers=every,
        local_attention=v["local_attention"],
        local_rotary_base=local_base,
        layer_types=layer_types,
        tie_word_embeddings=bool(v["tie_word_embeddings"]),
        classifier_pooling=v["classifier_pooling"],
    )


def cannot_hold(config: BertConfig, fold_segment: bool = False) -> list[str]:
    """What `transformers`' ModernBERT cannot represent of `config`, one ``key=value
    (why)`` per switch; empty when it can hold the model."""
    c, reasons = config, []
    if c.position_embedding_type != "rotary":
        reasons.append(f"position_embedding_type={c.position_embedding_type} (its positions are rotary)")
    if not c.pre_layer_norm:
        reasons.append("pre_layer_norm=False (its layers are pre-LN)")
    if c.first_layer_attention_norm:
        reasons.append("first_layer_attention_norm=True (its layer 0 has no attention LayerNorm)")
    if not c.gated_ffn:
        reasons.append("gated_ffn=False (its feed-forward is GeGLU)")
    if c.causal_attention:
        reasons.append("causal_attention=True (it attends both ways)")
    if c.type_vocab_size > 1 and not fold_segment:
        reasons.append(
            f"type_vocab_size={c.type_vocab_size} (a segment embedding; it has none: "
            "--fold_segment_embedding folds it in, exact for a model trained on segment 0 alone)"
        )
    return reasons


def hf_config(
    config: BertConfig, architecture: str, num_labels: int = 0, label_names: list[str] | None = None
) -> dict[str, Any]:
    """`config.json` of `transformers.ModernBertConfig` for `config` (special token ids:
    `tokenizer_files.write_tokenizer_files` sets them from the tokenizer)."""
    c = config
    out: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": "modernbert",
        "vocab_size": c.vocab_size,
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_hidden_layers": c.num_hidden_layers,
        "num_attention_heads": c.num_attention_heads,
        "hidden_activation": _HF_ACTIVATION[c.hidden_act],
        "classifier_activation": _HF_ACTIVATION[c.hidden_act],
        "max_position_embeddings": c.max_position_embeddings,
        "initializer_range": c.initializer_range,
        "norm_eps": c.layer_norm_eps,
        "norm_bias": c.norm_bias,
        # The 5.x schema (`rope_parameters`, `layer_types`) and the 4.x one beside it.
        "rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": c.rotary_base},
            "sliding_attention": {"rope_type": "default", "rope_theta": c.local_rotary_base},
        },
        "layer_types": [
            "full_attention" if c.layer_window(i) is None or not c.has_local_layers else "sliding_attention"
            for i in range(c.num_hidden_layers)
        ],
        "global_rope_theta": c.rotary_base,
        "local_rope_theta": c.local_rotary_base,
        "global_attn_every_n_layers": c.global_attn_every_n_layers,
        "local_attention": c.local_attention,
        **{k: c.use_bias for k in _BIAS_FLAGS},
        "decoder_bias": True,
        "tie_word_embeddings": c.tie_word_embeddings,
        "classifier_pooling": "cls" if c.classifier_pooling == "bert" else c.classifier_pooling,
        "attention_dropout": c.attention_probs_dropout_prob,
        "mlp_dropout": c.hidden_dropout_prob,
        "embedding_dropout": c.hidden_dropout_prob,
        "classifier_dropout": c.hidden_dropout_prob,
        # ModernBERT's own ids where its vocabulary is there, else none (set from a tokenizer).
        **{f"{r}_token_id": (i if c.vocab_size > 50283 else None) for r, i in _MODERNBERT_IDS.items()},
    }
    return {**out, **hf_configs.labels_dict(num_labels, label_names)}


_MODERNBERT_IDS = {"pad": 50283, "bos": 50281, "eos": 50282, "cls": 50281, "sep": 50282}


def _getter(state: dict[str, np.ndarray], used: set[str], source: str) -> names.Getter:
    def get(name: str) -> np.ndarray:
        if name not in state:
            raise ValueError(f"{source}: tensor {name} is missing (a ModernBERT of this config has it)")
        used.add(name)
        return state[name]

    return get


# ModernBERT's task classes → the `layout.TASK_HEADS` key of their ``classifier.*``. Each
# puts its prediction head (``head.*``, bert_jax's ``bert/pooler``) before the classifier:
# at [CLS] (or the mean) for a sentence or a choice, at every token for the token and span
# heads (`poolers.token_head`); the span head's two outputs are start and end.
TASK_CLASSES = {
    "ModernBertForSequenceClassification": "classifier",
    "ModernBertForTokenClassification": "token_classifier",
    "ModernBertForMultipleChoice": "choice_classifier",
    "ModernBertForQuestionAnswering": "qa_outputs",
}


def from_state_dict(
    state: dict[str, np.ndarray], config: BertConfig, source: str, architectures: list[str] | None = None
) -> Params:
    """A ModernBERT state dict (``model.`` prefix or none) → params (vocabulary padded)."""
    state = {k if k.startswith(("model.", "head.", "decoder.", "classifier.")) else f"model.{k}": v
             for k, v in state.items()}  # fmt: skip
    state = {k: np.asarray(v, np.float32) for k, v in state.items()}
    used: set[str] = set()
    get = _getter(state, used, source)
    try:
        flat = names.encoder_from_hf(get, config)
        mlm = any(k.startswith("decoder.") for k in state) or "ModernBertForMaskedLM" in (architectures or [])
        if any(k.startswith("head.") for k in state):
            flat.update(names.head_from_hf(get, *names.POOLER_HEAD, config))
            if mlm:
                flat.update(names.head_from_hf(get, *names.MLM_HEAD, config))
        if mlm:
            flat.update(_decoder_from(state, used, flat, config, source))
        if "classifier.weight" in state:
            key = next((TASK_CLASSES[a] for a in architectures or [] if a in TASK_CLASSES), "classifier")
            flat[(key, "kernel")] = np.ascontiguousarray(get("classifier.weight").T)
            flat[(key, "bias")] = get("classifier.bias")
    except ValueError as e:
        if str(e).startswith(source):
            raise
        raise ValueError(
            f"{source}: a tensor does not fit the config ({layout.describe(config)}): {e}"
        ) from e
    extra = sorted(set(state) - used)
    if extra:
        raise ValueError(f"{source}: unexpected tensors not in a ModernBERT: {', '.join(extra[:10])}")
    params = layout.nest(flat)
    if "pooler" not in params["bert"]:
        params["bert"]["pooler"] = _fresh_pooler(config, source)
    params, head = layout.split_task_head(params)
    layout.validate(params, config, source)
    params = layout.for_config(params, config)
    return layout.with_task_head(params, head, config, source)


def _decoder_from(state: dict, used: set[str], flat: names.Flat, c: BertConfig, source: str) -> names.Flat:
    """The MLM output bias (zeros without ``decoder_bias``) and, untied, the decoder."""
    word = flat[("bert", "embeddings", "word_embeddings", "embedding")]
    out = {("mlm", "bias"): state.get("decoder.bias", np.zeros(word.shape[0], np.float32))}
    used.update(k for k in ("decoder.bias", "decoder.weight") if k in state)
    decoder = state.get("decoder.weight")
    if not c.tie_word_embeddings:
        if decoder is None:
            raise ValueError(f"{source}: tie_word_embeddings=false but no decoder.weight")
        out[("mlm", "decoder")] = decoder
    elif decoder is not None and not np.array_equal(decoder, word):
        raise ValueError(
            f"{source}: the MLM decoder is not tied to the embeddings (tie_word_embeddings=true)"
        )
    return out


def _fresh_pooler(config: BertConfig, source: str) -> Params:
    """A pooler as `transformers` initialises a ModernBertPredictionHead (a bare
    ModernBertModel folder has none), with a warning line."""
    print(
        f"warning: {source} has no head.* tensors: the pooling head starts from a fresh initialisation "
        "(every task head of a ModernBERT reads it: at [CLS] or the mean, or at every token)"
    )
    h, std = config.hidden_size, config.initializer_range / np.sqrt(2.0 * config.num_hidden_layers)
    rng = np.random.default_rng(0)
    pooler: Params = {
        "dense": {"kernel": np.clip(rng.normal(0, std, (h, h)), -2 * std, 2 * std).astype(np.float32)}
    }
    if config.use_bias:
        pooler["dense"]["bias"] = np.zeros(h, np.float32)
    pooler["LayerNorm"] = {"scale": np.ones(h, np.float32)}
    if config.norm_bias:
        pooler["LayerNorm"]["bias"] = np.zeros(h, np.float32)
    return pooler


def to_state_dict(
    params: Params, config: BertConfig, fold_segment: bool = False
) -> tuple[dict, str, BertConfig]:
    """Params → (a ModernBERT state dict, its architecture class name, the config it holds:
    `config` without a segment embedding, `fold_segments`)."""
    reasons = cannot_hold(config, fold_segment)
    if reasons:
        raise ValueError(f"--dst_format=hf: ModernBERT cannot represent {', '.join(reasons)}")
    params, head = layout.split_task_head(params)
    params = layout.canonical(params, config)
    params, c = fold_segments(params, config)
    layout.validate(params, c, "params to export")
    flat = layout.flatten(params)
    out = names.encoder_to_hf(flat, c)
    has_pooler = c.classifier_pooling != "bert"
    if head is not None:  # a fine-tuned model: its prediction head is head.*
        if not has_pooler:
            raise ValueError(
                "--dst_format=hf: ModernBERT cannot represent classifier_pooling=bert (a tanh pooler, "
                "no prediction head before a token or span classifier)"
            )
        tensors = layout.check_task_head(head, config, "params to export")
        out.update(names.head_to_hf(flat, *names.POOLER_HEAD, c))
        out["classifier.weight"] = np.ascontiguousarray(tensors["kernel"].T)
        out["classifier.bias"] = tensors["bias"]
        architecture = next(a for a, key in TASK_CLASSES.items() if key == head[0])
    elif "mlm" in params:
        out.update(names.head_to_hf(flat, *names.MLM_HEAD, c))
        out["decoder.bias"] = flat[("mlm", "bias")]
        word = flat[("bert", "embeddings", "word_embeddings", "embedding")]
        out["decoder.weight"] = word if c.tie_word_embeddings else flat[("mlm", "decoder")]
        if has_pooler and not _same_head(flat):
            print(
                "warning: the pooling head differs from the MLM head and is not written "
                "(ModernBertForMaskedLM holds one head.*)"
            )
        architecture = "ModernBertForMaskedLM"
    else:
        if has_pooler:
            out.update(names.head_to_hf(flat, *names.POOLER_HEAD, c))
        architecture = "ModernBertModel"
    if "nsp" in params:
        print("warning: the next-sentence head is not written (ModernBERT has none)")
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}, architecture, c


def _same_head(flat: names.Flat) -> bool:
    pairs = [
        (("mlm", "transform"), ("bert", "pooler", "dense")),
        (("mlm", "transform_LayerNorm"), ("bert", "pooler", "LayerNorm")),
    ]
    return all(
        np.array_equal(v, flat.get((*b, *k[len(a) :])))
        for a, b in pairs
        for k, v in flat.items()
        if k[: len(a)] == a
    )


def fold_segments(params: Params, config: BertConfig) -> tuple[Params, BertConfig]:
    """Params and config without a segment embedding: its row 0 added to every
    word-embedding row, which is exact for the encoder (BERT adds it to each token's word
    embedding before the LayerNorm). A decoder tied to the word embeddings keeps the
    unfolded table as its own (``tie_word_embeddings=False``): the logits stay exact too."""
    emb = params["bert"]["embeddings"]
    if "token_type_embeddings" not in emb:
        return params, config.replace(type_vocab_size=0)
    row0 = np.asarray(emb["token_type_embeddings"]["embedding"], np.float32)[0]
    word = np.asarray(emb["word_embeddings"]["embedding"], np.float32)
    rest = {k: v for k, v in emb.items() if k != "token_type_embeddings"}
    params = {
        **params,
        "bert": {**params["bert"], "embeddings": {**rest, "word_embeddings": {"embedding": word + row0}}},
    }
    config = config.replace(type_vocab_size=0)
    if "mlm" in params and config.tie_word_embeddings:
        params["mlm"] = {**params["mlm"], "decoder": word}
        config = config.replace(tie_word_embeddings=False)
    return params, config
