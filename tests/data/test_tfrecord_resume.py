"""A TFRecord resume seeks: at a late step it reads at most the file it lands in (skipping
within it), never the records of the steps before, and yields the batches an
uninterrupted run yields there. The files' record counts are counted once and kept."""

import itertools
import shutil

import numpy as np
import pytest
import tensorflow as tf

from bert_jax.data import tfrecord_index, tfrecords
from tests.data.test_tfrecord_hosts import PRED, SEQ, _ids, _write

SIZES = [37, 41, 29, 50]  # 2 streams (batch 2) of 2 files: 66 and 91 records an epoch


def _batches(pattern: str, steps: int, start: int, cache: str, batch: int = 2, **kw) -> list:
    it = tfrecords.create_iterator(
        pattern, global_batch_size=batch, max_seq_length=SEQ, max_predictions_per_seq=PRED, seed=3,
        start_step=start, process_index=0, process_count=1, shuffle_buffer=16, cache_dir=cache, **kw,
    )  # fmt: skip
    return [_ids(b) for b in itertools.islice(it, steps)]


@pytest.fixture
def counted_reads(monkeypatch) -> list[int]:
    """Every record `tfrecords` reads, counted (a wrapped reader)."""
    reads: list[int] = []
    real = tfrecords.read_records

    def one(x):
        reads.append(1)
        return x

    def counting(tf_module, path, remote):
        records = real(tf_module, path, remote)
        return records.map(lambda r: tf.ensure_shape(tf.numpy_function(one, [r], tf.string), []))

    monkeypatch.setattr(tfrecords, "read_records", counting)
    monkeypatch.setattr(tfrecords, "BLOCK_RECORDS", 1)  # one batch per block: little read ahead
    return reads


def test_a_late_resume_reads_one_file_at_most_and_yields_the_same_batches(tmp_path, counted_reads) -> None:
    pattern = _write(tmp_path / "data", SIZES)
    cache = str(tmp_path / "cache")
    start = 500  # epoch 7 of stream 0, epoch 5 of stream 1
    whole = _batches(pattern, start + 4, 0, cache)
    assert len(counted_reads) >= 2 * (start + 4)  # from step 0: every record since
    tfrecord_index.record_counts(tfrecords.list_files(pattern), cache)  # the index, beforehand
    counted_reads.clear()
    resumed = _batches(pattern, 4, start, cache)
    assert resumed == whole[start:]
    # Per stream: the records before the window in the file it lands in, the window (8),
    # and what tf.data reads ahead; 1,000 records were before the resume point.
    assert len(counted_reads) <= max(SIZES) + 2 * (8 + 8), len(counted_reads)


def test_epochs_reshuffle_and_every_record_comes_once_an_epoch(tmp_path) -> None:
    pattern = _write(tmp_path, [16, 16])  # 2 streams of one file: 16 steps an epoch
    got = _batches(pattern, 48, 0, str(tmp_path / "cache"))
    epochs = [sorted(i for b in got[e * 16 : (e + 1) * 16] for i in b) for e in range(3)]
    assert epochs[0] == epochs[1] == epochs[2] == [*range(16), *range(1000, 1016)]
    assert got[:16] != got[16:32]
    for start in (5, 16, 37):  # within, at and after an epoch's end
        assert _batches(pattern, 3, start, str(tmp_path / "cache")) == got[start : start + 3]


def test_the_counts_are_kept_and_a_changed_file_is_counted_again(tmp_path, monkeypatch, capsys) -> None:
    pattern = _write(tmp_path / "data", SIZES)
    cache = str(tmp_path / "cache")
    first = _batches(pattern, 2, 300, cache)
    out = capsys.readouterr().out
    assert "counting the records of 4 TFRecord file(s)" in out and "tfrecord-counts.json" in out
    real = tfrecord_index.count_records
    monkeypatch.setattr(tfrecord_index, "count_records", lambda path: pytest.fail(f"counted {path}"))
    assert _batches(pattern, 2, 300, cache) == first
    assert "counting" not in capsys.readouterr().out
    _write(tmp_path / "new", [*SIZES[:3], 60])
    last = "data-00003-of-00004.tfrecord"
    shutil.copyfile(tmp_path / "new" / last, tmp_path / "data" / last)  # rewritten, longer
    seen = []
    monkeypatch.setattr(tfrecord_index, "count_records", lambda path: seen.append(path) or real(path))
    _batches(pattern, 2, 300, cache)
    assert [p.rsplit("/", 1)[1] for p in seen] == [last]


def test_seek_lands_where_enumerating_the_stream_does() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        counts = rng.integers(0, 9, int(rng.integers(1, 5))).tolist()
        if not sum(counts):
            continue
        window = int(rng.integers(1, 5))
        orders = {e: rng.permutation(len(counts)) for e in range(4)}
        where = [
            (e, p, j, o)
            for e in range(4)
            for p, f in enumerate(orders[e])
            for w in range(-(-counts[f] // window))
            for j, o in [(w, o) for o in range(min(window, counts[f] - w * window))]
        ]
        for record, expected in enumerate(where):
            start = tfrecord_index.seek(record, counts, orders.__getitem__, window)
            assert start.as_list() == list(expected), (counts, window, record)
