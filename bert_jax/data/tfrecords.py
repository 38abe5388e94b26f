"""TFRecords in the original `create_pretraining_data.py` layout: writing and reading.

The feature names and types are the original's, so records made by Google's script are
read as they are, and records written here train Google's code. Masks in records are
static (``dupe_factor`` versions), as in the original.

Reading is a `tf.data` pipeline whose global order is a function of the files and the
seed only: files in sorted order, a seeded shuffle buffer, global batches; each host keeps
its rows of each global batch, and a resume at step N skips N raw (unparsed) batches.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator

import numpy as np

from bert_jax.storage import tensorflow_runtime

INT_FEATURES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "next_sentence_labels",
)


def shard_names(prefix: str, num_shards: int) -> list[str]:
    return [f"{prefix}-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]


def serialize(features: dict[str, np.ndarray]) -> bytes:
    tf = tensorflow_runtime.tensorflow()

    def ints(v: np.ndarray) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=np.ravel(v).tolist()))

    feats = {k: ints(features[k]) for k in INT_FEATURES}
    feats["masked_lm_weights"] = tf.train.Feature(
        float_list=tf.train.FloatList(value=np.ravel(features["masked_lm_weights"]).tolist())
    )
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


def _parser(max_seq_length: int, max_predictions_per_seq: int):
    tf = tensorflow_runtime.tensorflow()

    s, p = max_seq_length, max_predictions_per_seq
    spec = {
        "input_ids": tf.io.FixedLenFeature([s], tf.int64),
        "input_mask": tf.io.FixedLenFeature([s], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([s], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([p], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([p], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([p], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }

    def parse(records: tf.Tensor) -> dict[str, tf.Tensor]:
        ex = tf.io.parse_example(records, spec)
        out = {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in ex.items()}
        out["next_sentence_labels"] = tf.reshape(out["next_sentence_labels"], [-1])
        return out

    return parse


def create_iterator(
    input_files: str,
    *,
    global_batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    seed: int,
    start_step: int,
    process_index: int,
    process_count: int,
    repeat: bool = True,
    shuffle_buffer: int = 10_000,
) -> Iterator[dict[str, np.ndarray]]:
    tf = tensorflow_runtime.tensorflow()
    files = sorted(f for pattern in input_files.split(",") for f in glob.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {input_files!r}")
    ds = tf.data.TFRecordDataset(files)  # sequential: the order is the files' order
    if repeat:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    ds = ds.batch(global_batch_size, drop_remainder=True).skip(start_step)
    ds = ds.map(_parser(max_seq_length, max_predictions_per_seq))
    local = global_batch_size // process_count
    lo = process_index * local
    ds = ds.map(lambda b: {k: v[lo : lo + local] for k, v in b.items()}).prefetch(2)
    options = tf.data.Options()
    options.deterministic = True
    yield from ds.with_options(options).as_numpy_iterator()
