"""A Hugging Face ``tokenizer.json`` (the `tokenizers` library, Rust) as a bert_jax tokenizer.

ModernBERT, the Ettin encoders and mmBERT ship a byte-level BPE ``tokenizer.json`` instead
of a WordPiece ``vocab.txt``. The file is run by `tokenizers` itself (normaliser,
pre-tokenizer and model exactly as written, so the ids equal `transformers.AutoTokenizer`'s),
batched with `Tokenizer.encode_batch_fast` (parallel in Rust, without the GIL); bert_jax
adds the special tokens itself (`_PairEncoder`: ``[CLS] A [SEP] B [SEP]``, ModernBERT's
template). Casing is the file's own normaliser: ``do_lower_case`` does not apply.

The special tokens' roles (cls, sep, mask, pad, unk) are read from the file, not assumed:
the ``tokenizer_config.json`` beside it (as `transformers` reads them), the post-processor
(the template's first and last special token, or RoBERTa's/BERT's ``cls``/``sep``), the
model's ``unk_token`` and the padding's ``pad_token``, then the usual names (``[MASK]`` or
``<mask>``, ...). A role that none of them gives is refused in one line.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import tokenizers

from bert_jax.data.tokenization import SpecialIds, _PairEncoder

ROLES = ("pad", "unk", "cls", "sep", "mask")  # `SpecialIds`' order
KNOWN_NAMES = {
    "pad": ("[PAD]", "<pad>", "<|padding|>"),
    "unk": ("[UNK]", "<unk>", "<|unk|>"),
    "cls": ("[CLS]", "<s>", "<cls>"),
    "sep": ("[SEP]", "</s>", "<sep>"),
    "mask": ("[MASK]", "<mask>"),
}


def is_tokenizer_json(path: str) -> bool:
    """Whether `path` names a Hugging Face tokenizer.json: a ``.json`` name, or a file that
    starts with ``{`` (a ``vocab.txt`` that is one, copied under that name)."""
    if not path or os.path.isdir(path):
        return False
    if path.endswith(".json"):
        return True
    try:
        with open(path, "rb") as f:
            return f.read(64).lstrip().startswith(b"{")
    except OSError:
        return False


def _token_name(value: Any) -> str | None:
    """A special token as `transformers` writes it: a string, or a dict with "content"."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _processor_roles(processor: dict | None) -> dict[str, str]:
    """cls and sep named by a post-processor (TemplateProcessing, Roberta, Bert, Sequence)."""
    if not processor:
        return {}
    kind = processor.get("type")
    if kind == "Sequence":
        found: dict[str, str] = {}
        for inner in processor.get("processors", []):
            found = {**_processor_roles(inner), **found}
        return found
    if kind in ("RobertaProcessing", "BertProcessing"):
        return {role: processor[role][0] for role in ("cls", "sep") if processor.get(role)}
    if kind == "TemplateProcessing":
        specials = [p["SpecialToken"]["id"] for p in processor.get("single", []) if "SpecialToken" in p]
        seq = [i for i, p in enumerate(processor.get("single", [])) if "Sequence" in p]
        out = {}
        if specials and seq and "SpecialToken" in processor["single"][0]:
            out["cls"] = specials[0]
        if specials and seq and "SpecialToken" in processor["single"][-1]:
            out["sep"] = specials[-1]
        return out
    return {}


def find_roles(spec: dict, config: dict, vocab: dict[str, int]) -> tuple[dict[str, int], list[str]]:
    """(role → id for the roles found, the roles missing) of a tokenizer.json's JSON `spec`,
    the `config` of its tokenizer_config.json ({} without one) and its vocabulary."""
    named: dict[str, str | None] = {r: _token_name(config.get(f"{r}_token")) for r in ROLES}
    for role, token in _processor_roles(spec.get("post_processor")).items():
        named[role] = named[role] or token
    named["unk"] = named["unk"] or _token_name((spec.get("model") or {}).get("unk_token"))
    named["pad"] = named["pad"] or _token_name((spec.get("padding") or {}).get("pad_token"))
    ids, missing = {}, []
    for role in ROLES:
        candidates = [named[role]] if named[role] else list(KNOWN_NAMES[role])
        found = [vocab[t] for t in candidates if t in vocab]
        if found:
            ids[role] = found[0]
        else:
            missing.append(role)
    return ids, missing


def _continuation_rule(spec: dict) -> tuple[str, bool]:
    """(marker, marks_start): a piece continues a word when it lacks a word-start marker
    (byte-level "Ġ", SentencePiece-style "▁") or carries a continuation prefix ("##")."""
    text = json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")])
    model = spec.get("model") or {}
    if model.get("continuing_subword_prefix"):
        return model["continuing_subword_prefix"], False
    if '"ByteLevel"' in text:
        return "\u0120", True
    if '"Metaspace"' in text:
        return "\u2581", True
    return "", False


def read_config_beside(path: str) -> dict:
    """The tokenizer_config.json in the folder of `path` ({} when there is none)."""
    config_path = os.path.join(os.path.dirname(os.path.abspath(path)), "tokenizer_config.json")
    if not os.path.exists(config_path):
        return {}
    with open(config_path, encoding="utf-8") as f:
        try:
            value = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{config_path} is not valid JSON ({e})") from None
    return value if isinstance(value, dict) else {}


def read_tokenizer(path: str) -> tuple[tokenizers.Tokenizer, str]:
    """The tokenizer of a tokenizer.json file, and the file's text; refused in one line."""
    if not path:
        raise ValueError("tokenizer=tokenizer_json needs vocab_file=PATH/tokenizer.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"tokenizer file {path} does not exist")
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        tokenizer = tokenizers.Tokenizer.from_str(text)
    except Exception as e:  # `tokenizers` raises a bare Exception for a bad file
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{path} is not a Hugging Face tokenizer.json ({reason})") from None
    if not tokenizer.get_vocab_size(with_added_tokens=True):
        raise ValueError(f"{path} has an empty vocabulary")
    return tokenizer, text


class TokenizerJson(_PairEncoder):
    """Text → ids with a Hugging Face tokenizer.json (same interface as WordPiece)."""

    def __init__(self, path: str, tokenizer: tokenizers.Tokenizer | None = None) -> None:
        """From the file `path`, or from a `tokenizer` learned here (`path`: where it goes)."""
        self.vocab_file = path
        given = tokenizer is not None  # learned here: no tokenizer_config.json to read
        if tokenizer is None:
            tokenizer, text = read_tokenizer(path)
        self.tk = tokenizer
        self.source_text = tokenizer.to_str(pretty=True) if given else text  # exported as it was
        self.tk.no_padding()  # a file may switch either on: bert_jax pads and truncates itself
        self.tk.no_truncation()
        self.spec = json.loads(self.source_text)  # with its padding settings, if any
        index = self.tk.get_vocab(with_added_tokens=True)
        self.vocab = [f"[id {i}]" for i in range(max(index.values()) + 1)]
        for token, i in index.items():
            self.vocab[i] = token
        config = {} if given else read_config_beside(path)
        ids, missing = find_roles(self.spec, config, index)
        if missing:
            raise ValueError(
                f"{path} names no {'/'.join(missing)} token (looked in tokenizer_config.json, the "
                f"post-processor and the usual names, e.g. {KNOWN_NAMES[missing[0]][0]}): add it as a "
                "special token"
            )
        self.special = SpecialIds(**ids)
        special = {t.content for t in self.tk.get_added_tokens_decoder().values() if t.special}
        marker, marks_start = _continuation_rule(self.spec)
        self.is_continuation = np.array(
            [bool(marker) and t not in special and (t.startswith(marker) != marks_start) for t in self.vocab]
        )
        self.do_lower_case = '"Lowercase"' in json.dumps(self.spec.get("normalizer"))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def role_tokens(self) -> dict[str, str]:
        """role → token string (``{"cls": "[CLS]", ...}``), for tokenizer_config.json."""
        return {role: self.vocab[getattr(self.special, role)] for role in ROLES}

    def tokenize(self, texts: list[str], batch_size: int = 8192) -> list[list[int]]:
        """Ids of each text (no special tokens added), `batch_size` texts per Rust call."""
        out: list[list[int]] = []
        for i in range(0, len(texts), batch_size):
            batch = self.tk.encode_batch_fast(list(texts[i : i + batch_size]), add_special_tokens=False)
            out.extend(e.ids for e in batch)
        return out


def hf_folder_files(
    tok: TokenizerJson, model_max_length: int | None = None, token_types: bool = False
) -> dict[str, str]:
    """The files that make a folder load with `transformers.AutoTokenizer` as a
    `PreTrainedTokenizerFast`: name → text (tokenizer.json, tokenizer_config.json,
    special_tokens_map.json). ``token_type_ids`` are among the model inputs only with
    `token_types` (a model with a segment embedding; ModernBERT takes none)."""
    roles = {f"{role}_token": token for role, token in tok.role_tokens().items()}
    added = {
        str(i): {
            "content": t.content,
            "lstrip": t.lstrip,
            "normalized": t.normalized,
            "rstrip": t.rstrip,
            "single_word": t.single_word,
            "special": t.special,
        }
        for i, t in sorted(tok.tk.get_added_tokens_decoder().items())
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        **roles,
        "model_input_names": ["input_ids", *(["token_type_ids"] if token_types else []), "attention_mask"],
        "clean_up_tokenization_spaces": False,
    }
    if model_max_length:
        config["model_max_length"] = int(model_max_length)
    return {
        "tokenizer.json": tok.source_text,
        "tokenizer_config.json": json.dumps(config, indent=2, ensure_ascii=False) + "\n",
        "special_tokens_map.json": json.dumps(roles, indent=2, ensure_ascii=False) + "\n",
    }
