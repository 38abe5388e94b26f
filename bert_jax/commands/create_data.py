"""`bert-jax create-data`: the original `create_pretraining_data.py`, same flag names.

Writes ``PREFIX-00000-of-0000K.tfrecord`` ... with ``dupe_factor`` statically masked
versions of every document, sharded round-robin.
"""

from __future__ import annotations

from absl import flags

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
    import numpy as np
    import tensorflow as tf
    from tqdm import tqdm

    from bert_jax import corpora, input_pipeline, pretraining_data, tfrecords, tokenization

    tok = tokenization.load_tokenizer(FLAGS.vocab_file, FLAGS.do_lower_case)
    texts = [d for pattern in FLAGS.input_file.split(",") for d in corpora.load_documents("text", pattern)]
    docs = input_pipeline.tokenize_documents(tok, texts)
    masking = pretraining_data.MaskingConfig(
        masked_lm_prob=FLAGS.masked_lm_prob,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        whole_word_masking=FLAGS.do_whole_word_mask,
    )
    names = tfrecords.shard_names(FLAGS.output_file, FLAGS.num_shards)
    writers = [tf.io.TFRecordWriter(n) for n in names]
    written = 0
    for dupe in tqdm(range(FLAGS.dupe_factor), desc="dupe_factor", unit="copy"):
        rng = np.random.default_rng([FLAGS.random_seed, dupe])
        instances = pretraining_data.create_instances(
            docs, FLAGS.max_seq_length, FLAGS.short_seq_prob, rng, tok.special
        )
        for inst in instances:
            feats = pretraining_data.to_features(
                inst,
                rng,
                FLAGS.max_seq_length,
                masking,
                tok.special,
                tok.vocab_size,
                tok.is_continuation if FLAGS.do_whole_word_mask else None,
            )
            writers[written % len(writers)].write(tfrecords.serialize(feats))
            written += 1
    for w in writers:
        w.close()
    print(f"wrote {written} instances from {len(docs)} documents to {len(names)} file(s): {names[0]} ...")
