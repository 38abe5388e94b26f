"""`bert-jax build-vocab --output=PATH --vocab_size=N [--tokenizer=wordpiece|sentencepiece|bpe]`.

Learns a WordPiece vocab.txt (`vocab_learning.build_wordpiece_vocab`), a SentencePiece
model, or a ModernBERT-style byte-level BPE ``tokenizer.json`` (`vocab_learning.byte_level_bpe`)
from text in the original format (`--input_file`, a glob), or from the embedded Wikipedia
excerpt when no input is given. Use the result with `--config.data.vocab_file=PATH` (and
`--config.data.tokenizer=sentencepiece` for a SentencePiece model; a tokenizer.json is
recognised as such). ``--output`` may be a folder (one that exists, or a path ending in
/): it gets ``vocab.txt``, ``spm.model`` or ``tokenizer.json``, and every command takes the
folder as its vocabulary. For ``bpe``, ``tokenizer_config.json`` and
``special_tokens_map.json`` are written beside the ``tokenizer.json``, so that
`transformers.AutoTokenizer` loads the folder. An existing output is refused unless
``--overwrite``.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from absl import flags

from bert_jax.data import corpora, tokenizer_json, user_paths, vocab_learning
from bert_jax.storage import atomic_files, files

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "input_file", "", "Text glob (one sentence per line); default: the embedded Wikipedia excerpt."
    )
    flags.DEFINE_string(
        "output",
        None,
        "vocab.txt to write, the SentencePiece model prefix, or (bpe) the tokenizer.json; or a "
        "folder, to hold vocab.txt, spm.model or tokenizer.json.",
    )
    flags.DEFINE_integer("vocab_size", 8000, "Target vocabulary size.", lower_bound=1)
    flags.DEFINE_enum("tokenizer", "wordpiece", ["wordpiece", "sentencepiece", "bpe"], "Which kind.")
    flags.DEFINE_bool(
        "do_lower_case", None, "Lower-case before learning (default: true, but false for bpe, as ModernBERT)."
    )
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output.")
    flags.mark_flags_as_required(["output"])


def output_paths(kind: str, output: str) -> list[str]:
    """The files `kind` writes for ``--output``, the tokenizer's own first. A folder (one
    that exists, in a bucket too, or a path ending in /) gets the names the
    vocabulary-folder readers look for (`tokenization.vocab_in_folder`): ``vocab.txt``,
    ``spm.model``, ``tokenizer.json``."""
    into_folder = output.endswith(("/", os.sep)) or files.is_dir(output)
    if kind == "sentencepiece":
        prefix = os.path.join(output, "spm") if into_folder else output
        return [f"{prefix}.model", f"{prefix}.vocab"]
    if kind == "bpe":
        if output.endswith(".json") and os.path.basename(output) != "tokenizer.json":
            raise ValueError(
                f"--output={output}: name it tokenizer.json (or give its folder), the name "
                "transformers.AutoTokenizer looks for"
            )
        folder = os.path.dirname(output) if output.endswith(".json") else output
        names = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
        return [os.path.join(folder, n) for n in names]
    return [os.path.join(output, "vocab.txt") if into_folder else output]


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")

    kind = FLAGS.tokenizer
    lower = (kind != "bpe") if FLAGS.do_lower_case is None else FLAGS.do_lower_case
    outputs = output_paths(kind, FLAGS.output)
    for path in outputs:
        user_paths.output_file(path, "--output", FLAGS.overwrite)
    if FLAGS.input_file:
        found = user_paths.input_files([FLAGS.input_file], "--input_file")  # a bucket's: local copies
        docs = corpora.load_documents("text", ",".join(found), shown=FLAGS.input_file)
    else:
        docs = corpora.load_documents("wiki_excerpt")
    sentences = [s for d in docs for s in d]
    folder = os.path.dirname(outputs[0])
    with user_paths.removed_if_failed(folder):
        if kind == "sentencepiece":
            path = _sentencepiece(sentences, outputs[0].removesuffix(".model"), lower)
        elif kind == "bpe":
            learned = vocab_learning.byte_level_bpe(sentences, FLAGS.vocab_size, lower)
            path = outputs[0]
            texts = tokenizer_json.hf_folder_files(tokenizer_json.TokenizerJson(path, learned))
            for name, text in texts.items():
                atomic_files.write_text(os.path.join(folder, name), text)
        else:
            vocab = vocab_learning.build_wordpiece_vocab(sentences, FLAGS.vocab_size, lower)
            path = outputs[0]
            atomic_files.write_text(path, "\n".join(vocab) + "\n")
            _say_placeholders(sum(t.startswith("[unused") for t in vocab), len(vocab))
    print(f"wrote {path} from {len(sentences):,} sentences")


def _sentencepiece(sentences: list[str], prefix: str, lower: bool) -> str:
    """SentencePiece's model and vocabulary at `prefix` (``.model``, ``.vocab``); in a
    bucket, trained into a local folder (SentencePiece writes local files) and uploaded."""
    remote = files.is_remote(prefix)
    folder = tempfile.mkdtemp(prefix="bert_jax-spm-") if remote else os.path.dirname(prefix)
    try:
        os.makedirs(folder or ".", exist_ok=True)
        local = os.path.join(folder, os.path.basename(prefix)) if remote else prefix
        try:
            vocab_learning.train_sentencepiece(sentences, local, FLAGS.vocab_size, lower)
        except RuntimeError as e:  # SentencePiece's own refusal, e.g. a size the text cannot fill
            raise ValueError(f"--tokenizer=sentencepiece --vocab_size={FLAGS.vocab_size}: {e}") from None
        if remote:
            for suffix in (".vocab", ".model"):  # the model last: a reader looks for it
                files.upload(local + suffix, prefix + suffix)
    finally:
        if remote:
            shutil.rmtree(folder, ignore_errors=True)
    return prefix + ".model"


def _say_placeholders(unused: int, size: int) -> None:
    """One warning line where the text filled less than 90% of the vocabulary asked for:
    the rest are ``[unusedN]`` rows (as BERT's own), embeddings the model never trains."""
    if unused > size // 10:
        print(
            f"warning: the text has pieces for {size - unused:,} of --vocab_size={size:,} entries; the other "
            f"{unused:,} are [unusedN] placeholders (a smaller --vocab_size, or more text)",
            flush=True,
        )
