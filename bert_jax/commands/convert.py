"""`bert-jax convert --src=PATH --dst=PATH --dst_format=bert_jax|hf|tf` (source detected).

The output carries the vocabulary and its casing (`vocab.txt`, `tokenizer_config.json`),
so `features`, `finetune`, `convert` and `transformers.AutoTokenizer` work from it alone.
``--dst`` must be new or empty; ``--overwrite`` replaces an earlier conversion there (a
folder holding anything else is refused, and so is one holding ``--src``). Nothing is
written before the source and the vocabulary are read. Either may be in a bucket
(``gs://...``): a source is read from its local copy (`convert.local_copy`), an output
written locally and uploaded when it is whole.
"""

from __future__ import annotations

import json
import os

from absl import flags, logging

from bert_jax import convert
from bert_jax.convert.bert_jax_format import HEAD_FILE
from bert_jax.data import tokenization, user_paths
from bert_jax.storage import files

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
    flags.DEFINE_string(
        "vocab_file", "", "The vocabulary, or a folder holding it (default: the one beside --src)."
    )
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
    flags.DEFINE_bool(
        "fold_segment_embedding",
        False,
        "For a ModernBERT export: fold row 0 of a segment embedding into the word embeddings "
        "(exact only for a model trained on segment 0 alone, e.g. FULL-SENTENCES rows).",
    )
    flags.DEFINE_bool("overwrite", False, "Replace an earlier conversion in --dst.")
    flags.mark_flags_as_required(["src", "dst"])


# What a conversion writes into its folder (any format), so what --overwrite may replace.
OUTPUT_NAMES = {
    "bert_config.json",
    "config.json",
    "model.safetensors",
    "pytorch_model.bin",
    "params",
    "vocab.txt",
    "spm.model",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "checkpoint",
    "task.json",
}


def output_folder(dst: str, fmt: str) -> str:
    """The folder the conversion writes into (for tf, a prefix's folder)."""
    if fmt == "tf" and "ckpt" in os.path.basename(dst.rstrip(os.sep)):
        return os.path.dirname(dst.rstrip(os.sep)) or "."
    return dst


def staged_path(dst: str, folder: str, out: str) -> str:
    """Where to write `dst` (a folder, or a TF prefix in its output folder `folder`) when
    the output folder is written as `out` (`user_paths.staged_output`: itself, or a local
    folder standing for a bucket's)."""
    if out == folder:
        return dst
    prefix = dst.rstrip("/") != folder.rstrip("/")
    return os.path.join(out, os.path.basename(dst.rstrip("/"))) if prefix else out


def check_dst(folder: str, overwrite: bool, inputs: dict[str, str]) -> list[str]:
    """What --overwrite replaces in the output folder (see `user_paths.output_folder`);
    a folder that holds one of the `inputs` (flag → path) is refused: it would be replaced."""
    inside = files.resolve(folder).rstrip("/")
    for flag, path in inputs.items():
        here = files.resolve(path).rstrip("/") if path else ""
        if here and (here == inside or here.startswith(inside + "/")):
            raise ValueError(f"--dst {folder} holds {flag} {path}: write the conversion to another folder")
    return user_paths.output_folder(
        folder, "--dst", overwrite, lambda name: name in OUTPUT_NAMES or ".ckpt" in name
    )


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)

    folder = output_folder(FLAGS.dst, FLAGS.dst_format)
    if files.is_remote(folder):  # within a bound, in one line, before anything is read
        files.check_reachable(folder, "--dst", writable=True)
    earlier = check_dst(folder, FLAGS.overwrite, {"--src": FLAGS.src, "--vocab_file": FLAGS.vocab_file})
    src = convert.local_copy(FLAGS.src)  # one in a bucket: its local copy
    if not (os.path.exists(src) or os.path.exists(f"{src}.index")):
        raise FileNotFoundError(f"--src {FLAGS.src} does not exist")
    params, config = convert.load_checkpoint(src, vocab_pad_multiple=FLAGS.vocab_pad_multiple or None)
    given_vocab, _ = tokenization.vocab_in_folder(FLAGS.vocab_file)  # a folder: the file in it
    vocab = given_vocab or tokenization.vocab_beside(src)  # refuses before writing
    if not vocab.endswith(".model"):  # a SentencePiece model is read by check_tokenizer_size
        tokenization.load_vocab(vocab)
    convert.check_tokenizer_size(vocab, config)
    convert.check_same_vocabulary(given_vocab, src, "--vocab_file")  # ids it never learned
    given = FLAGS.do_lower_case
    casing = tokenization.recorded_casing(src) if given == "auto" else given == "true"
    # A bucket's output is written locally first, then uploaded (`staged_output`).
    with user_paths.removed_if_failed(folder), user_paths.staged_output(folder, earlier, "--dst") as out:
        written = convert.save_checkpoint(
            staged_path(FLAGS.dst, folder, out),
            params,
            config,
            FLAGS.dst_format,
            fold_segment=FLAGS.fold_segment_embedding,
            label_names=convert.label_names(src),
        )
        convert.write_tokenizer_files(written, vocab, True if casing is None else casing, config)
        modern = FLAGS.dst_format == "hf" and _model_type(written) == "modernbert"
    heads = ""
    if "mlm" in params:  # a ModernBERT export has no NSP head (`ModernBertForMaskedLM`)
        heads = " with MLM/NSP heads" if "nsp" in params and not modern else " with the MLM head"
    _, head = convert.split_task_head(params)
    if head is None and os.path.exists(os.path.join(src, HEAD_FILE)):
        print(
            f"warning: {FLAGS.src}/head.msgpack is not converted (a head of no transformers class, or "
            "saved before its kind was recorded in task.json); the encoder is"
        )
    # (the TF graph holds no task head; a ModernBERT export only the sequence classifier)
    if head is not None and FLAGS.dst_format != "tf" and (head[0] == "classifier" or not modern):
        heads += f" with its {convert.HEADS[head[0]]}"
    if FLAGS.dst_format == "bert_jax" and config.vocab_pad_multiple > 1:
        heads += f", vocabulary padded to {config.padded_vocab_size} on load"
    print(
        f"{convert.detect_format(src)} {FLAGS.src} → {FLAGS.dst_format} {FLAGS.dst} "
        f"(L={config.num_hidden_layers} H={config.hidden_size}{heads})"
    )


def _model_type(folder: str) -> str:
    with open(os.path.join(folder, "config.json")) as f:
        return json.load(f).get("model_type", "")
