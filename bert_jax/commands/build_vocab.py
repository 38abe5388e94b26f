"""`bert-jax build-vocab --output=PATH --vocab_size=N [--tokenizer=wordpiece|sentencepiece]`.

Learns a WordPiece vocab.txt (`tokenization.build_wordpiece_vocab`) or a
SentencePiece model from text in the original format (`--input_file`, a glob), or from
the embedded Wikipedia excerpt when no input is given. Use the result with
`--config.data.vocab_file=PATH` (and `--config.data.tokenizer=sentencepiece`).
"""

from __future__ import annotations

from absl import flags

from bert_jax.data import corpora, tokenization

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "input_file", "", "Text glob (one sentence per line); default: the embedded Wikipedia excerpt."
    )
    flags.DEFINE_string("output", None, "vocab.txt to write, or the SentencePiece model prefix.")
    flags.DEFINE_integer("vocab_size", 8000, "Target vocabulary size.")
    flags.DEFINE_enum("tokenizer", "wordpiece", ["wordpiece", "sentencepiece"], "Which kind.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case before learning.")
    flags.mark_flags_as_required(["output"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")

    if FLAGS.input_file:
        docs = corpora.load_documents("text", FLAGS.input_file)
    else:
        docs = corpora.load_documents("wiki_excerpt")
    sentences = [s for d in docs for s in d]
    if FLAGS.tokenizer == "sentencepiece":
        path = tokenization.train_sentencepiece(
            sentences, FLAGS.output, FLAGS.vocab_size, FLAGS.do_lower_case
        )
    else:
        vocab = tokenization.build_wordpiece_vocab(sentences, FLAGS.vocab_size, FLAGS.do_lower_case)
        path = FLAGS.output
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(vocab) + "\n")
    print(f"wrote {path} from {len(sentences):,} sentences")
