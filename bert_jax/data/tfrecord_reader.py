"""TFRecord files in a bucket, read through the path layer: the records, and their count.

A TFRecord file is a sequence of records, each framed as: its length (uint64, little
endian), the masked CRC-32C of those 8 bytes (uint32), the data, the data's masked CRC-32C.
`tf.data.TFRecordDataset` reads ``gs://`` only through TensorFlow's own client; so that a
bucket is read by one client on every machine (`storage.gcs`: gcsfs, its retry policy,
the client the emulator tests), files in a bucket are read here, streamed through
`storage.files`, and handed to tf.data as a generator (`dataset`); local files stay with
`tf.data.TFRecordDataset`. Both checksums are verified: a damaged file is an error naming
it and the record, never a silently different record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import google_crc32c

from bert_jax.storage import files

_HEADER = struct.Struct("<QI")  # length, its masked CRC
_FOOTER = struct.Struct("<I")
_BLOCK = 8 << 20  # bytes a stream asks the bucket for at a time


class DamagedRecordError(ValueError):
    """A record whose framing or checksum is wrong (a truncated or damaged file)."""


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _frames(path: str, with_data: bool = True) -> Iterator[bytes | None]:
    """Each record of `path` (its bytes, checked; None where `with_data` is off)."""
    with files.open_read(path) as raw:
        f = _Buffered(raw)
        n = 0
        while header := f.read(_HEADER.size):
            if len(header) < _HEADER.size:
                raise DamagedRecordError(f"{path}: record {n} is cut short (a truncated file)")
            length, length_crc = _HEADER.unpack(header)
            if _masked_crc(header[:8]) != length_crc:
                raise DamagedRecordError(f"{path}: record {n}'s length fails its checksum (a damaged file)")
            data, footer = f.read(length), f.read(_FOOTER.size)
            if len(data) < length or len(footer) < _FOOTER.size:
                raise DamagedRecordError(f"{path}: record {n} is cut short (a truncated file)")
            if with_data and _masked_crc(data) != _FOOTER.unpack(footer)[0]:
                raise DamagedRecordError(f"{path}: record {n} fails its checksum (a damaged file)")
            yield data if with_data else None
            n += 1


class _Buffered:
    """Reads of a few bytes served from large reads of the stream below."""

    def __init__(self, raw) -> None:
        self.raw, self.buffer, self.at = raw, b"", 0

    def read(self, n: int) -> bytes:
        if self.at + n > len(self.buffer):
            rest = self.buffer[self.at :]
            more = self.raw.read(max(_BLOCK, n - len(rest)))
            self.buffer, self.at = rest + more, 0
        out = self.buffer[self.at : self.at + n]
        self.at += len(out)
        return out


def records(path: str) -> Iterator[bytes]:
    """The records of one TFRecord file, in order, each checked."""
    yield from _frames(path)


def count(path: str) -> int:
    """The records of one TFRecord file (framing checked, data not)."""
    return sum(1 for _ in _frames(path, with_data=False))


def dataset(tf, path, remote: bool):
    """The records of `path` (a string tensor or str) as a tf.data source: a bucket's
    (`remote`) through the path layer, a local file's through `tf.data.TFRecordDataset`."""
    if not remote:
        return tf.data.TFRecordDataset(path)
    return tf.data.Dataset.from_generator(
        lambda p: records(p.decode() if isinstance(p, bytes) else str(p)),
        output_signature=tf.TensorSpec([], tf.string),
        args=(path,),
    )


def datasets(tf, paths: list[str]):
    """The records of `paths`, one file after another (`dataset` of each)."""
    if not any_remote(paths):
        return tf.data.TFRecordDataset(paths)
    return tf.data.Dataset.from_tensor_slices(paths).flat_map(lambda p: dataset(tf, p, remote=True))


def any_remote(paths: list[str]) -> bool:
    return any(files.is_remote(p) for p in paths)
