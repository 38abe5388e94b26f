"""The vocabulary and its casing beside a checkpoint, in every format."""

from __future__ import annotations

import json
import os
import shutil

from bert_jax.model.config import BertConfig


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
    """`vocab.txt` and a `tokenizer_config.json` that `transformers.AutoTokenizer` reads as
    a BertTokenizer."""
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
