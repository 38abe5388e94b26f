"""`bert-jax convert --src=PATH --dst=PATH --dst_format=bert_jax|hf|tf` (source detected).

The output carries the vocabulary and its casing (`vocab.txt`, `tokenizer_config.json`),
so `features`, `finetune`, `convert` and `transformers.AutoTokenizer` work from it alone.
"""

from __future__ import annotations

from absl import flags, logging

from bert_jax import convert
from bert_jax.data import tokenization

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "src",
        None,
        "A Hugging Face folder, an original TF checkpoint, or a "
        "bert_jax checkpoint/workdir; the format is detected.",
    )
    flags.DEFINE_string("dst", None, "Where to write (a folder; for tf, a folder or a prefix).")
    flags.DEFINE_enum("dst_format", "bert_jax", ["bert_jax", "hf", "tf"], "Output format.")
    flags.DEFINE_string("vocab_file", "", "The vocabulary (default: the vocab.txt beside --src).")
    flags.DEFINE_enum(
        "do_lower_case",
        "auto",
        ["auto", "true", "false"],
        "Casing recorded with the output (auto: --src's tokenizer_config.json, else true).",
    )
    flags.DEFINE_integer(
        "vocab_pad_multiple",
        0,
        "Vocabulary padding a bert_jax output records, so that loading it pads the word "
        "embeddings to this multiple (128 for tensor parallelism of 4 or 8); the tensors on "
        "disk are never padded. 0 keeps the source's.",
        lower_bound=0,
    )
    flags.mark_flags_as_required(["src", "dst"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)

    params, config = convert.load_checkpoint(FLAGS.src, vocab_pad_multiple=FLAGS.vocab_pad_multiple or None)
    vocab = FLAGS.vocab_file or tokenization.vocab_beside(FLAGS.src)  # refuses before writing
    tokenization.load_vocab(vocab)
    casing = (
        convert.source_casing(FLAGS.src) if FLAGS.do_lower_case == "auto" else FLAGS.do_lower_case == "true"
    )
    folder = convert.save_checkpoint(FLAGS.dst, params, config, FLAGS.dst_format)
    convert.write_tokenizer_files(folder, vocab, True if casing is None else casing, config)
    heads = " with MLM/NSP heads" if "mlm" in params else ""
    if FLAGS.dst_format == "bert_jax" and config.vocab_pad_multiple > 1:
        heads += f", vocabulary padded to {config.padded_vocab_size} on load"
    print(
        f"{convert.detect_format(FLAGS.src)} {FLAGS.src} → {FLAGS.dst_format} {FLAGS.dst} "
        f"(L={config.num_hidden_layers} H={config.hidden_size}{heads})"
    )
