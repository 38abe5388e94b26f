"""`bert-jax create-data`: the original `create_pretraining_data.py`, same flag names.

Writes ``PREFIX-00000-of-0000K.tfrecord`` ... with ``dupe_factor`` statically masked
versions of every document, sharded round-robin. Input files are streamed one at a time
through the same reading, tokenization and pairing as `prepare-data` (NotNext segments
drawn from the same file), so memory is bounded by one input file; masks are drawn on the
host (`pretraining_examples.to_features`), per instance, as the original.

Existing files of the prefix (``PREFIX-*-of-*.tfrecord``, whatever their count) are refused
unless ``--overwrite``, which replaces them all. The files are written to temporary names
and renamed when every one is complete, so a refused or failed run leaves nothing behind.
A ``gs://`` prefix: the files are written to a local temporary folder, then uploaded one by
one through the path layer (`storage.files`, the one ``gs://`` client; each object appears
whole or not at all), and the earlier files not replaced are removed after the last.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile

import numpy as np
from absl import flags

from bert_jax.commands import vocab_flags
from bert_jax.data import masking, prepare, tfrecords, user_paths
from bert_jax.data.progress import ProgressLines
from bert_jax.storage import atomic_files, files, tensorflow_runtime

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "input_file",
        None,
        "Input text glob(s), comma-separated: one sentence per line, blank lines between documents; "
        "a one-line document (prose, a paragraph a line) is split into sentences.",
    )
    flags.DEFINE_string("output_file", None, "Output prefix: PREFIX-00000-of-0000K.tfrecord.")
    vocab_flags.define()
    flags.DEFINE_bool("do_whole_word_mask", False, "Mask whole words (all their pieces).")
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
    flags.register_validator("max_seq_length", lambda v: v >= 8, "must be at least 8")
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked LM predictions.", lower_bound=1)
    flags.DEFINE_integer("random_seed", 12345, "Random seed.")
    flags.DEFINE_integer("dupe_factor", 10, "Versions of the data with different masks.", lower_bound=1)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.")
    flags.DEFINE_integer("num_shards", 1, "Output files.", lower_bound=1)
    flags.DEFINE_bool("overwrite", False, "Replace existing files of the --output_file prefix.")
    flags.mark_flags_as_required(["input_file", "output_file"])


def earlier_files(prefix: str, overwrite: bool) -> list[str]:
    """The files an earlier run wrote with this prefix (any shard count), which --overwrite
    replaces; refused without it."""
    if not prefix or prefix.endswith(("/", os.sep)):
        raise IsADirectoryError(f"--output_file {prefix!r} names a folder: give a prefix, e.g. {prefix}data")
    shards = "-[0-9]*-of-[0-9]*.tfrecord"  # `tfrecords.shard_names`, any count
    if files.is_remote(prefix):
        found = sorted(files.glob(prefix + shards))
    else:
        found = sorted(glob.glob(glob.escape(prefix) + shards))
        files.check_can_create(prefix, "--output_file", folder=os.path.dirname(os.path.abspath(prefix)))
    if found and not overwrite:
        raise FileExistsError(
            f"--output_file {prefix}: {found[0]} already exists: pass --overwrite to replace "
            "the prefix's files, or another --output_file"
        )
    return found


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    if FLAGS.num_shards < 1:
        raise ValueError(f"--num_shards={FLAGS.num_shards}: at least 1")

    inputs = prepare.list_inputs(FLAGS.input_file)
    earlier = earlier_files(FLAGS.output_file, FLAGS.overwrite)
    opts = prepare.Options.from_flags(FLAGS).resolved()
    tok = prepare.load_tokenizer(opts)
    tf = tensorflow_runtime.tensorflow()
    names = tfrecords.shard_names(FLAGS.output_file, FLAGS.num_shards)
    folder, remote = os.path.dirname(FLAGS.output_file), files.is_remote(FLAGS.output_file)
    # Every file written whole first, then put in place (renamed beside the output, or
    # uploaded from a temporary folder to a bucket): a failed run leaves the earlier files.
    staged = (
        tempfile.TemporaryDirectory(prefix="bert-jax-create-data-") if remote else contextlib.nullcontext()
    )
    with staged as staging, user_paths.removed_if_failed(folder):
        if folder and not remote:
            os.makedirs(folder, exist_ok=True)
        temps = [
            os.path.join(staging, os.path.basename(n)) if remote else atomic_files.temp_path(n) for n in names
        ]
        try:
            written, documents = write_examples(tf, inputs, opts, tok, temps)
        except BaseException:
            for t in temps:
                if os.path.exists(t):
                    os.remove(t)
            raise
        for t, n in zip(temps, names, strict=True):
            files.place(t, n)
        for old in set(earlier) - set(names):
            files.remove(old)
    print(f"wrote {written} instances from {documents} documents to {len(names)} file(s): {names[0]} ...")


def write_examples(tf, inputs: list, opts: prepare.Options, tok, paths: list[str]) -> tuple[int, int]:
    """Every input's instances, `dupe_factor` times with their own masks, round-robin
    into the files `paths`; returns (instances, documents)."""
    spec = masking.MaskingSpec.of(
        tok.special,
        tok.vocab_size,
        FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob,
        whole_word_masking=FLAGS.do_whole_word_mask,
    )
    continuation = tok.is_continuation if FLAGS.do_whole_word_mask else None
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    written = documents = 0
    bar = ProgressLines("create-data", sum(item.size() for item in inputs), "B")
    try:
        for index, item in enumerate(inputs):
            docs = prepare.tokenize_documents(tok, item.documents())
            documents += len(docs)
            for dupe in range(opts.dupe_factor):
                rng = np.random.default_rng([opts.random_seed, index, dupe, 1])  # the masks
                for inst in prepare.shard_instances(docs, opts, tok.special, [opts.random_seed, index, dupe]):
                    feats = masking.to_features(inst, rng, opts.max_seq_length, spec, continuation)
                    writers[written % len(writers)].write(tfrecords.serialize(feats))
                    written += 1
            bar.advance(item.size(), tokens=sum(len(s) for d in docs for s in d))
    finally:
        bar.close()
        for w in writers:
            w.close()
    if not written:
        raise ValueError(f"no usable documents (two or more sentences) in {FLAGS.input_file}")
    return written, documents
