"""`bert-jax tokenize --vocab_file=F --input=TEXT --output=F.jsonl [--do_lower_case]`.

One JSON list of WordPiece ids per input line: for checking a vocab, or comparing with
another tokenizer.
"""

from __future__ import annotations

import json

from absl import flags

from bert_jax.data import tokenization

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string("vocab_file", None, "vocab.txt (default: bundled bert-base-uncased).")
    flags.DEFINE_string("input", None, "Text file, one text per line.")
    flags.DEFINE_string("output", None, "Output .jsonl, one list of ids per line.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased vocab).")
    flags.mark_flags_as_required(["input", "output"])


def read_lines(text: str) -> list[str]:
    """Lines ended by "\n" (or "\r\n") only: form feeds, U+2028, U+0085 or a lone "\r"
    inside a line stay in it (`str.splitlines` would split there), so output row i is
    always input line i."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")

    tok = tokenization.load_tokenizer(FLAGS.vocab_file or "", FLAGS.do_lower_case)
    with open(FLAGS.input, encoding="utf-8", errors="replace", newline="") as f:
        lines = read_lines(f.read())
    ids = tok.tokenize(lines)
    with open(FLAGS.output, "w") as f:
        for row in ids:
            f.write(json.dumps(row) + "\n")
    print(f"wrote {len(ids)} lines, {sum(map(len, ids))} tokens to {FLAGS.output}")
