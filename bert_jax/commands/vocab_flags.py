"""The flags naming the vocabulary of a command that tokenizes text (`prepare-data`,
`create-data`, `tokenize`), defined alike: ``--vocab_file``, ``--tokenizer`` and
``--do_lower_case``, which `prepare.Options` and `tokenization.load_tokenizer` take."""

from __future__ import annotations

from absl import flags


def define() -> None:
    flags.DEFINE_string(
        "vocab_file",
        "",
        "vocab.txt, SentencePiece .model or tokenizer.json, or a folder holding one "
        "(default: bundled bert-base-uncased).",
    )
    flags.DEFINE_enum(
        "tokenizer",
        "wordpiece",
        ["wordpiece", "sentencepiece"],
        "Kind of --vocab_file (a tokenizer.json is recognised as such).",
    )
    flags.DEFINE_bool(
        "do_lower_case",
        None,
        "Lower-case and strip accents (default: the casing recorded beside the vocabulary, else true).",
    )
