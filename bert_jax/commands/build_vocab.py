"""`bert-jax build-vocab --output=PATH --vocab_size=N [--tokenizer=wordpiece|sentencepiece]`.

Learns a WordPiece vocab.txt (`tokenization.build_wordpiece_vocab`) or a
SentencePiece model from text in the original format (`--input_file`, a glob), or from
the embedded Wikipedia excerpt when no input is given. Use the result with
`--config.data.vocab_file=PATH` (and `--config.data.tokenizer=sentencepiece`). An existing
output (the vocab.txt, or the model's ``PREFIX.model``/``PREFIX.vocab``) is refused unless
``--overwrite``.
"""

from __future__ import annotations

import os

from absl import flags

from bert_jax.data import corpora, tokenization, user_paths
from bert_jax.storage import atomic_files

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "input_file", "", "Text glob (one sentence per line); default: the embedded Wikipedia excerpt."
    )
    flags.DEFINE_string("output", None, "vocab.txt to write, or the SentencePiece model prefix.")
    flags.DEFINE_integer("vocab_size", 8000, "Target vocabulary size.")
    flags.DEFINE_enum("tokenizer", "wordpiece", ["wordpiece", "sentencepiece"], "Which kind.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case before learning.")
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")
    flags.mark_flags_as_required(["output"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")

    sentencepiece = FLAGS.tokenizer == "sentencepiece"
    outputs = [f"{FLAGS.output}.model", f"{FLAGS.output}.vocab"] if sentencepiece else [FLAGS.output]
    for path in outputs:
        user_paths.output_file(path, "--output", FLAGS.overwrite)
    if FLAGS.input_file:
        user_paths.input_files([FLAGS.input_file], "--input_file")
        docs = corpora.load_documents("text", FLAGS.input_file)
    else:
        docs = corpora.load_documents("wiki_excerpt")
    sentences = [s for d in docs for s in d]
    folder = os.path.dirname(FLAGS.output)
    with user_paths.removed_if_failed(folder):
        if sentencepiece:
            os.makedirs(folder or ".", exist_ok=True)
            try:
                path = tokenization.train_sentencepiece(
                    sentences, FLAGS.output, FLAGS.vocab_size, FLAGS.do_lower_case
                )
            except RuntimeError as e:  # SentencePiece's own refusal, e.g. a size the text cannot fill
                raise ValueError(f"--tokenizer=sentencepiece --vocab_size={FLAGS.vocab_size}: {e}") from None
        else:
            vocab = tokenization.build_wordpiece_vocab(sentences, FLAGS.vocab_size, FLAGS.do_lower_case)
            path = FLAGS.output
            atomic_files.write_text(path, "\n".join(vocab) + "\n")
    print(f"wrote {path} from {len(sentences):,} sentences")
