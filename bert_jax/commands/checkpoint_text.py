"""A checkpoint and the tokenizer of its text, for the commands that run it on text
(`features`, `fill-mask`, `predict`): each refusal one line naming the flag, before any
work; the texts of ``--text`` and ``--input`` and the JSON lines of ``--output``."""

from __future__ import annotations

import json
import os

from absl import flags

from bert_jax import convert
from bert_jax.data import text_files, tokenization, user_paths, vocab_fit
from bert_jax.model.config import BertConfig
from bert_jax.model.numerics import DTYPES, Numerics
from bert_jax.storage import atomic_files, run_steps
from bert_jax.training import memory_fit

FLAGS = flags.FLAGS


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


def define_text_flags(what: str) -> None:
    """``--text`` (repeated), ``--input``, ``--output``, ``--overwrite``, ``--batch_size``,
    ``--compute_dtype``, ``--max_seq_length`` and the vocabulary's flags of a command run
    on texts (`what` says what a text is)."""
    flags.DEFINE_multi_string("text", [], f"{what} (repeat the flag for more).")
    flags.DEFINE_string("input", None, f"Text file, one text a line: {what[0].lower()}{what[1:]}.")
    flags.DEFINE_string("output", None, "Optional .jsonl: one line of predictions per text.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")
    flags.DEFINE_integer("batch_size", 32, "Texts per forward pass.", lower_bound=1)
    flags.DEFINE_enum("compute_dtype", "float32", list(DTYPES), "Compute dtype.")
    flags.DEFINE_integer(
        "max_seq_length", None, "Tokens per text (default: the longest text's, within the checkpoint's)."
    )
    flags.register_validator(
        "max_seq_length",
        lambda v: v is None or v >= 3,
        "must be at least 3 (room for [CLS], a token and [SEP])",
    )
    define_vocab_flags()


def texts_given(what: str) -> list[str]:
    """Each ``--text``, then each line of ``--input``; the paths checked first (``--output``
    too), none given or an empty file refused in one line."""
    if not FLAGS.text and not FLAGS.input:
        raise ValueError(f"--text or --input: give the texts ({what})")
    if FLAGS.input:
        user_paths.input_file(FLAGS.input, "--input")
    if FLAGS.output:
        user_paths.output_file(FLAGS.output, "--output", FLAGS.overwrite)
    texts = list(FLAGS.text) + (text_files.read_lines(FLAGS.input) if FLAGS.input else [])
    if not texts:
        raise ValueError(f"--input {FLAGS.input} is empty: give one text a line ({what})")
    return texts


def text_named(i: int) -> str:
    """Text `i` of `texts_given` as a refusal names it: ``--text 2``, ``line 7 of F``."""
    given = len(FLAGS.text)
    return f"--text {i + 1}" if i < given else f"line {i - given + 1} of {FLAGS.input}"


def write_records(records: list[dict], what: str) -> None:
    """``--output``, when given: a JSON line per record, written whole."""
    if not FLAGS.output:
        return
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    with user_paths.removed_if_failed(os.path.dirname(FLAGS.output)):
        atomic_files.write_text(FLAGS.output, lines)
    print(f"wrote {FLAGS.output}: {len(records)} texts{what}")


def local_checkpoint(checkpoint: str) -> str:
    """`checkpoint` as a local path (one in a bucket: its local copy), refused when absent."""
    path = convert.local_copy(checkpoint)
    if not (os.path.exists(path) or os.path.exists(f"{path}.index")):
        steps = run_steps.parse(os.path.dirname(path.rstrip("/")))  # WORKDIR/checkpoints/<a step not there>
        held = f" (the steps saved there: {', '.join(run_steps.steps(steps))})" if steps else ""
        raise FileNotFoundError(f"--checkpoint {checkpoint} does not exist{held}")
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


def check_batch_memory(
    config: BertConfig, numerics: Numerics, rows: int, tokens: int, batch_size: int
) -> None:
    """One batch's layer of activations must fit the device (`training.memory_fit`):
    refused in one line naming ``--batch_size`` and ``--max_seq_length`` otherwise."""
    scores = memory_fit.materializes_scores(config, numerics)
    need = memory_fit.layer_device_bytes(
        rows, tokens, config.hidden_size, config.num_attention_heads, numerics.dtype.itemsize, scores
    )
    memory_fit.refuse_above(
        f"--max_seq_length={tokens} with --batch_size={batch_size}",
        f"one layer of activations for {rows:,} rows of {tokens} tokens",
        need,
        memory_fit.DEVICE,
        "lower --batch_size or --max_seq_length",
    )
