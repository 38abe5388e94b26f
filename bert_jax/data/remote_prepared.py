"""One split of a prepared folder in a bucket, read in place: ranged reads, many in flight.

`records.PreparedSet` reads an instance by position (its index entry, then its tokens);
here each of those reads is a ranged read of the bucket's file (through TensorFlow's file
system layer, as `remote_copy`: ``gs://`` and any scheme TensorFlow reads), issued
together for a whole batch from a pool of threads, so a batch costs a few round trips,
not one per read. Each thread keeps a few open streams with a small buffer (`BUFFER`: a
read fetches about what it asks for, not TensorFlow's 512 KiB). A file the background copy
(`remote_copy`) has finished is read from local disk instead, from the next batch on; the
first read starts that copy. Nothing is read ahead into the page cache (the files are not
local yet), and sizes are checked against the folder's metadata, which lists every file
(the copy counts each file's bytes again).
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import threading

from bert_jax.data import records, remote_copy

READERS = 32  # ranged reads in flight per process
BUFFER = 4096  # bytes a ranged read fetches at least (an instance's span is ~1 KiB)
STREAMS = 16  # open streams a reader thread keeps (the least recently used closed first)


class RemotePreparedSet(records.PreparedSet):
    """`records.PreparedSet` of a `remote_copy.RemoteFolder` (paths are its local ones)."""

    def __init__(self, folder: remote_copy.RemoteFolder, split: str = "train") -> None:
        self.folder = folder
        super().__init__(folder.local, split, preload_bytes=0)

    def _metadata(self, directory: str) -> dict:
        return self.folder.meta

    def _file_size(self, path: str) -> int:
        return self.folder.size(path)

    def _warm(self, paths: list[str], budget: int, what: str):
        return None

    def _preads(self, paths: list[str], sizes: list[int], offsets: list[int]) -> list[bytes]:
        self.folder.start_copy()
        done = self.folder.done
        out: list[bytes] = [b""] * len(paths)
        far = []
        for i, (path, n, offset) in enumerate(zip(paths, sizes, offsets, strict=True)):
            if path in done:
                out[i] = os.pread(self._fd(path), n, offset)
            elif n:
                far.append(i)
        if far:
            urls = [self.folder.remote(paths[i]) for i in far]
            got = _pool().map(ranged_read, urls, [sizes[i] for i in far], [offsets[i] for i in far])
            for i, data in zip(far, got, strict=True):
                out[i] = data
        return out


def ranged_read(url: str, n: int, offset: int) -> bytes:
    """`n` bytes of `url` from `offset`, through this thread's open stream of it."""
    try:
        stream = _stream(url)
        stream.seek(offset)
        return stream.read(n)
    except Exception as e:
        raise remote_copy.read_failure(url, e) from None


_THREAD = threading.local()


def _stream(url: str):
    """This thread's open stream of `url` (`STREAMS` at most, the oldest closed first)."""
    streams = _THREAD.__dict__.setdefault("streams", collections.OrderedDict())
    if url in streams:
        streams.move_to_end(url)
        return streams[url]
    if len(streams) >= STREAMS:
        _, oldest = streams.popitem(last=False)
        getattr(oldest, "close", lambda: None)()
    try:  # a small buffer: TensorFlow's GFile reads 512 KiB for each seek
        from tensorflow.python.lib.io import _pywrap_file_io

        remote_copy.gfile()  # TensorFlow imported as bert_jax imports it
        streams[url] = _pywrap_file_io.BufferedInputStream(url, BUFFER)
    except (ImportError, AttributeError):
        streams[url] = remote_copy.gfile().GFile(url, "rb")
    return streams[url]


_POOL: list[concurrent.futures.ThreadPoolExecutor] = []


def _pool() -> concurrent.futures.ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(concurrent.futures.ThreadPoolExecutor(READERS, thread_name_prefix="bucket-read"))
    return _POOL[0]
