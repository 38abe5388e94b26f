"""One path layer for what a run reads and writes: local folders and buckets alike.

Every workdir file (metrics, TensorBoard events, configs, ``best_metric.json``, vocabulary
copies, reports, damaged-checkpoint moves) goes through `etils.epath`, the layer orbax
already uses for checkpoints, so a ``gs://`` workdir is the same code as a local one.
epath reaches ``gs://`` through `gcsfs` on every machine, with one retry policy
(`storage.gcs`, set up here before the first bucket access); the tests point it at a GCS
emulator (`storage.emulator`).

What differs on a bucket, and is handled here once:
- An object is written whole or not at all, so remote writes go straight to their name
  (locally: a temporary file renamed over the target, `atomic_files`).
- Objects cannot be appended to: `AppendFile` keeps a remote file's contents and rewrites
  it whole, at most every ``flush_every_s`` seconds, when asked and when closed (locally:
  appends).
- A rename is a copy and a delete per object (`move_tree`).
- A path that cannot be reached (no network, no credentials, a typo in the bucket) is
  found at start by `check_reachable`, within a time bound, and named in one line.
- A bucket that stops answering mid-run is retried by the policy; past its bound the
  operation raises `BucketUnreachableError`, one line naming the path.
"""

from __future__ import annotations

import contextlib
import glob as local_glob
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from etils import epath

from bert_jax.storage import gcs


class UnreachablePathError(OSError):
    """A path the run needs cannot be read or written (the message names it and why)."""


class BucketUnreachableError(UnreachablePathError):
    """A bucket that did not answer, still, when the retry policy's bound ran out
    (`storage.gcs`): a restart may succeed once it answers again."""


def bucket_error(path: str, doing: str, error: BaseException) -> BucketUnreachableError | None:
    """`error` as a `BucketUnreachableError` naming `path` if it says the bucket did not
    answer (`gcs.transient`), else None."""
    if isinstance(error, BucketUnreachableError):
        return error
    if isinstance(error, UnreachablePathError) or not gcs.transient(error):
        return None
    reason = " ".join(str(error).split())[:200] or type(error).__name__
    bound = gcs.configure().within_s
    return BucketUnreachableError(
        f"{path} cannot be reached ({doing}; retried for {bound:g} s, {gcs.SETTING}): "
        f"{type(error).__name__}: {reason}"
    )


@contextlib.contextmanager
def on_bucket(path: str, doing: str) -> Iterator[None]:
    """For a bucket path: the client set up (`gcs.configure`), and an error that says the
    bucket did not answer raised as `BucketUnreachableError` naming `path`."""
    if not is_remote(path):
        yield
        return
    gcs.configure()
    try:
        yield
    except Exception as e:
        unreachable = bucket_error(path, doing, e)
        if unreachable is None or unreachable is e:
            raise
        raise unreachable from None


def is_remote(path: str) -> bool:
    """A URL (``gs://``, ``s3://``...) rather than a local path."""
    return "://" in str(path)


def resolve(path: str) -> str:
    """Local paths made absolute (orbax wants them so); URLs as they are."""
    return str(path) if is_remote(path) else os.path.abspath(path)


def as_given(path: str) -> str:
    """A path to show the user: as they gave it (relative stays relative), tidied
    (``runs/x/`` → ``runs/x``); URLs as they are."""
    return str(path) if is_remote(path) else os.path.normpath(path)


def join(*parts: str) -> str:
    return (
        os.path.join(*map(str, parts))
        if not is_remote(parts[0])
        else "/".join([str(parts[0]).rstrip("/"), *(str(p).strip("/") for p in parts[1:])])
    )


def exists(path: str) -> bool:
    with on_bucket(path, "reading"):
        return epath.Path(path).exists()


def is_file(path: str) -> bool:
    """Whether `path` is a file (on a bucket: an object, not a folder's prefix)."""
    with on_bucket(path, "reading"):
        return epath.Path(path).is_file()


def is_dir(path: str) -> bool:
    """Whether `path` is a folder (on a bucket: a prefix objects are under)."""
    with on_bucket(path, "reading"):
        return epath.Path(path).is_dir()


def makedirs(path: str) -> None:
    with on_bucket(path, "writing"):
        epath.Path(path).mkdir(parents=True, exist_ok=True)


def read_bytes(path: str) -> bytes:
    with on_bucket(path, "reading"):
        return epath.Path(path).read_bytes()


@contextlib.contextmanager
def open_read(path: str) -> Iterator[Any]:
    """`path` open for reading in blocks (a bucket object streamed, not read whole)."""
    with on_bucket(path, "reading"), epath.Path(path).open("rb") as f:
        yield f


# Ranged requests a process has in flight at once (a bucket serves far more; a small
# server, such as the GCS emulator, stalls on a burst of 64).
RANGES_IN_FLIGHT = 32


def read_ranges(paths: list[str], offsets: list[int], sizes: list[int]) -> list[bytes]:
    """``sizes[i]`` bytes of the bucket object ``paths[i]`` from ``offsets[i]``, for every i,
    all at once: each a ranged request of the client epath uses (`RANGES_IN_FLIGHT` at a
    time; the retry policy's), so a batch of reads costs about one round trip."""
    if not paths:
        return []
    with on_bucket(paths[0], "reading"):
        fs, _ = _bucket_fs(paths[0])
        ends = [o + n for o, n in zip(offsets, sizes, strict=True)]
        stripped = [fs._strip_protocol(p) for p in paths]
        return list(fs.cat_ranges(stripped, offsets, ends, batch_size=RANGES_IN_FLIGHT, on_error="raise"))


def _bucket_fs(path: str) -> tuple[Any, str]:
    """The fsspec file system epath reaches `path`'s bucket through (gcsfs for ``gs://``),
    and `path` as it names it."""
    import fsspec

    return fsspec.core.url_to_fs(path)


def glob(pattern: str) -> list[str]:
    """The paths matching `pattern` (``*``, ``?``, ``[...]``), local or on a bucket (the
    client epath uses), as full paths; ``file://`` is local."""
    if pattern.startswith("file://"):
        pattern = pattern[len("file://") :]
    if not is_remote(pattern):
        return local_glob.glob(pattern)
    with on_bucket(pattern, "listing"):
        fs, _ = _bucket_fs(pattern)
        protocol = pattern.split("://", 1)[0]
        return [f"{protocol}://{p}" for p in fs.glob(fs._strip_protocol(pattern))]


def size_and_time(path: str) -> list[int]:
    """A file's size and a number that changes when it is written again (its modification
    time in ns locally; its generation on a bucket, else its update time)."""
    if not is_remote(path):
        st = os.stat(path)
        return [int(st.st_size), int(st.st_mtime_ns)]
    with on_bucket(path, "reading"):
        fs, stripped = _bucket_fs(path)
        info = fs.info(stripped)
    return [int(info["size"]), _stamp(info)]


def tree(folder: str) -> dict[str, list[int]]:
    """Every file under the bucket folder `folder` (recursively), by its path relative to
    it: its size and a number that changes when it is written again (as `size_and_time`).
    Empty where there is no such folder. The empty ``name/`` objects some tools make to
    show a folder (the Cloud Console, TF's ``gfile.MakeDirs``) are not files."""
    with on_bucket(folder, "listing"):
        fs, stripped = _bucket_fs(folder)
        found = fs.find(stripped.rstrip("/"), detail=True)
    root = stripped.rstrip("/") + "/"
    return {
        name[len(root) :]: [int(info["size"]), _stamp(info)]
        for name, info in found.items()
        if name.startswith(root) and info.get("type", "file") == "file" and not name.endswith("/")
    }


def _stamp(info: dict) -> int:
    """A bucket object's generation, else its update time, as a number."""
    stamp = info.get("generation") or info.get("updated") or info.get("mtime") or 0
    return int("".join(ch for ch in str(stamp) if ch.isdigit()) or 0)


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def read_json(path: str) -> Any:
    return json.loads(read_text(path))


def read_json_if_exists(path: str) -> Any | None:
    return read_json(path) if exists(path) else None


def write_bytes_remote(path: str, data: bytes) -> None:
    """A bucket object written whole (its parent "folder" needs no creating)."""
    with on_bucket(path, "writing"):
        epath.Path(path).write_bytes(data)


def write_text_remote(path: str, text: str) -> None:
    write_bytes_remote(path, text.encode("utf-8"))


def copy_file(src: str, dst: str) -> None:
    """`src` to `dst`, whole: a reader of `dst` never sees half of it."""
    from bert_jax.storage import atomic_files  # it imports this module

    atomic_files.write_bytes(dst, read_bytes(src))  # local or bucket


def upload(local: str, path: str, block: int = 16 << 20) -> None:
    """The local file `local` written to the bucket object `path`, streamed in blocks (an
    object appears whole when its upload ends, or not at all)."""
    with on_bucket(path, "writing"), open(local, "rb") as src, epath.Path(path).open("wb") as dst:
        while chunk := src.read(block):
            dst.write(chunk)


def upload_tree(local: str, path: str) -> list[str]:
    """Every file under the local folder `local` written to the bucket folder `path`, each
    object whole; returns their paths relative to `local`."""
    names = sorted(
        os.path.relpath(os.path.join(root, name), local)
        for root, _, found in os.walk(local)
        for name in found
    )
    for name in names:
        upload(os.path.join(local, name), join(path, name.replace(os.sep, "/")))
    return names


def remove_tree(path: str) -> None:
    """A bucket object, or every object under the bucket folder `path` (none is fine)."""
    with on_bucket(path, "deleting"):
        fs, stripped = _bucket_fs(path)
        if fs.exists(stripped):
            fs.rm(stripped, recursive=True)


def place(local: str, path: str) -> None:
    """A finished local file put at `path`: renamed there (local), or uploaded whole and
    then removed (a bucket)."""
    if is_remote(path):
        upload(local, path)
        os.remove(local)
    else:
        os.replace(local, path)


def remove(path: str) -> None:
    """A file removed, local or on a bucket (gone already is fine)."""
    with on_bucket(path, "deleting"):
        epath.Path(path).unlink(missing_ok=True)


def move_tree(src: str, dst: str) -> None:
    """A folder moved: renamed locally; on a bucket copied object by object, then deleted."""
    s, d = epath.Path(src), epath.Path(dst)
    if not is_remote(src):
        d.parent.mkdir(parents=True, exist_ok=True)
        s.rename(d)
        return
    with on_bucket(src, f"moving it to {dst}"):
        for f in sorted(p for p in s.rglob("*") if p.is_file()):
            target = d / f.relative_to(s)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(f.read_bytes())
        s.rmtree()


class AppendFile:
    """A text file lines are appended to: appended locally; on a bucket, rewritten whole
    (objects cannot be appended to) at most every `flush_every_s` and when closed."""

    def __init__(self, path: str, *, flush_every_s: float = 30.0) -> None:
        self.path, self.remote, self.flush_every_s = path, is_remote(path), flush_every_s
        self._lines: list[str] = []
        self._dirty, self._last_flush = False, 0.0
        if self.remote:
            self._lines = read_text(path).splitlines(keepends=True) if exists(path) else []

    def write(self, text: str, *, flush: bool = False) -> None:
        if not self.remote:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(text)
            return
        self._lines.append(text)
        self._dirty = True
        if flush or time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        if self.remote and self._dirty:
            write_text_remote(self.path, "".join(self._lines))
            self._dirty, self._last_flush = False, time.monotonic()

    def close(self) -> None:
        self.flush()


def check_reachable(path: str, what: str, *, writable: bool = False, timeout_s: float | None = None) -> None:
    """Raises `UnreachablePathError` naming `what` (a flag) and `path` unless the path's
    file system answers within `timeout_s` (``BERT_JAX_REACH_TIMEOUT_S``, default 60):
    ``exists`` for a read, and a probe object written and deleted for `writable`. No
    answer, or only transient failures, is a `BucketUnreachableError` (a restart may
    succeed); a refusal (no such bucket, no permission) is not. Local paths are only
    checked for kind: a file where a folder is wanted is refused."""
    if not is_remote(path):
        if os.path.exists(path) and not os.path.isdir(path):
            raise UnreachablePathError(f"{what} {path} is a file, not a folder")
        if writable:
            check_can_create(path, what)
        return
    gcs.configure()
    timeout = float(timeout_s or os.environ.get("BERT_JAX_REACH_TIMEOUT_S", 60))
    outcome: list[BaseException | None] = []

    def probe() -> None:
        try:
            p = epath.Path(path)
            p.exists()
            if writable and p.is_file():  # an object where a folder is wanted
                outcome.append(NotADirectoryError(f"{what} {path} is a file, not a folder"))
                return
            if writable:
                marker = p / f".bert_jax_write_check-{uuid.uuid4().hex}"
                marker.write_text("")
                marker.unlink(missing_ok=True)  # a retried delete may find it gone
            outcome.append(None)
        except BaseException as e:  # reported below, in one line
            outcome.append(e)

    thread = threading.Thread(target=probe, daemon=True)
    with _quiet_native_stderr():
        thread.start()
        thread.join(timeout)
    if not outcome:
        raise BucketUnreachableError(f"{what} {path} cannot be reached: no answer in {timeout:.0f} s")
    error = outcome[0]
    if isinstance(error, NotADirectoryError):
        raise UnreachablePathError(str(error))
    if error is not None:
        reason = " ".join(str(error).split())[:240] or type(error).__name__
        kind = BucketUnreachableError if gcs.transient(error) else UnreachablePathError
        raise kind(f"{what} {path} cannot be reached: {type(error).__name__}: {reason}")


def check_can_create(path: str, what: str, folder: str = "") -> None:
    """Raises `UnreachablePathError` naming `what` (a flag) and the local `path` unless
    files can be made in `folder` (default `path`): the nearest of it and its parents that
    exists must be a folder in which a probe file can be made. Permissions alone do not
    tell (for root, or in /proc); the probe is removed at once and the folder's times
    restored, so that a refused command leaves it as it was."""
    existing = os.path.abspath(folder or path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)  # the root always exists
    if not os.path.isdir(existing):
        raise UnreachablePathError(f"{what} {path} cannot be created: {existing} is a file, not a folder")
    times = os.stat(existing)
    try:
        handle, probe = tempfile.mkstemp(prefix=".bert_jax_write_check-", dir=existing)
    except OSError as e:
        raise UnreachablePathError(
            f"{what} {path} cannot be written: no file can be made in {existing} "
            f"({e.strerror or type(e).__name__}): choose another {what}"
        ) from None
    os.close(handle)
    os.remove(probe)
    with contextlib.suppress(OSError):
        os.utime(existing, ns=(times.st_atime_ns, times.st_mtime_ns))


def _quiet_native_stderr():
    from bert_jax.storage import tensorflow_runtime

    return tensorflow_runtime.quiet_stderr()
