"""The prepared-data reader: the same rows as reading each instance on its own, whatever
the ids, and the split's files read ahead into the page cache at open (within a budget)."""

import os
from pathlib import Path

import numpy as np
import pytest

from bert_jax.data import corpora, prepare, records


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """The Wikipedia excerpt (two input files: two shards) prepared as sentence pairs,
    single segments and FULL-SENTENCES rows."""
    root = tmp_path_factory.mktemp("reader")
    docs = corpora.load_documents("wiki_excerpt")[:60]
    for i in range(2):
        text = "\n\n".join("\n".join(d) for d in docs[i::2]) + "\n"
        (root / f"wiki-{i}.txt").write_text(text)
    inputs = prepare.list_inputs(str(root / "wiki-*.txt"))
    kinds = {
        "pairs": dict(nsp=True),
        "single": dict(nsp=False),
        "full": dict(nsp=False, full_sentences=True),
    }
    out = {}
    for name, flags in kinds.items():
        opts = prepare.Options(max_seq_length=64, dupe_factor=2, random_seed=3, eval_fraction=0.1, **flags)
        prepare.prepare(inputs, str(root / name), opts, progress=False)
        out[name] = root / name
    return out


def _one_by_one(data: records.PreparedSet, ids: np.ndarray) -> dict[str, np.ndarray]:
    """Each instance read on its own from the files, as the format describes it: its
    24-byte index entry, then [CLS] A [SEP] (B [SEP]) from the tokens."""
    s, item = data.max_seq_length, data.dtype.itemsize
    out = {k: np.zeros((len(ids), s), np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    labels = np.zeros(len(ids), np.int32)
    for row, i in enumerate(ids.tolist()):
        shard = int(np.searchsorted(data.starts, i, side="right") - 1)
        with open(data.paths[shard], "rb") as f:
            f.seek((i - int(data.starts[shard])) * records.INDEX_DTYPE.itemsize)
            e = np.frombuffer(f.read(records.INDEX_DTYPE.itemsize), records.INDEX_DTYPE)[0]
        with open(data.token_paths[shard], "rb") as f:

            def span(at: int, n: int) -> list[int]:
                f.seek(at * item)
                return np.frombuffer(f.read(n * item), data.dtype).tolist()

            a = span(int(e["a"]), int(e["a_len"]))
            tokens = [data.cls, *a, data.sep]
            if e["b_len"]:
                tokens += [*span(int(e["b"]), int(e["b_len"])), data.sep]
        n = len(tokens)
        out["input_ids"][row, :n] = tokens
        out["input_mask"][row, :n] = 1
        out["segment_ids"][row, len(a) + 2 : n] = 1
        labels[row] = e["label"]
    return {**out, "next_sentence_labels": labels}


@pytest.mark.parametrize("kind", ["pairs", "single", "full"])
def test_rows_equal_reading_each_instance_on_its_own(folders, kind) -> None:
    for split in ("train", "eval"):
        data = records.PreparedSet(str(folders[kind]), split, preload_bytes=0)
        assert len(data.starts) == 3 and data.size > 0 and data.starts[1] > 0  # two shards
        rng = np.random.default_rng(0)
        cases = [
            np.arange(data.size),  # every instance, both shards, in order
            rng.integers(0, data.size, 300),  # random, repeated, unsorted
            np.array([data.size - 1, 0, int(data.starts[1]), int(data.starts[1]) - 1]),  # the edges
            np.array([], np.int64),
        ]
        for ids in cases:
            got, want = data.read(ids), _one_by_one(data, ids)
            assert set(got) == set(want)
            for key in want:
                assert got[key].dtype == np.int32 and got[key].shape == want[key].shape, key
                np.testing.assert_array_equal(got[key], want[key], err_msg=f"{kind} {split} {key}")
        if kind == "pairs" and split == "train":
            rows = data.read(np.arange(data.size))
            assert rows["next_sentence_labels"].any() and rows["segment_ids"].any()  # B segments read
        data.close()


def test_open_reads_the_split_ahead_index_first_within_the_budget(folders, monkeypatch, capsys) -> None:
    advised = []

    def fake_fadvise(fd: int, offset: int, length: int, advice: int) -> None:
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice))

    monkeypatch.setattr(os, "posix_fadvise", fake_fadvise)
    folder = str(folders["pairs"])
    data = records.PreparedSet(folder, "train", preload_bytes=1 << 30)
    data.preloading.join(timeout=10)
    assert advised == [(p, 0, 0, os.POSIX_FADV_WILLNEED) for p in data.paths + data.token_paths]
    assert all(p.endswith(".train.index") for p in data.paths)
    assert capsys.readouterr().out == ""

    advised.clear()
    total = sum(os.path.getsize(p) for p in data.paths + data.token_paths)
    small = records.PreparedSet(folder, "train", preload_bytes=total - 1)
    assert small.preloading is None and advised == []
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith(f"warning: {folder} (train split): ")
    assert "more than the read-ahead budget" in out[0]
    off = records.PreparedSet(folder, "train", preload_bytes=0)
    assert off.preloading is None and advised == [] and capsys.readouterr().out == ""
    default = records.PreparedSet(folder, "train")  # half the available memory: this folder fits
    default.preloading.join(timeout=10)
    assert len(advised) == 2 * len(default.paths)


def test_a_shard_cut_short_after_opening_is_named(folders, tmp_path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in folders["pairs"].iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    data = records.PreparedSet(str(copy), "train", preload_bytes=0)
    tokens = Path(data.token_paths[1])
    tokens.write_bytes(tokens.read_bytes()[:10])
    bad = r"short read in .*shard-00001-of-00002\.train\.tokens"
    with pytest.raises(records.PreparedDataError, match=bad):
        data.read(np.arange(data.starts[1], data.size))
    data.read(np.arange(0, 5))  # the first shard is intact
