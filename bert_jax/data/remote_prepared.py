"""One split of a prepared folder in a bucket, read in place: ranged reads, many in flight.

`records.PreparedSet` reads an instance by position (its index entry, then its tokens);
here each of those reads is a ranged request to the bucket, through the path layer's
client (`storage.files.read_ranges`: gcsfs, the client of every other ``gs://`` access,
with the same retry policy), issued together for a whole batch, so a batch costs a few
round trips, not one per read. A file the background copy (`remote_copy`) has finished is
read from local disk instead, from the next batch on; the first read starts that copy.
Nothing is read ahead into the page cache (the files are not local yet), and sizes are
checked against the folder's metadata, which lists every file (the copy counts each
file's bytes again).
"""

from __future__ import annotations

import os

from bert_jax.data import records, remote_copy
from bert_jax.storage import files


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
            # The one file read, or the folder: the failed one of several is in the error's text.
            where = urls[0] if len(set(urls)) == 1 else f"{self.folder.url} ({len(set(urls))} of its files)"
            got = remote_copy.reading(
                where, lambda: files.read_ranges(urls, [offsets[i] for i in far], [sizes[i] for i in far])
            )
            for i, data in zip(far, got, strict=True):
                out[i] = data
        return out
