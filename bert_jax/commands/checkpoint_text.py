"""A checkpoint and the tokenizer of its text, for the commands that run it on text
(`features`, `fill-mask`): each refusal one line naming the flag, before any work."""

from __future__ import annotations

import os

from absl import flags

from bert_jax import convert
from bert_jax.data import tokenization, vocab_fit
from bert_jax.model.config import BertConfig


def define_vocab_flags() -> None:
    """``--vocab_file`` and ``--do_lower_case``: the checkpoint's own unless given."""
    flags.DEFINE_string(
        "vocab_file",
        None,
        "vocab.txt or tokenizer.json, or a folder holding one (default: the one beside the checkpoint).",
    )
    flags.DEFINE_bool(
        "do_lower_case",
        None,
        "Lower-case and strip accents (default: the casing recorded beside the vocabulary, else true).",
    )


def local_checkpoint(checkpoint: str) -> str:
    """`checkpoint` as a local path (one in a bucket: its local copy), refused when absent."""
    path = convert.local_copy(checkpoint)
    if not (os.path.exists(path) or os.path.exists(f"{path}.index")):
        raise FileNotFoundError(f"--checkpoint {checkpoint} does not exist")
    return path


def load_params(checkpoint: str, path: str, vocab_file: str | None) -> tuple[dict, BertConfig]:
    """Params and config of the checkpoint given as `checkpoint` (at local `path`); a
    `vocab_file` given must be the size of the one beside it."""
    convert.check_same_vocabulary(vocab_file, path, "--vocab_file")
    return convert.load_checkpoint(path)


def tokenizer_for(
    checkpoint: str,
    path: str,
    config: BertConfig,
    vocab_file: str | None,
    do_lower_case: bool | None,
    max_seq_length: int | None,
) -> tokenization.Tokenizer:
    """The checkpoint's tokenizer: the vocabulary beside it unless `vocab_file`, the size of
    its embedding table; `max_seq_length` (None: not fixed) within a learned position table."""
    tokenizer = tokenization.load_tokenizer(vocab_file or tokenization.vocab_beside(path), do_lower_case)
    vocab_fit.check_vocab_fits(tokenizer, config.vocab_size, checkpoint)
    if max_seq_length is not None:
        check_positions(config, max_seq_length, checkpoint)
    return tokenizer


def check_positions(config: BertConfig, max_seq_length: int, checkpoint: str) -> None:
    """A learned position table must hold every position (past it, rows would be NaN)."""
    table = config.max_position_embeddings
    if config.position_embedding_type == "absolute" and max_seq_length > table:
        raise ValueError(
            f"--max_seq_length={max_seq_length} is longer than the position table of "
            f"{checkpoint} (max_position_embeddings={table}): set --max_seq_length={table} or less"
        )
