"""Prepared pre-training data: the on-disk format, its metadata, and the random-access reader.

A prepared folder (made by `bert-jax prepare-data`, or in the cache for the built-in
sources) holds unmasked instances, one shard per input (or part of a large input)::

    shard-00000-of-00040.train.tokens   the training documents' tokens, each document once
    shard-00000-of-00040.train.index    one fixed-width entry per instance
    shard-00000-of-00040.eval.tokens    the held-out documents' (may be empty)
    shard-00000-of-00040.eval.index
    shard-00000-of-00040.json           the shard's counts, written once its files are in place
    metadata.json                       written when every shard is: flags, vocab hash, counts

An instance is ``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]`` where A and B are spans of
the documents' tokens, so its index entry (`INDEX_DTYPE`, 24 bytes) is where A and B start
in ``.tokens`` (uint16 when the vocabulary fits, else int32), their lengths and the NotNext
label. The ``dupe_factor`` pairings of the same documents share their tokens: ~3 GiB per
billion tokens at ``dupe_factor=5`` (2 bytes per token once, 24 bytes per instance),
where storing every instance's tokens took ~15 GiB. Rows that are not spans of one
document (FULL-SENTENCES rows join several) keep their tokens in ``.tokens`` as one span.
Reading instance ``i`` is three ``pread``s (its entry at ``24 * i``, then A and B): random
access with no memory map, so host memory stays flat whatever the corpus size
(bench/pipeline_scale.py); a folder in a bucket is read the same way by ranged reads
(`remote_prepared`). Opening a split starts reading its files ahead into the page
cache in the background (`page_cache`, within a budget), so a cold cache (a fresh VM)
costs large sequential reads, not one disk wait per ``pread``
(bench/reader_cold_cache.py). Folders of format 1 (every instance's tokens in a fixed-width
record, ``.bin``) are still read.
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from bert_jax.data import page_cache

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
METADATA = "metadata.json"
SPLITS = ("train", "eval")
# One instance: A's and B's start in the shard's tokens, their lengths (B's 0 for a single
# segment), the NotNext label.
INDEX_DTYPE = np.dtype(
    [("a", "<i8"), ("b", "<i8"), ("a_len", "<u2"), ("b_len", "<u2"), ("label", "u1"), ("pad", "V3")]
)


class PreparedDataError(ValueError):
    """A prepared folder that cannot be used as it is (the message says why)."""


class NoHeldOutData(PreparedDataError):
    """A prepared folder with no held-out instances: a run trains without evaluation."""


def shard_stem(index: int, count: int) -> str:
    return f"shard-{index:05d}-of-{count:05d}"


def record_width(max_seq_length: int) -> int:
    return max_seq_length + 3


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 2**16 else np.dtype("<i4")


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def encode(instances: list, max_seq_length: int, pad_id: int, dtype: np.dtype) -> np.ndarray:
    """Instances (`pretraining_examples.Instance`) → records ``[n, max_seq_length + 3]``."""
    out = np.full((len(instances), record_width(max_seq_length)), pad_id, dtype)
    if not instances:
        return out
    lengths = np.array([len(i.tokens) for i in instances])
    filled = np.arange(max_seq_length)[None] < lengths[:, None]
    out[:, :max_seq_length][filled] = np.concatenate([i.tokens for i in instances])
    out[:, -3] = lengths
    out[:, -2] = [i.num_a for i in instances]  # [CLS] A [SEP]
    out[:, -1] = [i.is_random_next for i in instances]
    return out


def decode(records: np.ndarray, max_seq_length: int) -> dict[str, np.ndarray]:
    """Records → unmasked features: input_ids, input_mask, segment_ids, next_sentence_labels."""
    s = max_seq_length
    lengths = records[:, s].astype(np.int32)[:, None]
    first = records[:, s + 1].astype(np.int32)[:, None]
    pos = np.arange(s, dtype=np.int32)[None]
    mask = (pos < lengths).astype(np.int32)
    return {
        "input_ids": records[:, :s].astype(np.int32) * mask,
        "input_mask": mask,
        "segment_ids": ((pos >= first) & (mask > 0)).astype(np.int32),
        "next_sentence_labels": records[:, s + 2].astype(np.int32),
    }


def read_metadata(directory: str) -> dict:
    path = os.path.join(directory, METADATA)
    if not os.path.isdir(directory):
        raise PreparedDataError(f"prepared data folder {directory} does not exist")
    if not os.path.exists(path):
        done = [n for n in os.listdir(directory) if n.startswith("shard-") and n.endswith(".json")]
        if done:
            total = done[0].split("-of-")[1].split(".")[0]
            raise PreparedDataError(
                f"{directory}: unfinished preparation ({len(done)} of {int(total)} shards done, "
                "no metadata.json): rerun `bert-jax prepare-data` with the same flags to finish it"
            )
        raise PreparedDataError(f"{directory} is not a prepared data folder (no {METADATA})")
    with open(path) as f:
        meta = json.load(f)
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise PreparedDataError(
            f"{path}: format version {meta.get('format_version')}, expected one of {READABLE_VERSIONS}"
        )
    return meta


class SplitWriter:
    """Writes one split of one shard: its documents' tokens once, then its instances'
    index entries (to temporary names; `close` moves both into place). As a context
    manager it closes on success and, on an error, removes its temporary files."""

    def __init__(self, prefix: str, dtype: np.dtype, temp_path) -> None:
        self.final = (f"{prefix}.tokens", f"{prefix}.index")
        self.temp = tuple(temp_path(p) for p in self.final)
        self.tokens, self.index = (open(p, "wb") for p in self.temp)
        self.dtype, self.written = dtype, 0
        self.count = 0

    def add_documents(self, docs: list) -> None:
        """The split's documents, in order: their tokens are what instances' pieces index."""
        flat = [t for d in docs for s in d for t in s]
        self._tokens(np.asarray(flat, self.dtype))

    def _tokens(self, tokens: np.ndarray) -> int:
        start = self.written
        tokens.astype(self.dtype).tofile(self.tokens)
        self.written += len(tokens)
        return start

    def add_instances(self, instances: list) -> None:
        """Index entries of the instances, in order (a row that is not a span of the
        documents has its tokens added as one)."""
        entries = np.zeros(len(instances), INDEX_DTYPE)
        pieces = [
            inst.pieces or ((self._tokens(inst.tokens[1:-1]), len(inst.tokens) - 2),) for inst in instances
        ]
        entries["a"] = [p[0][0] for p in pieces]
        entries["a_len"] = [p[0][1] for p in pieces]
        entries["b"] = [p[1][0] if len(p) > 1 else 0 for p in pieces]
        entries["b_len"] = [p[1][1] if len(p) > 1 else 0 for p in pieces]
        entries["label"] = [inst.is_random_next for inst in instances]
        entries.tofile(self.index)
        self.count += len(instances)

    def close(self) -> None:
        for f in (self.tokens, self.index):
            f.close()
        for tmp, final in zip(self.temp, self.final, strict=True):
            os.replace(tmp, final)

    def abort(self) -> None:
        """Closes and removes the temporary files (a shard that failed leaves nothing)."""
        for f, tmp in zip((self.tokens, self.index), self.temp, strict=True):
            f.close()
            if os.path.exists(tmp):
                os.remove(tmp)

    def __enter__(self) -> SplitWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def check_compatible(
    meta: dict,
    directory: str,
    *,
    vocab_file: str,
    max_seq_length: int,
    nsp: bool,
    do_lower_case: bool,
    full_sentences: bool = False,
) -> None:
    """Refuses a prepared folder made for another vocabulary, length or objective."""
    where = os.path.join(directory, METADATA)
    flags = meta["flags"]
    if flags["max_seq_length"] != max_seq_length:
        raise PreparedDataError(
            f"{where}: prepared for max_seq_length={flags['max_seq_length']}, the run uses "
            f"{max_seq_length} (prepare one folder per sequence length)"
        )
    digest = file_sha256(vocab_file)
    if meta["vocab_sha256"] != digest:
        raise PreparedDataError(
            f"{where}: prepared with another vocabulary (sha256 {meta['vocab_sha256'][:12]}…, "
            f"the run's {vocab_file} is {digest[:12]}…)"
        )
    if bool(flags["do_lower_case"]) != bool(do_lower_case):
        raise PreparedDataError(
            f"{where}: prepared with do_lower_case={flags['do_lower_case']}, the run uses {do_lower_case}"
        )
    if bool(flags["nsp"]) != bool(nsp):
        raise PreparedDataError(
            f"{where}: prepared with nsp={flags['nsp']} (sentence pairs {'on' if flags['nsp'] else 'off'}), "
            f"the run sets data.nsp={nsp}"
        )
    if bool(flags.get("full_sentences", False)) != bool(full_sentences):
        raise PreparedDataError(
            f"{where}: prepared with full_sentences={flags.get('full_sentences', False)}, "
            f"the run sets data.full_sentences={full_sentences}"
        )


class PreparedSet:
    """One split of a prepared folder, read by example id (``[0, size)``).

    Opening reads the split's files ahead into the page cache (index files first) when
    they fit `preload_bytes` (default: half the memory available; 0: never)."""

    def __init__(self, directory: str, split: str = "train", preload_bytes: int | None = None) -> None:
        if split not in SPLITS:
            raise ValueError(f"split {split!r}: train or eval")
        self.directory, self.split = directory, split
        self.meta = self._metadata(directory)
        self.version = int(self.meta["format_version"])
        self.max_seq_length = int(self.meta["flags"]["max_seq_length"])
        self.dtype = np.dtype(self.meta["dtype"])
        self.entry_bytes = (
            record_width(self.max_seq_length) * self.dtype.itemsize
            if self.version == 1
            else INDEX_DTYPE.itemsize
        )
        special = self.meta.get("special", {})
        self.cls, self.sep = special.get("cls", 0), special.get("sep", 0)
        self.paths, self.token_paths, counts = [], [], []
        for shard in self.meta["shards"]:
            count = int(shard[split])
            stem = os.path.join(directory, f"{shard['stem']}.{split}")
            path = f"{stem}.bin" if self.version == 1 else f"{stem}.index"
            _check_size(path, count * self.entry_bytes, self._file_size(path))
            if self.version > 1:
                tokens = f"{stem}.tokens"
                _check_size(
                    tokens, int(shard[f"{split}_tokens"]) * self.dtype.itemsize, self._file_size(tokens)
                )
            self.paths.append(path)
            self.token_paths.append(f"{stem}.tokens")
            counts.append(count)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.size = int(self.starts[-1])
        self._fds: dict[str, int] = {}
        budget = page_cache.default_budget() if preload_bytes is None else preload_bytes
        ahead = self.paths + (self.token_paths if self.version > 1 else [])
        self.preloading = self._warm(ahead, budget, f"{directory} ({split} split)")

    # Where the files are read from: local files here; `remote_prepared` reads a bucket's.
    def _metadata(self, directory: str) -> dict:
        return read_metadata(directory)

    def _file_size(self, path: str) -> int:
        """The file's size in bytes (-1: missing)."""
        return os.path.getsize(path) if os.path.exists(path) else -1

    def _warm(self, paths: list[str], budget: int, what: str):
        return page_cache.warm(paths, budget_bytes=budget, what=what)

    def _preads(self, paths: list[str], sizes: list[int], offsets: list[int]) -> list[bytes]:
        """``sizes[i]`` bytes of ``paths[i]`` from ``offsets[i]``, for every i."""
        pread = os.pread
        return [pread(self._fd(p), n, o) for p, n, o in zip(paths, sizes, offsets, strict=True)]

    def _fd(self, path: str) -> int:
        if path not in self._fds:
            self._fds[path] = os.open(path, os.O_RDONLY)
        return self._fds[path]

    def entries(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard of each id, its raw entry: a record of format 1, an index entry of 2)."""
        ids = np.asarray(ids, np.int64)
        shards = np.searchsorted(self.starts, ids, side="right") - 1
        offsets = (ids - self.starts[shards]) * self.entry_bytes
        n, paths = self.entry_bytes, [self.paths[s] for s in shards.tolist()]
        parts = self._preads(paths, [n] * len(paths), offsets.tolist())
        raw = b"".join(parts)
        if len(raw) != n * len(ids):
            _short_read(paths, parts, [n] * len(parts))
        if self.version == 1:
            return shards, np.frombuffer(raw, self.dtype).reshape(len(ids), -1)
        return shards, np.frombuffer(raw, INDEX_DTYPE)

    def read(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Unmasked features of the given example ids."""
        shards, entries = self.entries(ids)
        if self.version == 1:
            return decode(entries, self.max_seq_length)
        a_len, b_len = entries["a_len"].astype(np.int64), entries["b_len"].astype(np.int64)
        tokens = self._segments(shards, entries["a"], a_len, entries["b"], b_len)
        n, rows = len(shards), np.arange(len(shards))
        # [CLS] A [SEP] (B [SEP]): A's tokens go to columns 1..., B's to a_len + 2...
        pieces = np.stack([a_len, b_len], 1).ravel()
        piece = np.repeat(np.arange(2 * n), pieces)
        within = np.arange(len(tokens)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        column = np.stack([np.ones(n, np.int64), a_len + 2], 1).ravel()[piece] + within
        ids_out = np.zeros((n, self.max_seq_length), np.int32)
        ids_out[piece // 2, column] = tokens
        ids_out[:, 0] = self.cls
        ids_out[rows, a_len + 1] = self.sep
        two = b_len > 0
        ids_out[rows[two], (a_len + 2 + b_len)[two]] = self.sep
        lengths, first = a_len + 2 + np.where(two, b_len + 1, 0), a_len + 2
        pos = np.arange(self.max_seq_length)[None]
        mask = (pos < lengths[:, None]).astype(np.int32)
        return {
            "input_ids": ids_out,
            "input_mask": mask,
            "segment_ids": ((pos >= first[:, None]) & (mask > 0)).astype(np.int32),
            "next_sentence_labels": entries["label"].astype(np.int32),
        }

    def _segments(self, shards, a, a_len, b, b_len) -> np.ndarray:
        """The tokens of each row's A, then its B (if any), row after row."""
        item = self.dtype.itemsize
        paths, offsets, wanted = [], [], []
        rows = zip(shards.tolist(), a.tolist(), a_len.tolist(), b.tolist(), b_len.tolist(), strict=True)
        for s, a_at, a_n, b_at, b_n in rows:
            path = self.token_paths[s]
            paths.append(path)
            offsets.append(a_at * item)
            wanted.append(a_n * item)
            if b_n:
                paths.append(path)
                offsets.append(b_at * item)
                wanted.append(b_n * item)
        parts = self._preads(paths, wanted, offsets)
        raw = b"".join(parts)
        if len(raw) != sum(wanted):
            _short_read(paths, parts, wanted)
        return np.frombuffer(raw, self.dtype)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _short_read(paths: list[str], parts: list[bytes], wanted: list[int]) -> None:
    """Names the first file whose read came back short."""
    bad = next(p for p, part, w in zip(paths, parts, wanted, strict=True) if len(part) != w)
    raise PreparedDataError(f"short read in {bad}: a shard changed while training")


def _check_size(path: str, expected: int, size: int) -> None:
    if size != expected:
        state = "missing" if size < 0 else f"{size} bytes, expected {expected}"
        raise PreparedDataError(f"{path} is truncated or damaged ({state}): prepare it again")
