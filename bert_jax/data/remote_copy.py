"""Prepared folders in a bucket (``gs://...``, or any file system `tf.io.gfile` reads): a
local copy, made once, that training reads as any prepared folder.

Why a copy rather than reads from the bucket: training reads each instance at a random
position (the O(1) resumable order), a few hundred bytes at a time; from a bucket that is
a round trip per instance (tens of milliseconds), three orders of magnitude below what a
TPU host needs. A prepared folder stores each document once (~3 GiB per billion tokens at
``dupe_factor=5``, `records`), so BERT's corpus at both sequence lengths (~25 GiB) fits on
a TPU VM's 100 GB boot disk: every host copies it once, in a few minutes, and a rerun
finds the copy (checked against the bucket's metadata and every file's size). The copy is
written file by file under temporary names and ``metadata.json`` last, so an interrupted
copy resumes and is never read half-made.

A bucket path that cannot be read (no credentials, no network, no such folder) fails at
start with one line naming it; a folder whose upload is unfinished (no ``metadata.json``)
is refused as an unfinished preparation is.
"""

from __future__ import annotations

import hashlib
import json
import os

from bert_jax.data.records import METADATA
from bert_jax.storage import atomic_files, tensorflow_runtime


def is_remote(path: str) -> bool:
    return "://" in path


class RemoteReadError(OSError):
    """A bucket path that cannot be read (the message names it and says why)."""


def _gfile():
    return tensorflow_runtime.tensorflow().io.gfile


def _failure(url: str, error: Exception) -> RemoteReadError:
    """tf.errors.*: not found, permission denied, no network or no credentials."""
    return RemoteReadError(f"cannot read {url}: {type(error).__name__}: {' '.join(str(error).split())[:300]}")


def _read(url: str) -> bytes:
    try:
        with tensorflow_runtime.quiet_stderr(), _gfile().GFile(url, "rb") as f:
            return f.read()
    except Exception as e:
        raise _failure(url, e) from None


def _exists(url: str) -> bool:
    try:
        with tensorflow_runtime.quiet_stderr():
            return bool(_gfile().exists(url))
    except Exception as e:
        raise _failure(url, e) from None


def local_copy(url: str, cache_root: str) -> str:
    """The local copy of the prepared folder at `url` (made now if it is missing or stale)."""
    url = url.rstrip("/")
    if not _exists(f"{url}/{METADATA}"):
        if not _exists(url):
            raise RemoteReadError(f"cannot read {url}: no such folder")
        raise RemoteReadError(
            f"{url}: unfinished preparation or upload (no {METADATA}): finish `bert-jax prepare-data` "
            "or the copy to the bucket, whose metadata.json comes last"
        )
    raw = _read(f"{url}/{METADATA}")
    meta = json.loads(raw)
    name = hashlib.sha256(url.encode()).hexdigest()[:16] + "-" + os.path.basename(url)
    local = os.path.join(cache_root, "remote", name)
    path = os.path.join(local, METADATA)
    if os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == raw:
                return local
    files = _listed_files(meta)
    total = sum(size for _, size in files)
    print(f"copying {url} ({total / 2**30:.2f} GiB, {len(files)} files) once into {local}", flush=True)
    os.makedirs(local, exist_ok=True)
    for file, size in files:
        dst = os.path.join(local, file)
        if not (os.path.exists(dst) and os.path.getsize(dst) == size):  # else: copied by an earlier run
            _copy(f"{url}/{file}", dst, size)
    atomic_files.write_text(path, raw.decode())
    return local


def _copy(src: str, dst: str, size: int, block: int = 16 << 20) -> None:
    """One file, in blocks (memory: one block), to a temporary name, then into place."""
    tmp = atomic_files.temp_path(dst)
    written = 0
    try:
        with tensorflow_runtime.quiet_stderr(), _gfile().GFile(src, "rb") as f, open(tmp, "wb") as out:
            while chunk := f.read(block):
                out.write(chunk)
                written += len(chunk)
    except Exception as e:
        raise _failure(src, e) from None
    if written != size:
        os.remove(tmp)
        raise RemoteReadError(f"{src}: {written} bytes, its metadata.json says {size}: upload it again")
    os.replace(tmp, dst)


def _listed_files(meta: dict) -> list[tuple[str, int]]:
    """Every file of a prepared folder and its size, as its metadata lists them."""
    if any("files" not in shard for shard in meta["shards"]):
        raise RemoteReadError(
            "a prepared folder of format 1 is read from local disk only: copy it there, or prepare it again"
        )
    return [(name, int(size)) for shard in meta["shards"] for name, size in sorted(shard["files"].items())]
