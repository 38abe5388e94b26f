"""Checkpoint conversion: Hugging Face ⇄ bert_jax ⇄ the original google-research TF release.

One module per format (`hf_format`, `tf_format`, `bert_jax_format`), one table of names
as data (`names`: each bert_jax parameter's Hugging Face and TF names and how the array
is laid out in each) and one in-memory layout with its checks (`layout`). Every load is
checked against the shapes the model expects (`param_shapes.check`): a missing tensor, an
unexpected one, or a shape from another model size fails naming it, and nothing is ever
loaded in part.

Formats on disk:
- ``hf``: a folder with ``config.json`` and ``model.safetensors`` (or ``pytorch_model.bin``)
  of a `transformers` BERT or ModernBERT (``model_type`` bert or modernbert);
- ``tf``: an original TF checkpoint (``bert_model.ckpt.*``) with ``bert_config.json`` beside it;
- ``bert_jax``: a folder with ``bert_config.json`` and an orbax checkpoint of the params
  under ``params/``; a pre-training workdir (``checkpoints/<step>/``) is read as well.

Each is read from a bucket (``gs://...``) too, through a local copy (`remote_checkpoint`).

All three hold exactly `vocab_size` vocabulary rows: loads pad them for the config's
`vocab_pad_multiple` (`load_checkpoint(..., vocab_pad_multiple=128)` asks for padding
whatever the source says), exports drop the padding.
"""

from __future__ import annotations

import json
import os

from bert_jax.convert import formats, hf_configs, remote_checkpoint
from bert_jax.convert.bert_jax_format import head_record, load_bert_jax, read_bert_jax_config, save_bert_jax
from bert_jax.convert.hf_format import (
    from_hf_state_dict,
    hf_config_dict,
    load_hf,
    read_hf_config,
    save_hf,
    to_hf_state_dict,
)
from bert_jax.convert.layout import (
    TASK_HEADS,
    Params,
    canonical,
    check_exportable,
    expected_shapes,
    flatten,
    for_config,
    split_task_head,
    validate,
)
from bert_jax.convert.remote_checkpoint import local_copy
from bert_jax.convert.tf_format import load_tf, read_tf_config, save_tf
from bert_jax.convert.tokenizer_files import (
    check_same_vocabulary,
    check_tokenizer_size,
    write_tokenizer_files,
)
from bert_jax.model.config import BertConfig
from bert_jax.storage import files, run_steps

__all__ = [
    "Params",
    "canonical",
    "check_same_vocabulary",
    "check_tokenizer_size",
    "checkpoint_config",
    "detect_format",
    "expected_shapes",
    "flatten",
    "from_hf_state_dict",
    "hf_config_dict",
    "label_names",
    "load_bert_jax",
    "load_checkpoint",
    "load_hf",
    "load_tf",
    "local_copy",
    "save_bert_jax",
    "save_checkpoint",
    "save_hf",
    "save_tf",
    "split_task_head",
    "to_hf_state_dict",
    "validate",
    "write_tokenizer_files",
]


def detect_format(path: str) -> str:
    if files.is_remote(path):
        return remote_checkpoint.format_of(path)
    if os.path.isdir(path):
        if run_steps.parse(path):  # a run's best/, checkpoints/ or one step in them
            return "bert_jax"
        names = os.listdir(path)
        found = formats.of_names(set(names))
        if found:
            return found
        folders = sorted(d for d in names if os.path.isdir(os.path.join(path, d)))
        inside = [d for d in folders if formats.of_names(set(os.listdir(os.path.join(path, d))))]
        raise formats.not_a_checkpoint(path, inside)
    if os.path.exists(path + ".index") or path.endswith(".index"):
        return "tf"
    raise formats.not_a_checkpoint(path)


# The heads a checkpoint may hold beside the encoder (`load_checkpoint`'s `heads`).
HEADS = {"mlm": "masked-LM head", "nsp": "next-sentence head", **{k: v[0] for k, v in TASK_HEADS.items()}}


def label_names(path: str) -> list[str] | None:
    """The names of a checkpoint's classifier labels, where it records them: a bert_jax
    folder's ``task.json`` (a fine-tuned model or an export), a Hugging Face folder's
    ``id2label`` (not the ``LABEL_i`` `transformers` makes up)."""
    fmt = detect_format(path)
    path = local_copy(path, weights=False)
    if fmt == "bert_jax":
        return head_record(path).get("labels") or None
    if fmt == "hf":
        with open(os.path.join(path, "config.json")) as f:
            return hf_configs.label_names(json.load(f))
    return None


def checkpoint_config(path: str) -> BertConfig:
    """The model config of the checkpoint at `path` (any format `load_checkpoint` reads),
    read without its weights, by the readers the loaders use (one in a bucket from its
    copy of its config files, `remote_checkpoint`)."""
    fmt = detect_format(path)
    path = local_copy(path, weights=False)
    if fmt == "hf":
        return read_hf_config(path)[0]
    return read_tf_config(path)[1] if fmt == "tf" else read_bert_jax_config(path)


def load_checkpoint(
    path: str,
    expected: BertConfig | None = None,
    vocab_pad_multiple: int | None = None,
    heads: tuple[str, ...] = (),
) -> tuple[Params, BertConfig]:
    """Params (``{"bert": ...}`` plus ``mlm``/``nsp``/``classifier`` when present) and the
    model config, the params padded for that config's vocabulary.

    `vocab_pad_multiple` (e.g. 128, for tensor parallelism over the vocabulary) replaces
    the source's own (1 for Hugging Face and TF checkpoints, whatever a bert_jax export
    recorded). `heads`: the heads the caller's model needs (``("mlm", "nsp")`` for
    `BertForPreTraining`, ``("mlm",)`` for `BertForMaskedLM`); one the checkpoint lacks is
    refused in one line naming it and the checkpoint. A checkpoint in a bucket
    (``gs://...``) is read from its local copy (`remote_checkpoint.local_copy`)."""
    given, path = path, local_copy(path)
    fmt = detect_format(path)
    params, config = {"hf": load_hf, "tf": load_tf, "bert_jax": load_bert_jax}[fmt](path, expected)
    missing = [h for h in heads if h not in params]
    if missing:
        unknown = sorted(set(missing) - set(HEADS))
        if unknown:
            raise ValueError(f"heads={unknown}: the heads are {', '.join(HEADS)}")
        held = [HEADS[h] for h in HEADS if h in params] or ["no head"]
        raise ValueError(
            f"{given} has no {' and no '.join(f'{HEADS[h]} ({h})' for h in missing)}: it holds the "
            f"encoder with {', '.join(held)}; load it into a model without that head"
        )
    if vocab_pad_multiple is not None and vocab_pad_multiple != config.vocab_pad_multiple:
        config = config.replace(vocab_pad_multiple=vocab_pad_multiple)
        params = for_config(params, config)
    return params, config


def save_checkpoint(
    path: str,
    params: Params,
    config: BertConfig,
    fmt: str,
    fold_segment: bool = False,
    label_names: list[str] | None = None,
) -> str:
    """Writes the checkpoint (the vocabulary unpadded); returns the folder it is in.

    ``hf`` writes a `transformers` BERT for the paper's architecture and a ModernBERT for a
    model of that family; `fold_segment` lets a ModernBERT export fold row 0 of a segment
    embedding that was trained on segment 0 only (FULL-SENTENCES rows) into the word
    embeddings, which is exact (docs/modernbert.md). A task head (`layout.TASK_HEADS`) goes
    to ``hf`` as its `transformers` class (`label_names` its ``id2label``) and to
    ``bert_jax`` beside the encoder; the original TF graph has none of them (a warning)."""
    if fmt not in ("bert_jax", "hf", "tf"):
        raise ValueError(f"unknown format {fmt!r}: bert_jax, hf or tf")
    if fmt != "bert_jax":
        check_exportable(config, fmt, fold_segment)  # before anything is written
    if fmt == "tf" and "ckpt" not in os.path.basename(path.rstrip(os.sep)):
        path = os.path.join(path, "bert_model.ckpt")  # a folder, as the original release
    if fmt == "hf":
        save_hf(path, params, config, fold_segment, label_names)
    elif fmt == "bert_jax":
        save_bert_jax(path, params, config, label_names)
    else:
        params, head = split_task_head(params)
        if head is not None:
            what = TASK_HEADS[head[0]][0]
            print(f"warning: the {what} is not written (the original TF graph holds the encoder)")
        save_tf(path, params, config)
    return os.path.dirname(path) if fmt == "tf" else path
