"""Where a TFRecord stream stands at a global step: per-file record counts, and the seek.

A `tfrecords` training stream reads its files in a seeded order per epoch, each file in
windows of `window` records shuffled by a seed of (stream, epoch, file, window). So the
record at stream position ``R`` is found without reading what came before it: the epoch
is ``R // N`` (``N`` the stream's records), the file is where the epoch's order of
per-file counts passes ``R mod N``, and within it the window and the offset follow. A
resume at step ``k`` therefore reads the window it lands in (after skipping, unparsed, at
most the records of that one file before the window), never the ``k`` batches before it.

The counts are what a resume needs (a run that starts at step 0 reads none): the files'
records, counted once by reading each file (raw records, unparsed), and kept in the data
cache (``tfrecord-counts.json``), keyed by each file's path, size and modification time,
so a changed file is counted again and a resume on the same machine reads none of them.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os

import numpy as np

from bert_jax.data import tfrecord_reader
from bert_jax.storage import atomic_files, files, tensorflow_runtime

INDEX = "tfrecord-counts.json"


def _stamps(paths: list[str]) -> list[list[int]]:
    """(size, modification time in ns) of each file, through the path layer (``gs://`` too:
    a request per file, so several at once)."""
    with concurrent.futures.ThreadPoolExecutor(min(16, max(1, len(paths)))) as pool:
        return list(pool.map(files.size_and_time, paths))


def sizes(paths: list[str]) -> list[int]:
    """Each file's size in bytes (an empty TFRecord file has 0 bytes; any record takes 16)."""
    return [size for size, _ in _stamps(paths)]


def count_records(path: str) -> int:
    """The records of one TFRecord file, read through once (raw, unparsed)."""
    if files.is_remote(path):
        return tfrecord_reader.count(path)
    tf = tensorflow_runtime.tensorflow()
    ds = tf.data.TFRecordDataset(path)
    return int(ds.reduce(np.int64(0), lambda n, _: n + 1))


def _load(index_path: str) -> dict:
    try:
        with open(index_path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def record_counts(paths: list[str], cache_dir: str | None) -> list[int]:
    """The records of each file: from the cache's index where its size and time still
    match, else counted now (with one line saying so) and added to the index."""
    index_path = os.path.join(cache_dir, INDEX) if cache_dir else ""
    index = _load(index_path) if index_path else {}
    stamps = dict(zip(paths, _stamps(paths), strict=True))
    missing = [p for p in paths if (index.get(p) or [None])[:2] != stamps[p]]
    if missing:
        gib = sum(stamps[p][0] for p in missing) / 2**30
        where = f"; kept in {index_path}" if index_path else ""
        print(
            f"counting the records of {len(missing)} TFRecord file(s) ({gib:.2f} GiB) once, "
            f"to resume at their position{where}",
            flush=True,
        )
        for p in missing:
            index[p] = [*stamps[p], count_records(p)]
        if index_path:
            fresh = _load(index_path)  # another run may have added files meanwhile
            fresh.update({p: index[p] for p in missing})
            atomic_files.write_json(index_path, fresh)
    return [int(index[p][2]) for p in paths]


@dataclasses.dataclass(frozen=True)
class Start:
    """Where a stream resumes: in `epoch`, its `position`-th file of that epoch's order,
    from `window` (skipping ``window * size`` records of the file), dropping the first
    `offset` records of that window once shuffled."""

    epoch: int = 0
    position: int = 0
    window: int = 0
    offset: int = 0

    def as_list(self) -> list[int]:
        return [self.epoch, self.position, self.window, self.offset]


def seek(record: int, counts: list[int], order_of_epoch, window: int) -> Start:
    """The `Start` of stream record `record` (0-based, over all epochs), for files with
    `counts` records, `order_of_epoch(e)` the files' order in epoch ``e`` (indices into
    `counts`) and windows of `window` records."""
    total = sum(counts)
    if total <= 0:
        raise ValueError("a TFRecord stream with no records has no position")
    epoch, within = divmod(int(record), total)
    order = np.asarray(order_of_epoch(epoch), np.int64)
    ends = np.cumsum(np.asarray(counts, np.int64)[order])
    position = int(np.searchsorted(ends, within, side="right"))
    in_file = within - (int(ends[position - 1]) if position else 0)
    return Start(epoch, position, *divmod(in_file, window))
