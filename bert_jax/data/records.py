"""Prepared pre-training data: the on-disk format, its metadata, and the random-access reader.

A prepared folder (made by `bert-jax prepare-data`, or in the cache for the built-in
sources) holds unmasked NSP instances, one shard per input file::

    shard-00000-of-00040.train.bin   fixed-width records, little-endian
    shard-00000-of-00040.eval.bin    the held-out documents' instances (may be empty)
    shard-00000-of-00040.json        the shard's counts, written once its records are in place
    metadata.json                    written when every shard is: flags, vocab hash, counts

A record is ``max_seq_length + 3`` integers (uint16 when the vocabulary fits, else
int32): the instance's tokens ``[CLS] A [SEP] B [SEP]`` padded with [PAD], then its
length, the length of ``[CLS] A [SEP]``, and the NotNext label. Fixed width makes record
``i`` of a shard one ``pread`` at ``i * width``: random access with no index and no
memory map (host memory stays flat whatever the corpus size; see bench/pipeline_scale.py).
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

FORMAT_VERSION = 1
METADATA = "metadata.json"
SPLITS = ("train", "eval")


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
    if meta.get("format_version") != FORMAT_VERSION:
        raise PreparedDataError(
            f"{path}: format version {meta.get('format_version')}, expected {FORMAT_VERSION}"
        )
    return meta


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
    """One split of a prepared folder, read by example id (``[0, size)``)."""

    def __init__(self, directory: str, split: str = "train") -> None:
        if split not in SPLITS:
            raise ValueError(f"split {split!r}: train or eval")
        self.directory, self.split = directory, split
        self.meta = read_metadata(directory)
        self.max_seq_length = int(self.meta["flags"]["max_seq_length"])
        self.dtype = np.dtype(self.meta["dtype"])
        self.record_bytes = record_width(self.max_seq_length) * self.dtype.itemsize
        self.paths, counts = [], []
        for shard in self.meta["shards"]:
            path = os.path.join(directory, f"{shard['stem']}.{split}.bin")
            count = int(shard[split])
            size = os.path.getsize(path) if os.path.exists(path) else -1
            if size != count * self.record_bytes:
                state = "missing" if size < 0 else f"{size} bytes, expected {count * self.record_bytes}"
                raise PreparedDataError(f"{path} is truncated or damaged ({state}): prepare it again")
            self.paths.append(path)
            counts.append(count)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.size = int(self.starts[-1])
        self._fds: dict[int, int] = {}

    def _fd(self, shard: int) -> int:
        if shard not in self._fds:
            self._fds[shard] = os.open(self.paths[shard], os.O_RDONLY)
        return self._fds[shard]

    def records(self, ids: np.ndarray) -> np.ndarray:
        """Raw records of the given example ids, in their order."""
        ids = np.asarray(ids, np.int64)
        shards = np.searchsorted(self.starts, ids, side="right") - 1
        offsets = (ids - self.starts[shards]) * self.record_bytes
        n = self.record_bytes
        chunks = [os.pread(self._fd(s), n, o) for s, o in zip(shards.tolist(), offsets.tolist(), strict=True)]
        raw = b"".join(chunks)
        if len(raw) != n * len(ids):
            raise PreparedDataError(f"short read in {self.directory}: a shard changed while training")
        return np.frombuffer(raw, self.dtype).reshape(len(ids), -1)

    def read(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Unmasked features of the given example ids."""
        return decode(self.records(ids), self.max_seq_length)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
