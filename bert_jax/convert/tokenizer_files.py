"""The vocabulary and its casing beside a checkpoint, in every format: a WordPiece
``vocab.txt`` with a BertTokenizer ``tokenizer_config.json``, or a Hugging Face
``tokenizer.json`` with the files that make `transformers.AutoTokenizer` load it."""

from __future__ import annotations

import json
import os
import shutil

from bert_jax.data import tokenizer_json
from bert_jax.model.config import BertConfig
from bert_jax.storage import atomic_files


def write_tokenizer_files(folder: str, vocab_file: str, do_lower_case: bool, config: BertConfig) -> None:
    """`vocab.txt`, the same WordPiece as a `tokenizer.json` (`transformers` 5 builds a
    ModernBERT's tokenizer from that file alone) and a `tokenizer_config.json` that
    `transformers.AutoTokenizer` reads as a BertTokenizer; for a tokenizer.json,
    `write_tokenizer_json_files` (its casing is its own)."""
    set_special_ids(folder, vocab_file)
    token_types = config.type_vocab_size > 1
    if tokenizer_json.is_tokenizer_json(vocab_file):
        write_tokenizer_json_files(vocab_file, folder, config.max_position_embeddings, token_types)
        return
    if vocab_file.endswith(".model"):  # SentencePiece: the model beside, and the same as a tokenizer.json
        dst = os.path.join(folder, "spm.model")
        if os.path.abspath(vocab_file) != os.path.abspath(dst):
            shutil.copyfile(vocab_file, dst)
        tok = tokenizer_json.TokenizerJson(
            os.path.join(folder, "tokenizer.json"), sentencepiece_tokenizer(vocab_file, do_lower_case)
        )
        write_tokenizer_json_files(tok, folder, config.max_position_embeddings, token_types)
        return
    dst = os.path.join(folder, "vocab.txt")
    if os.path.abspath(vocab_file) != os.path.abspath(dst):
        shutil.copyfile(vocab_file, dst)
    tokenizer_config = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": do_lower_case,
        "model_max_length": config.max_position_embeddings,
        **{f"{t}_token": f"[{t.upper()}]" for t in ("unk", "sep", "pad", "cls", "mask")},
    }
    if config.type_vocab_size <= 1:  # no segment embedding to feed (ModernBERT takes none)
        tokenizer_config["model_input_names"] = ["input_ids", "attention_mask"]
    atomic_files.write_text(os.path.join(folder, "tokenizer.json"), wordpiece_json(dst, do_lower_case))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config, f, indent=2)


def wordpiece_json(vocab_file: str, do_lower_case: bool) -> str:
    """A WordPiece vocab.txt as a Hugging Face tokenizer.json: BERT's normaliser, word
    splitter, WordPiece and [CLS] ... [SEP] template (`tokenizers`' own BertWordPiece)."""
    from tokenizers.implementations import BertWordPieceTokenizer  # deferred: only exports need it

    tokenizer = BertWordPieceTokenizer(vocab_file, lowercase=do_lower_case, strip_accents=None)
    return tokenizer._tokenizer.to_str(pretty=True)


def sentencepiece_tokenizer(model_file: str, do_lower_case: bool):
    """A SentencePiece unigram ``.model`` as a `tokenizers.Tokenizer` giving the same ids
    on text (`SentencePieceTokenizer`: lower-cased first, then the model's own normaliser,
    from its precompiled character map), with its special pieces as special tokens and
    BERT's [CLS] A [SEP] B [SEP] template. One difference: a literal "[MASK]" in the text
    is the special token here (as in every Hugging Face BERT tokenizer), pieces there."""
    import tokenizers  # deferred: only exports need them
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, processors

    proto = sentencepiece_model_pb2.ModelProto()
    with open(model_file, "rb") as f:
        proto.ParseFromString(f.read())
    if proto.trainer_spec.model_type != proto.trainer_spec.UNIGRAM:
        raise ValueError(f"{model_file} is not a unigram SentencePiece model: only unigram ones export")
    pieces = [(p.piece, p.score) for p in proto.pieces]
    kinds = [p.type for p in proto.pieces]
    unk = kinds.index(proto.SentencePiece.UNKNOWN)
    tk = tokenizers.Tokenizer(models.Unigram(pieces, unk_id=unk, byte_fallback=False))
    steps = [normalizers.Lowercase()] if do_lower_case else []
    charsmap = proto.normalizer_spec.precompiled_charsmap
    steps += [normalizers.Precompiled(charsmap)] if charsmap else []
    tk.normalizer = normalizers.Sequence([*steps, normalizers.Replace(Regex(" {2,}"), " ")])
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    special = (proto.SentencePiece.UNKNOWN, proto.SentencePiece.CONTROL, proto.SentencePiece.USER_DEFINED)
    tk.add_special_tokens([p.piece for p, kind in zip(proto.pieces, kinds, strict=True) if kind in special])
    ids = {p.piece: i for i, p in enumerate(proto.pieces)}
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])],
    )
    return tk


def check_tokenizer_size(vocab_file: str, config: BertConfig) -> None:
    """One line with both sizes when the tokenizer has ids the model's embeddings lack
    (a smaller tokenizer is fine: a vocabulary padded to a multiple)."""
    from bert_jax.data import tokenization  # deferred: loads TensorFlow for WordPiece

    kind = "sentencepiece" if vocab_file.endswith(".model") else "wordpiece"
    size = tokenization.load_tokenizer(vocab_file, kind=kind).vocab_size
    if size > config.vocab_size:
        raise ValueError(
            f"{vocab_file} has {size} tokens but the model's vocabulary has {config.vocab_size} rows: "
            "pass the tokenizer the model was trained with (--vocab_file)"
        )


def write_tokenizer_json_files(
    tokenizer: str | tokenizer_json.TokenizerJson,
    folder: str,
    model_max_length: int | None = None,
    token_types: bool = False,
) -> list[str]:
    """``tokenizer.json``, ``tokenizer_config.json`` (a `PreTrainedTokenizerFast` with the
    special tokens' roles read from the source) and ``special_tokens_map.json`` into
    `folder`, from a tokenizer.json path or a loaded `TokenizerJson`; returns the paths.
    `token_types`: ``token_type_ids`` among the model inputs (a model with a segment
    embedding, as BERT; not ModernBERT)."""
    tok = (
        tokenizer
        if isinstance(tokenizer, tokenizer_json.TokenizerJson)
        else tokenizer_json.TokenizerJson(tokenizer)
    )
    written = []
    for name, text in tokenizer_json.hf_folder_files(tok, model_max_length, token_types).items():
        written.append(os.path.join(folder, name))
        atomic_files.write_text(written[-1], text)
    return written


def set_special_ids(folder: str, vocab_file: str) -> None:
    """A ModernBERT ``config.json`` in `folder` gets the special token ids of the tokenizer
    it is written with (``pad``/``cls``/``sep``, and ``bos``/``eos`` as [CLS]/[SEP], as
    ModernBERT's own); any other folder is left alone."""
    path = os.path.join(folder, "config.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        values = json.load(f)
    if values.get("model_type") != "modernbert":
        return
    from bert_jax.data import tokenization  # deferred: loads TensorFlow for WordPiece

    kind = "sentencepiece" if vocab_file.endswith(".model") else "wordpiece"
    special = tokenization.load_tokenizer(vocab_file, kind=kind).special
    ids = {"pad": special.pad, "cls": special.cls, "sep": special.sep, "bos": special.cls, "eos": special.sep}
    values.update({f"{role}_token_id": int(i) for role, i in ids.items()})
    atomic_files.write_text(path, json.dumps(values, indent=2) + "\n")


def check_same_vocabulary(vocab_file: str, checkpoint: str, flag: str) -> None:
    """A vocabulary given for a checkpoint that ships its own (``vocab.txt``,
    ``spm.model`` or ``tokenizer.json`` beside it) must hold the same tokens in the same
    order (a folder given: the file in it); otherwise one line naming both files (ids the
    model never learned would follow)."""
    from bert_jax.data import tokenization  # deferred: loads TensorFlow for WordPiece

    if not vocab_file or not checkpoint:
        return
    vocab_file, _ = tokenization.vocab_in_folder(vocab_file)  # a folder: the file in it
    try:
        shipped = tokenization.vocab_beside(checkpoint)
    except FileNotFoundError:
        return  # nothing ships with it: the given file is the only vocabulary
    if os.path.abspath(shipped) == os.path.abspath(vocab_file) or _same_tokens(shipped, vocab_file):
        return
    raise ValueError(
        f"{flag} {vocab_file} differs from {shipped}, the vocabulary {checkpoint} ships with: "
        f"leave {flag} unset to use it, or pass a checkpoint trained with {vocab_file}"
    )


def _same_tokens(a: str, b: str) -> bool:
    from bert_jax.data import tokenization

    with open(a, "rb") as fa, open(b, "rb") as fb:
        if fa.read() == fb.read():
            return True
    if a.endswith(".model") or b.endswith(".model"):
        return False
    return tokenization.load_vocab(a) == tokenization.load_vocab(b)
