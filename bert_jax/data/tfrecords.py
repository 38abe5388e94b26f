"""TFRecords in the original `create_pretraining_data.py` layout: writing and reading.

The feature names and types are the original's, so records made by Google's script are
read as they are, and records written here train Google's code. Masks in records are
static (``dupe_factor`` versions), as in the original.

Training reads each host's rows only. The files (`list_files`: comma-separated globs,
local or ``gs://``, matched through the path layer; sorted; a bucket's read through it
too, `tfrecord_reader`) are dealt to ``S = min(files, global
batch, 1024)`` streams (file ``f`` to stream ``f mod S``), and stream ``s`` fills rows
``[s*B//S, (s+1)*B//S)`` of every global batch of ``B`` rows: its files in a seeded order
per epoch, each file's records in windows of ``shuffle_buffer / S`` shuffled by a seed of
(stream, epoch, file, window), repeated. So the global batches are a function of the
files, the batch size and the seed only, whatever the number of hosts, and host ``p`` of
``P`` opens only the streams that overlap its rows ``[p*B/P, (p+1)*B/P)``: exactly its
rows when ``P`` divides ``S``, otherwise also the rest of at most two streams it shares
with a neighbour. A resume at step N seeks (`tfrecord_index`): from the files' record
counts (counted once, kept in the data cache) it finds each stream's epoch, file and
window, and reads from there, skipping at most the records of that one file before the
window; the batches are the uninterrupted run's. Evaluation files are one
pass in file order: every host reads them (they are small) and parses only its rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from bert_jax.data import tfrecord_index, tfrecord_reader
from bert_jax.storage import files as paths
from bert_jax.storage import tensorflow_runtime

MAX_STREAMS = 1024
# A stream yields the records of `m` batches at once: up to 256 records, and up to 16,384
# records for all of the host's streams together (the memory in flight stays small).
BLOCK_RECORDS, BLOCK_HOST_RECORDS = 256, 16_384
# The end of the ranges that number epochs and windows: never reached (tf.int64.max would
# overflow tf.data's size arithmetic, which crashes the process).
ENDLESS = 2**40
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
    example = tf.train.Example(features=tf.train.Features(feature=feats))
    return example.SerializeToString(deterministic=True)  # map entries in key order: the same bytes every run


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


def list_files(input_files: str) -> list[str]:
    """The files matched by comma-separated globs (local or ``gs://``, through the path
    layer), sorted, each once."""
    patterns = [p.strip() for p in input_files.split(",") if p.strip()]
    files = sorted({f for pattern in patterns for f in paths.glob(pattern)})
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {input_files!r}")
    return files


def stream_rows(num_files: int, global_batch_size: int) -> list[tuple[int, int]]:
    """Rows ``[start, stop)`` of every global batch that each stream fills (one entry per
    stream; stream ``s`` reads files ``s, s + S, s + 2S, ...``)."""
    n = min(num_files, global_batch_size, MAX_STREAMS)
    return [(s * global_batch_size // n, (s + 1) * global_batch_size // n) for s in range(n)]


def host_streams(
    rows: list[tuple[int, int]], global_batch_size: int, process_index: int, process_count: int
) -> list[tuple[int, int, int]]:
    """``(stream, first, stop)`` for each stream that overlaps the host's rows of a global
    batch: the host keeps rows ``[first, stop)`` of the stream's rows of each batch."""
    local = global_batch_size // process_count
    lo, hi = process_index * local, (process_index + 1) * local
    return [(s, max(a, lo) - a, min(b, hi) - a) for s, (a, b) in enumerate(rows) if a < hi and b > lo]


def _seeds(seed: int, streams: list[int]) -> np.ndarray:
    """Two 31-bit seeds per stream (file order, record windows), from (seed, stream) alone."""
    return np.array([np.random.SeedSequence([seed, s]).generate_state(2) >> 1 for s in streams], np.int64)


def read_records(tf, path, remote: bool):
    """The raw records of one file (a tf.data source; tests wrap it to count reads)."""
    return tfrecord_reader.dataset(tf, path, remote)


def _file_order(tf, num_files, seed, epoch):
    """The order of a stream's files in `epoch` (eagerly or inside tf.data alike)."""
    # int64 throughout: fold_in of an int32 gives another key (a Python int is int32).
    seed_pair = tf.stack([tf.cast(seed, tf.int64), tf.constant(0, tf.int64)])
    key = tf.random.experimental.stateless_fold_in(seed_pair, tf.cast(epoch, tf.int64))
    return tf.random.experimental.stateless_shuffle(tf.range(num_files, dtype=tf.int64), seed=key)


class EmptyStream(ValueError):
    """Every file of a stream is empty: it could never fill its rows."""


def _starts(tf, groups: list[list[str]], cache_dir: str | None, seeds: np.ndarray, records: list[int],
            window: int) -> list[list[int]]:  # fmt: skip
    """Each stream's `tfrecord_index.Start` at its record ``records[q]``. A resume reads the
    record counts of the host's files (`tfrecord_index.record_counts`); at step 0 every
    stream starts at its first file and only the files' sizes are read. A stream of empty
    files is refused (tf.data would look for its records forever)."""
    flat = [f for group in groups for f in group]
    resume = any(records)
    found = tfrecord_index.record_counts(flat, cache_dir) if resume else tfrecord_index.sizes(flat)
    out, at = [], 0
    for q, group in enumerate(groups):
        counts, at = found[at : at + len(group)], at + len(group)
        if not any(counts):
            raise EmptyStream(f"the TFRecord files {', '.join(group)} hold no records (remove them)")
        if not resume:
            out.append(tfrecord_index.Start().as_list())
            continue

        def order(epoch: int, q: int = q, num_files: int = len(group)) -> np.ndarray:
            return _file_order(tf, num_files, seeds[q, 0], epoch).numpy()

        out.append(tfrecord_index.seek(records[q], counts, order, window).as_list())
    return out


def _train_rows(tf, files: list[str], *, global_batch_size: int, seed: int, start_step: int,
                process_index: int, process_count: int, shuffle_buffer: int,
                cache_dir: str | None):  # fmt: skip
    """The host's raw records of each global batch (a 1-D string tensor per batch). The
    streams are read in parallel, in blocks of `m` batches (fewer, larger elements)."""
    rows = stream_rows(len(files), global_batch_size)
    mine = host_streams(rows, global_batch_size, process_index, process_count)
    n, k = len(rows), len(mine)
    ids = [s for s, _, _ in mine]
    counts = [rows[s][1] - rows[s][0] for s in ids]
    local = global_batch_size // process_count
    m = max(1, min(BLOCK_RECORDS // max(counts), BLOCK_HOST_RECORDS // local))
    streams = tf.constant(ids, tf.int64)
    sizes = tf.constant(counts, tf.int64)
    keep = tf.constant([[first, stop] for _, first, stop in mine], tf.int64)
    seeds_np = _seeds(seed, ids)
    seeds = tf.constant(seeds_np)
    window = -(-shuffle_buffer // n)
    groups, at = [files[s::n] for s in ids], [start_step * c for c in counts]
    starts = tf.constant(_starts(tf, groups, cache_dir, seeds_np, at, window), tf.int64)
    names = tf.ragged.constant(groups)
    remote = tfrecord_reader.any_remote(files)

    def stream(i):
        group = names[i]
        # Indexed one by one: tf.unstack here crashes TensorFlow 2.21's tf.data (a segfault).
        epoch0, position0, window0, offset0 = (starts[i, j] for j in range(4))
        num_files = tf.size(group, out_type=tf.int64)

        def file_records(epoch, position, first_window):
            f = _file_order(tf, num_files, seeds[i, 0], epoch)[position]
            key = tf.random.experimental.stateless_fold_in(tf.stack([seeds[i, 1], f]), epoch)
            blocks = read_records(tf, group[f], remote).skip(first_window * window).batch(window)
            numbered = tf.data.Dataset.zip(tf.data.Dataset.range(first_window, ENDLESS), blocks)
            shuffled = numbered.map(
                lambda w, b: tf.random.experimental.stateless_shuffle(
                    b, seed=tf.random.experimental.stateless_fold_in(key, w)
                )
            )
            return shuffled.unbatch()

        # Each epoch: every file once in a new order, each window of records shuffled anew.
        first = tf.data.Dataset.range(position0, num_files).map(
            lambda p: (epoch0, p, window0 * tf.cast(p == position0, tf.int64))
        )
        later = tf.data.Dataset.range(epoch0 + 1, ENDLESS).flat_map(
            lambda e: tf.data.Dataset.range(num_files).map(lambda p: (e, p, tf.constant(0, tf.int64)))
        )
        ds = first.concatenate(later).flat_map(file_records).skip(offset0)
        ds = ds.batch(sizes[i] * m, drop_remainder=True)
        return ds.map(
            lambda b: (streams[i], tf.reshape(tf.reshape(b, [m, -1])[:, keep[i, 0] : keep[i, 1]], [-1]))
        )

    ds = tf.data.Dataset.range(k).interleave(
        stream, cycle_length=k, block_length=1, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    )
    order = _block_order([stop - first for _, first, stop in mine], m)
    return ds.ragged_batch(k).map(_assemble(tf, streams, order, m)).unbatch()


def _assemble(tf, streams, order: np.ndarray, m: int):
    """The streams' blocks → the host's rows of `m` batches (every stream's block, in
    stream order, checked: a missing one would shift the others' rows)."""
    order = tf.constant(order)

    def assemble(got, raw):
        check = tf.debugging.assert_equal(got, streams, message=_DRY)
        with tf.control_dependencies([check]):
            return tf.reshape(tf.gather(raw.flat_values, order), [m, -1])

    return assemble


def _block_order(kept: list[int], m: int) -> np.ndarray:
    """Where row r of batch j of a block is among the streams' blocks laid end to end
    (stream q's block: its `kept[q]` rows of batch 0, then of batch 1, ...)."""
    kept_rows = np.asarray(kept, np.int64)
    start = np.concatenate([[0], np.cumsum(kept_rows)])  # stream q's first row in a host batch
    q = np.repeat(np.arange(len(kept_rows)), kept_rows)  # the stream of each row of a host batch
    r = np.arange(start[-1]) - start[q]
    j = np.arange(m)[:, None]
    return (m * start[q] + j * kept_rows[q] + r).ravel()


_DRY = "a TFRecord stream missed a block"


def _eval_rows(tf, files: list[str], *, global_batch_size: int, start_step: int,
               process_index: int, process_count: int):  # fmt: skip
    """One pass in file order; the host's raw records of each global batch (a partial last
    batch is dropped)."""
    local = global_batch_size // process_count
    lo = process_index * local
    ds = tfrecord_reader.datasets(tf, files).batch(global_batch_size, drop_remainder=True)
    return ds.skip(start_step).map(lambda b: b[lo : lo + local])


def _warn_if_shared(files: list[str], global_batch_size: int, process_count: int) -> None:
    """One warning line where a host reads at least twice its rows (fewer files than hosts,
    or streams that straddle hosts)."""
    rows = stream_rows(len(files), global_batch_size)
    local = global_batch_size // process_count
    most = max(
        sum(rows[s][1] - rows[s][0] for s, _, _ in host_streams(rows, global_batch_size, p, process_count))
        for p in range(process_count)
    )
    if most >= 2 * local:
        print(
            f"warning: {len(files)} TFRecord files for {process_count} hosts: a host reads up to {most} "
            f"records per step for its {local} (a number of files divisible by {process_count} reads "
            "exactly each host's rows)",
            flush=True,
        )


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
    cache_dir: str | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host ``process_index`` of ``process_count``'s rows of global batches ``start_step,
    start_step + 1, ...``: training (``repeat``) forever from its own streams, evaluation
    one pass (see the module docstring). A training resume reads the files' record counts
    from `cache_dir`'s index (`tfrecord_index`; counted once where missing)."""
    if global_batch_size % process_count:
        raise ValueError(f"global_batch_size={global_batch_size} is not divisible by {process_count} hosts")
    tf = tensorflow_runtime.tensorflow()
    files = list_files(input_files)
    where = dict(start_step=start_step, process_index=process_index, process_count=process_count)
    if repeat:
        if process_index == 0:
            _warn_if_shared(files, global_batch_size, process_count)
        try:
            raw = _train_rows(tf, files, global_batch_size=global_batch_size, seed=seed,
                              shuffle_buffer=shuffle_buffer, cache_dir=cache_dir, **where)  # fmt: skip
        except EmptyStream as e:
            raise ValueError(f"{input_files}: {e}") from None
    else:
        raw = _eval_rows(tf, files, global_batch_size=global_batch_size, **where)
    ds = raw.map(_parser(max_seq_length, max_predictions_per_seq)).prefetch(2)
    options = tf.data.Options()
    options.deterministic = True
    yield from ds.with_options(options).as_numpy_iterator()
