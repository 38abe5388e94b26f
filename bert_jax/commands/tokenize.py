"""`bert-jax tokenize --vocab_file=F --input=TEXT --output=F.jsonl [--do_lower_case]`.

One JSON list of WordPiece ids per input line: for checking a vocab, or comparing with
another tokenizer.
"""

from __future__ import annotations

import json

from absl import flags

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("vocab_file", None, "vocab.txt (default: bundled bert-base-uncased).")
    flags.DEFINE_string("input", None, "Text file, one text per line.")
    flags.DEFINE_string("output", None, "Output .jsonl, one list of ids per line.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased vocab).")
    flags.mark_flags_as_required(["input", "output"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    from bert_jax import tokenization

    tok = tokenization.load_tokenizer(FLAGS.vocab_file or "", FLAGS.do_lower_case)
    with open(FLAGS.input, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    ids = tok.tokenize(lines)
    with open(FLAGS.output, "w") as f:
        for row in ids:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(ids)} lines, {sum(map(len, ids))} tokens to {FLAGS.output}")
