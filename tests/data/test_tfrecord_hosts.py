"""TFRecord reading on pods: each host reads only its rows, and the hosts' rows are the
single-host global batches; files in a bucket (the GCS emulator) read as local ones,
through the path layer."""

import itertools
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from bert_jax.data import tfrecord_reader, tfrecords
from bert_jax.storage import files
from tests.helpers import prepared_data

SEQ, PRED = 8, 2


def _write(folder: Path, sizes: list[int]) -> str:
    """TFRecord files of the original layout; record j of file f has input_ids[0] = 1000 f + j."""
    folder.mkdir(parents=True, exist_ok=True)
    for f, size in enumerate(sizes):
        with tf.io.TFRecordWriter(str(folder / f"data-{f:05d}-of-{len(sizes):05d}.tfrecord")) as w:
            for j in range(size):
                ids = np.full(SEQ, 1000 * f + j)
                features = dict(
                    input_ids=ids, input_mask=np.ones(SEQ, int), segment_ids=np.zeros(SEQ, int),
                    masked_lm_positions=np.arange(PRED), masked_lm_ids=ids[:PRED],
                    masked_lm_weights=np.ones(PRED), next_sentence_labels=np.array([j % 2]),
                )  # fmt: skip
                w.write(tfrecords.serialize(features))
    return str(folder / "data-*.tfrecord")


def _batches(pattern: str, batch: int, steps: int, p: int = 0, n: int = 1, start: int = 0, **kw) -> list:
    it = tfrecords.create_iterator(
        pattern, global_batch_size=batch, max_seq_length=SEQ, max_predictions_per_seq=PRED, seed=7,
        start_step=start, process_index=p, process_count=n, **kw,
    )  # fmt: skip
    return list(itertools.islice(it, steps))


def _ids(batch: dict) -> list[int]:
    return batch["input_ids"][:, 0].tolist()


@pytest.mark.parametrize(
    "files, batch, hosts",
    [(2, 8, 2), (4, 8, 4), (3, 6, 2), (5, 12, 4), (1, 8, 2)],  # exact, exact, straddling x2, shared file
)
def test_hosts_rows_are_disjoint_and_make_the_single_host_batches(tmp_path, files, batch, hosts) -> None:
    pattern = _write(tmp_path, [40 + 3 * f for f in range(files)])
    one = _batches(pattern, batch, 4)
    for step, b in enumerate(one):
        assert b["input_ids"].shape == (batch, SEQ) and len(set(_ids(b))) == batch, step
    parts = [_batches(pattern, batch, 4, p, hosts) for p in range(hosts)]
    for step in range(4):
        rows = [_ids(parts[p][step]) for p in range(hosts)]
        assert all(len(r) == batch // hosts for r in rows)
        assert len(set().union(*rows)) == batch  # disjoint
        for key in one[step]:
            together = np.concatenate([parts[p][step][key] for p in range(hosts)])
            np.testing.assert_array_equal(together, one[step][key], err_msg=f"{key} at step {step}")
    resumed = [_batches(pattern, batch, 2, p, hosts, start=2) for p in range(hosts)]
    for step in (2, 3):
        assert [i for p in range(hosts) for i in _ids(resumed[p][step - 2])] == _ids(one[step])


def test_the_streams_cover_each_hosts_rows_exactly() -> None:
    rng = np.random.default_rng(0)
    for _ in range(300):
        hosts = int(rng.choice([1, 2, 4, 8, 16, 64]))
        batch = hosts * int(rng.integers(1, 40))
        rows = tfrecords.stream_rows(int(rng.integers(1, 3000)), batch)
        assert rows[0][0] == 0 and rows[-1][1] == batch
        assert all(a < b for a, b in rows) and all(r[1] == s[0] for r, s in itertools.pairwise(rows))
        for p in range(hosts):
            kept = [
                rows[s][0] + i
                for s, first, stop in tfrecords.host_streams(rows, batch, p, hosts)
                for i in range(first, stop)
            ]
            local = batch // hosts
            assert kept == list(range(p * local, (p + 1) * local))
    # With a number of files divisible by the hosts, a host opens only streams it keeps whole.
    rows = tfrecords.stream_rows(64, 4096)
    for p in range(8):
        for s, first, stop in tfrecords.host_streams(rows, 4096, p, 8):
            assert (first, stop) == (0, rows[s][1] - rows[s][0])


def test_a_host_never_opens_another_hosts_files(tmp_path) -> None:
    pattern = _write(tmp_path / "good", [30, 30])
    host0 = _batches(pattern, 8, 3, 0, 2)
    bad = tmp_path / "bad"  # the same files, host 1's (the second) damaged
    bad.mkdir()
    for f in sorted((tmp_path / "good").iterdir()):
        (bad / f.name).write_bytes(f.read_bytes())
    damaged = sorted(bad.iterdir())[1]
    damaged.write_bytes(b"\x07" * damaged.stat().st_size)
    again = _batches(str(bad / "data-*.tfrecord"), 8, 3, 0, 2)
    assert [_ids(b) for b in again] == [_ids(b) for b in host0]
    assert all(i < 1000 for b in again for i in _ids(b))  # all from the first file
    with pytest.raises(tf.errors.DataLossError):
        _batches(str(bad / "data-*.tfrecord"), 8, 3, 1, 2)


def test_each_stream_visits_its_records_once_per_epoch_then_reshuffles(tmp_path) -> None:
    pattern = _write(tmp_path, [16, 16])  # 2 streams of 2 rows per batch: 8 steps an epoch
    batches = _batches(pattern, 4, 16)
    first = sorted(i for b in batches[:8] for i in _ids(b))
    second = [i for b in batches[8:] for i in _ids(b)]
    assert first == [*range(16), *range(1000, 1016)]
    assert sorted(second) == first and second != [i for b in batches[:8] for i in _ids(b)]
    assert [_ids(b) for b in batches] == [_ids(b) for b in _batches(pattern, 4, 16)]  # seeded
    other = tfrecords.create_iterator(
        pattern, global_batch_size=4, max_seq_length=SEQ, max_predictions_per_seq=PRED, seed=8,
        start_step=0, process_index=0, process_count=1,
    )  # fmt: skip
    assert _ids(next(other)) + _ids(next(other)) != _ids(batches[0]) + _ids(batches[1])


def test_files_in_a_bucket_read_as_the_local_ones_through_the_path_layer(tmp_path) -> None:
    """TFRecords on the GCS emulator, through the client a TPU VM uses: the same training
    batches (a second host's and a resume's too), the same evaluation pass."""
    pattern = _write(tmp_path / "data", [20, 23])
    local = sorted(str(p) for p in (tmp_path / "data").glob("data-*.tfrecord"))
    with prepared_data.bucket(tmp_path / "gcs") as gs:
        for path in local:
            files.write_bytes_remote(f"{gs}/tf/{Path(path).name}", Path(path).read_bytes())
        remote = f"{gs}/tf/data-*.tfrecord"
        assert tfrecords.list_files(remote) == [f"{gs}/tf/{Path(p).name}" for p in local]
        cache = str(tmp_path / "cache")
        got = [
            _batches(remote, 8, 3),
            _batches(remote, 8, 3, p=1, n=2),
            _batches(remote, 8, 3, start=9, cache_dir=cache),
            _batches(remote, 4, 20, repeat=False),
        ]
        with pytest.raises(FileNotFoundError, match=f"no TFRecord files match '{gs}/none-"):
            tfrecords.list_files(f"{gs}/none-*")
    want = [
        _batches(pattern, 8, 3),
        _batches(pattern, 8, 3, p=1, n=2),
        _batches(pattern, 8, 3, start=9, cache_dir=str(tmp_path / "cache-local")),
        _batches(pattern, 4, 20, repeat=False),
    ]
    for g, w in zip(got, want, strict=True):
        assert [_ids(b) for b in g] == [_ids(b) for b in w]
        for a, b in zip(g, w, strict=True):
            for key in b:
                np.testing.assert_array_equal(a[key], b[key], err_msg=key)
    # Comma-separated patterns, a file:// one included; a file matched twice is read once.
    both = tfrecords.list_files(f"file://{tmp_path}/data/data-00000-*.tfrecord, {pattern},{local[1]}")
    assert both == local


def test_a_damaged_record_in_a_bucket_is_named(tmp_path) -> None:
    _write(tmp_path / "data", [5])
    (path,) = (tmp_path / "data").glob("data-*.tfrecord")
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF  # inside the first record's data
    with prepared_data.bucket(tmp_path / "gcs") as gs:
        files.write_bytes_remote(f"{gs}/bad/{path.name}", bytes(data))
        files.write_bytes_remote(f"{gs}/cut/{path.name}", path.read_bytes()[:-7])
        with pytest.raises(
            tfrecord_reader.DamagedRecordError, match=r"bad/data-00000-of-00001.tfrecord: record 0 fails"
        ):
            list(tfrecord_reader.records(f"{gs}/bad/{path.name}"))
        with pytest.raises(tfrecord_reader.DamagedRecordError, match=r"record 4 is cut short"):
            tfrecord_reader.count(f"{gs}/cut/{path.name}")
        assert tfrecord_reader.count(f"{gs}/bad/{path.name}") == 5  # the framing is whole


def test_eval_is_one_pass_in_file_order_split_between_hosts(tmp_path) -> None:
    pattern = _write(tmp_path, [10, 7])
    one = _batches(pattern, 4, 10, repeat=False)
    assert [i for b in one for i in _ids(b)] == [*range(10), *range(1000, 1006)]  # last 1 dropped
    halves = [_batches(pattern, 4, 10, p, 2, repeat=False) for p in range(2)]
    assert [_ids(a) + _ids(b) for a, b in zip(*halves, strict=True)] == [_ids(b) for b in one]


def test_empty_files_and_shared_files_are_reported_in_one_line(tmp_path, capsys) -> None:
    pattern = _write(tmp_path, [12, 0, 12])
    with pytest.raises(ValueError, match=r"data-00001-of-00003\.tfrecord hold no records"):
        _batches(pattern, 3, 2)
    pattern = _write(tmp_path / "one", [40])
    _batches(pattern, 8, 1, 0, 2)
    out = capsys.readouterr().out.strip().splitlines()
    assert out == [
        "warning: 1 TFRecord files for 2 hosts: a host reads up to 8 records per step for its 4 "
        "(a number of files divisible by 2 reads exactly each host's rows)"
    ]


def test_the_reading_block_does_not_change_the_batches(tmp_path, monkeypatch) -> None:
    pattern = _write(tmp_path, [30, 31, 32])
    blocked = [_ids(b) for b in _batches(pattern, 9, 12)]  # 3 rows per stream: 85 batches a block
    monkeypatch.setattr(tfrecords, "BLOCK_RECORDS", 1)  # one batch at a time
    assert [_ids(b) for b in _batches(pattern, 9, 12)] == blocked
    monkeypatch.setattr(tfrecords, "BLOCK_RECORDS", 7)  # two batches at a time
    halves = [[_ids(b) for b in _batches(pattern, 9, 12, p, 3)] for p in range(3)]
    assert [a + b + c for a, b, c in zip(*halves, strict=True)] == blocked
