"""Hugging Face ``config.json`` → `BertConfig`, for the schemas `transformers` 4.x and 5.x
write (BERT and ModernBERT).

What a key means decides what happens to it:

- keys that map to a `BertConfig` field are read (ModernBERT's are in `modernbert_format`);
- `transformers`' own bookkeeping (``dtype``, ``bos_token_id``, ``use_cache``, labels, ...)
  changes nothing bert_jax computes and is passed over;
- a key that would change the computation in a way bert_jax does not compute (a decoder with
  cross-attention, relative positions, a rope type other than plain rotary) is refused in
  one line naming it;
- any other key is reported in one ``warning:`` line naming it (the conversion goes on).

Tested with the folders `transformers` 5.24 writes and saved 4.57 folders
(tests/testdata/hf_4x).
"""

from __future__ import annotations

from typing import Any

from bert_jax.model.config import LAYER_TYPES, BertConfig

# `transformers.PreTrainedConfig` keys of any model that change nothing bert_jax computes
# (4.x and 5.x), and the token ids every tokenizer-aware config carries.
GENERIC_KEYS = frozenset(
    {
        "model_type", "architectures", "transformers_version", "_name_or_path", "dtype",
        "torch_dtype", "output_hidden_states", "output_attentions", "return_dict",
        "use_return_dict", "chunk_size_feed_forward", "is_encoder_decoder", "id2label",
        "label2id", "num_labels", "problem_type", "tokenizer_class", "prefix",
        "pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "cls_token_id",
        "decoder_start_token_id", "use_cache", "gradient_checkpointing", "classifier_dropout",
        "finetuning_task", "task_specific_params", "tf_legacy_loss", "pruned_heads",
        "torchscript", "use_bfloat16", "directionality", "pooler_fc_size",
        "pooler_num_attention_heads", "pooler_num_fc_layers", "pooler_size_per_head",
        "pooler_type", "initializer_cutoff_factor", "embedding_dropout",
        "deterministic_flash_attn", "sparse_prediction", "sparse_pred_ignore_index",
        "reference_compile", "repad_logits_with_grad", "_attn_implementation_autoset",
    }
)  # fmt: skip
# `transformers.BertConfig`'s keys read into `BertConfig` as they are.
_BERT_FIELDS = (
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
    "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
    "type_vocab_size", "initializer_range", "layer_norm_eps", "tie_word_embeddings",
)  # fmt: skip
# BERT keys whose other values bert_jax does not compute: key → the value it computes.
_BERT_FIXED = {"is_decoder": False, "add_cross_attention": False, "position_embedding_type": "absolute"}


# The warning lines said by this process: a config read twice (its model at a run's
# settings, its weights at the start) says its unknown keys once.
_SAID: set[str] = set()


def warn_unknown(values: dict[str, Any], known: set[str] | frozenset[str], source: str) -> None:
    """One ``warning:`` line naming the keys bert_jax neither reads nor knows to be inert
    (once per process for the same file and keys)."""
    unknown = sorted(set(values) - set(known) - GENERIC_KEYS)
    line = f"warning: {source}: not read (unknown to bert_jax): {', '.join(unknown)}"
    if unknown and line not in _SAID:
        _SAID.add(line)
        print(line)


def refuse_changed(values: dict[str, Any], fixed: dict[str, Any], source: str) -> None:
    """One line naming a key set to a value whose computation bert_jax does not do."""
    for key, want in fixed.items():
        have = values.get(key)
        if have is not None and have != want:
            raise ValueError(f"{source}: {key}={have!r} is not supported (bert_jax computes {key}={want!r})")


def bert_config(values: dict[str, Any], source: str) -> BertConfig:
    """A BERT ``config.json`` (``model_type: bert``; 4.x or 5.x) → `BertConfig`."""
    refuse_changed(values, _BERT_FIXED, source)
    warn_unknown(values, {*_BERT_FIELDS, *_BERT_FIXED}, source)
    kwargs = {k: values[k] for k in _BERT_FIELDS if values.get(k) is not None}
    if kwargs.get("hidden_act") == "gelu_new":
        kwargs["hidden_act"] = "gelu_tanh"
    try:
        return BertConfig(**kwargs)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{source}: {e}") from e


def rotary_bases(values: dict[str, Any], global_default: float, local_default: float, source: str):
    """(global, local) rotary bases of a ModernBERT config: 5.x's ``rope_parameters`` (per
    layer type), else 4.x's ``global_rope_theta``/``local_rope_theta`` (a null local base
    is the global one, as 4.x computes it). A rope type other than plain rotary, or a
    scaling, is refused naming it."""
    if values.get("rope_scaling"):
        scaling = values["rope_scaling"]
        raise ValueError(f"{source}: rope_scaling={scaling!r} is not supported (plain rotary only)")
    rope = values.get("rope_parameters")
    if rope:
        per_type = rope if any(t in rope for t in LAYER_TYPES) else {t: rope for t in LAYER_TYPES}
        bases = []
        for kind, default in zip(LAYER_TYPES, (global_default, local_default), strict=True):
            entry = per_type.get(kind) or {}
            _check_rope_entry(entry, f"{source}: rope_parameters.{kind}")
            bases.append(float(entry.get("rope_theta") or default))
        return bases[0], bases[1]
    global_base = float(values.get("global_rope_theta") or global_default)
    if "local_rope_theta" in values and values["local_rope_theta"] is None:
        return global_base, global_base
    return global_base, float(values.get("local_rope_theta") or local_default)


def _check_rope_entry(entry: dict[str, Any], where: str) -> None:
    kind = entry.get("rope_type", entry.get("type", "default"))
    if kind != "default":
        raise ValueError(
            f"{where}.rope_type={kind!r} is not supported: bert_jax computes plain rotary positions"
        )
    other = sorted(k for k in entry if k not in ("rope_type", "type", "rope_theta") and entry[k] is not None)
    if other:
        raise ValueError(
            f"{where} sets {', '.join(f'{k}={entry[k]!r}' for k in other)}: not supported "
            "(bert_jax computes plain rotary positions from rope_theta)"
        )


def attention_pattern(values: dict[str, Any], layers: int, every_default: int, source: str):
    """(global_attn_every_n_layers, layer_types) of a ModernBERT config: 5.x's
    ``layer_types`` when given (as the every-n-th rule where it is one, else the explicit
    pattern), else 4.x's ``global_attn_every_n_layers``."""
    types = values.get("layer_types")
    if not types:
        return int(values.get("global_attn_every_n_layers") or every_default), None
    types = tuple(types)
    wrong = sorted({t for t in types if t not in LAYER_TYPES}, key=str)
    if wrong or len(types) != layers:
        raise ValueError(
            f"{source}: layer_types has {len(types)} entries {wrong or ''}: it needs one of "
            f"{LAYER_TYPES} for each of the {layers} layers"
        )
    for n in range(1, layers + 1):
        if types == tuple(LAYER_TYPES[bool(i % n)] for i in range(layers)):
            return n, None
    return 1, types


def labels_dict(num_labels: int, names: list[str] | None = None) -> dict[str, Any]:
    """A classifier's label keys of a `transformers` config (none without a classifier):
    its labels' `names` where they are known and as many, else ``LABEL_i``."""
    if not num_labels:
        return {}
    if not names or len(names) != num_labels:
        names = [f"LABEL_{i}" for i in range(num_labels)]
    return {
        "num_labels": num_labels,
        "id2label": {str(i): name for i, name in enumerate(names)},
        "label2id": {name: i for i, name in enumerate(names)},
    }


def label_names(values: dict[str, Any]) -> list[str] | None:
    """A `transformers` config's label names in id order (None for the ``LABEL_i`` it makes
    up, or none at all)."""
    id2label = values.get("id2label") or {}
    names = [str(id2label.get(str(i), id2label.get(i, ""))) for i in range(len(id2label))]
    if not names or names == [f"LABEL_{i}" for i in range(len(names))]:
        return None
    return names
