"""`bert-jax tokenize --vocab_file=F --input=TEXT --output=F.jsonl [--tokenizer=sentencepiece]
[--[no]do_lower_case]`.

One JSON list of ids per input line (WordPiece, a SentencePiece model or a Hugging Face
tokenizer.json): for checking a vocab, or comparing with another tokenizer. The casing is
``--do_lower_case`` where given, else the one recorded beside the vocabulary
(``tokenizer_config.json``), else lower-case. An existing non-empty ``--output`` is refused
unless ``--overwrite``; it is written whole, after the input and the vocab are read.
"""

from __future__ import annotations

import json
import os

from absl import flags

from bert_jax.commands import vocab_flags
from bert_jax.data import text_files, tokenization, user_paths
from bert_jax.storage import atomic_files

FLAGS = flags.FLAGS


def define_flags() -> None:
    vocab_flags.define()
    flags.DEFINE_string("input", None, "Text file, one text per line.")
    flags.DEFINE_string("output", None, "Output .jsonl, one list of ids per line.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")
    flags.mark_flags_as_required(["input", "output"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")

    user_paths.input_file(FLAGS.input, "--input")
    user_paths.output_file(FLAGS.output, "--output", FLAGS.overwrite)
    tok = tokenization.load_tokenizer(FLAGS.vocab_file or "", FLAGS.do_lower_case, FLAGS.tokenizer)
    lines = text_files.read_lines(FLAGS.input)  # line i is row i; bad bytes counted in a warning
    ids = tok.tokenize(lines)
    with user_paths.removed_if_failed(os.path.dirname(FLAGS.output)):
        atomic_files.write_text(FLAGS.output, "".join(json.dumps(row) + "\n" for row in ids))
    print(f"wrote {len(ids)} lines, {sum(map(len, ids))} tokens to {FLAGS.output}")
