"""`bert-jax create-data`: the original `create_pretraining_data.py`, same flag names.

Writes ``PREFIX-00000-of-0000K.tfrecord`` ... with ``dupe_factor`` statically masked
versions of every document, sharded round-robin. Input files are streamed one at a time
through the same reading, tokenization and pairing as `prepare-data` (NotNext segments
drawn from the same file), so memory is bounded by one input file; masks are drawn on the
host (`pretraining_examples.to_features`), per instance, as the original.
"""

from __future__ import annotations

import numpy as np
from absl import flags
from tqdm import tqdm

from bert_jax.data import masking, prepare, tfrecords
from bert_jax.storage import tensorflow_runtime

FLAGS = flags.FLAGS


def define_flags() -> None:
    flags.DEFINE_string(
        "input_file",
        None,
        "Input text glob(s), comma-separated: one sentence per line, blank lines between documents.",
    )
    flags.DEFINE_string("output_file", None, "Output prefix: PREFIX-00000-of-0000K.tfrecord.")
    flags.DEFINE_string("vocab_file", "", "vocab.txt (default: bundled bert-base-uncased).")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents.")
    flags.DEFINE_bool("do_whole_word_mask", False, "Mask whole words (all their pieces).")
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum masked LM predictions.")
    flags.DEFINE_integer("random_seed", 12345, "Random seed.")
    flags.DEFINE_integer("dupe_factor", 10, "Versions of the data with different masks.")
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a shorter target length.")
    flags.DEFINE_integer("num_shards", 1, "Output files.")
    flags.mark_flags_as_required(["input_file", "output_file"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    tf = tensorflow_runtime.tensorflow()

    inputs = prepare.list_inputs(FLAGS.input_file)
    opts = prepare.Options.from_flags(FLAGS).resolved()
    tok = prepare.load_tokenizer(opts)
    spec = masking.MaskingSpec.of(
        tok.special,
        tok.vocab_size,
        FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob,
        whole_word_masking=FLAGS.do_whole_word_mask,
    )
    names = tfrecords.shard_names(FLAGS.output_file, FLAGS.num_shards)
    writers = [tf.io.TFRecordWriter(n) for n in names]
    written = documents = 0
    for index, item in enumerate(tqdm(inputs, desc="create-data", unit="file")):
        docs = prepare.tokenize_documents(tok, item.documents())
        documents += len(docs)
        for dupe in range(opts.dupe_factor):
            rng = np.random.default_rng([opts.random_seed, index, dupe, 1])  # the masks
            for inst in prepare.shard_instances(docs, opts, tok.special, [opts.random_seed, index, dupe]):
                continuation = tok.is_continuation if FLAGS.do_whole_word_mask else None
                feats = masking.to_features(inst, rng, opts.max_seq_length, spec, continuation)
                writers[written % len(writers)].write(tfrecords.serialize(feats))
                written += 1
    for w in writers:
        w.close()
    if not written:
        raise SystemExit(f"no usable documents (two or more sentences) in {FLAGS.input_file}")
    print(f"wrote {written} instances from {documents} documents to {len(names)} file(s): {names[0]} ...")
