"""Prepared folders in a bucket (``gs://...``): read in place from the first step, and
copied to local disk in the background meanwhile. Every read goes through the path layer
(`storage.files`: gcsfs, the client of every other ``gs://`` access, with its retry
policy; a bucket that stops answering past the bound is exit 74 as anywhere else).

Why a copy at all: training reads each instance at a random position (the O(1) resumable
order), a few hundred bytes at a time; from a bucket that is a round trip per read (tens of
milliseconds), so a host reads in place with many reads in flight (`remote_prepared`), and
its local disk serves the reads once the copy is there. Why not a copy first: BERT's corpus
at both sequence lengths is ~25 GiB per host, minutes of every chip of a pod spent waiting
on a re-created VM. So a run starts at once: `open_folder` reads the bucket's
``metadata.json`` only, the reader reads the bucket, and a background thread
(`RemoteFolder.start_copy`, on the folder's first read; one folder after another, in the
order they were first read: phase 1's before phase 2's) copies the folder file by file,
index files first, each read locally from the moment it is whole. A rerun finds the copy
(its ``metadata.json``, written last, equal to the bucket's) and reads only local files.
A copy that cannot finish (too little disk, the bucket unreachable) stops with one warning
line, and the reads stay in place.

A bucket path that cannot be read (no credentials, no network, no such folder) fails at
start with one line naming it; a folder whose upload is unfinished (no ``metadata.json``)
is refused as an unfinished preparation is.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import json
import os
import queue
import shutil
import threading
from collections.abc import Callable
from typing import TypeVar

from bert_jax.data.progress import ProgressLines, human_bytes
from bert_jax.data.records import METADATA
from bert_jax.storage import atomic_files, files

T = TypeVar("T")


# Where objects read from a bucket are copied to be read locally (checkpoints,
# vocabularies: `local_objects`); a pre-training run's own under its data cache.
COPIES_ENV = "BERT_JAX_BUCKET_COPIES"


def copies_root() -> str:
    default = os.path.join(os.path.expanduser("~"), ".cache", "bert_jax", "bucket_copies")
    return os.environ.get(COPIES_ENV) or default


class RemoteReadError(OSError):
    """A bucket path that cannot be read (the message names it and says why)."""


def reading(url: str, read: Callable[[], T]) -> T:
    """`read()`; what it raises, other than a bucket that did not answer within the retry
    policy's bound (`files.BucketUnreachableError`, kept: exit 74, a restart may help), as
    a `RemoteReadError` naming `url` (not found, no permission, a damaged object)."""
    try:
        return read()
    except (files.BucketUnreachableError, RemoteReadError):
        raise
    except Exception as e:
        reason = _missing(e, url) if isinstance(e, FileNotFoundError) else " ".join(str(e).split())[:300]
        raise RemoteReadError(f"cannot read {url}: {type(e).__name__}: {reason}") from None


def _missing(e: FileNotFoundError, url: str) -> str:
    """The reason for a missing file: no such file, naming the one the error names where
    that is not ``url`` (one of several files read at once)."""
    name = e.filename or (e.args[0] if len(e.args) == 1 and isinstance(e.args[0], str) else None)
    return f"no such file: {name}" if name and name != url else "no such file"


def _read_if_there(url: str) -> bytes | None:
    """The object's bytes, or None where there is no such object."""
    try:
        return files.read_bytes(url)
    except FileNotFoundError:
        return None


def _exists(url: str) -> bool:
    return reading(url, lambda: files.exists(url))


@dataclasses.dataclass(eq=False)
class RemoteFolder:
    """A prepared folder in a bucket, read in place until its local copy (`local`) is made.
    `done` holds the local paths of the files copied whole (read there from then on)."""

    url: str
    local: str
    meta: dict
    raw: bytes  # the bucket's metadata.json, as it is
    files: list[tuple[str, int]]  # every file and its size, as the metadata lists them
    done: set[str] = dataclasses.field(default_factory=set)
    copying: bool = False

    def remote(self, local_path: str) -> str:
        return f"{self.url}/{os.path.relpath(local_path, self.local)}"

    def size(self, local_path: str) -> int:
        """A file's size as the metadata lists it (-1: not listed)."""
        return dict(self.files).get(os.path.relpath(local_path, self.local), -1)

    def start_copy(self) -> None:
        """Queues the folder's copy (once per process)."""
        if not self.copying:
            self.copying = True
            _copier().put(self)


# One per bucket folder, cache and process: its readers share what is copied.
_FOLDERS: dict[tuple[str, str], RemoteFolder] = {}


def open_folder(url: str, cache_root: str) -> str | RemoteFolder:
    """The local copy of the prepared folder at `url` when it is whole, else the folder to
    read in place (nothing copied yet: `RemoteFolder.start_copy`)."""
    url = url.rstrip("/")
    if (url, cache_root) in _FOLDERS:
        return _FOLDERS[url, cache_root]
    files.check_reachable(url, "prepared data")  # one line, within a bound, if it cannot be
    raw = reading(url, lambda: _read_if_there(f"{url}/{METADATA}"))
    if raw is None:
        if not _exists(url):
            raise RemoteReadError(f"cannot read {url}: no such folder")
        raise RemoteReadError(
            f"{url}: unfinished preparation or upload (no {METADATA}): finish `bert-jax prepare-data` "
            "or the copy to the bucket, whose metadata.json comes last"
        )
    name = hashlib.sha256(url.encode()).hexdigest()[:16] + "-" + os.path.basename(url)
    local = os.path.join(cache_root, "remote", name)
    path = os.path.join(local, METADATA)
    if os.path.exists(path):
        with open(path, "rb") as f:
            if f.read() == raw:
                return local
    meta = json.loads(raw)
    folder = RemoteFolder(url, local, meta, raw, _listed_files(meta))
    for file, size in folder.files:  # whole from an earlier, interrupted copy
        dst = os.path.join(local, file)
        if os.path.exists(dst) and os.path.getsize(dst) == size:
            folder.done.add(dst)
    _FOLDERS[url, cache_root] = folder
    return folder


def _listed_files(meta: dict) -> list[tuple[str, int]]:
    """Every file of a prepared folder and its size, as its metadata lists them."""
    if any("files" not in shard for shard in meta["shards"]):
        raise RemoteReadError(
            "a prepared folder of format 1 is read from local disk only: copy it there, or prepare it again"
        )
    return [(name, int(size)) for shard in meta["shards"] for name, size in sorted(shard["files"].items())]


class _Copier:
    """One background thread per process that copies queued folders, one after another."""

    def __init__(self) -> None:
        self.queue: queue.Queue = queue.Queue()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="remote-copy", daemon=True)
        self.thread.start()
        atexit.register(self.close)

    def put(self, folder: RemoteFolder) -> None:
        self.queue.put(folder)

    def close(self) -> None:
        """Stops between two blocks (a copy resumes at the next run) and waits for it."""
        self.stop.set()
        self.queue.put(None)
        self.thread.join(timeout=10)

    def _run(self) -> None:
        while (folder := self.queue.get()) is not None:
            try:
                if not self.stop.is_set():
                    copy_folder(folder, self.stop)
            except Exception as e:  # the reads stay in place: the run goes on
                print(
                    f"warning: copying {folder.url} into {folder.local} stopped "
                    f"({type(e).__name__}: {' '.join(str(e).split())[:200]}): reading it from the bucket",
                    flush=True,
                )
            finally:
                self.queue.task_done()


_COPIER: list[_Copier] = []


def _copier() -> _Copier:
    if not _COPIER:
        _COPIER.append(_Copier())
    return _COPIER[0]


def wait_for_copies() -> None:
    """Returns once every copy queued so far has finished or stopped."""
    if _COPIER:
        _COPIER[0].queue.join()


# How often the background copy of a prepared folder says how far it is (a whole line
# among the run's: tens of GiB take minutes, each host copying its own).
BACKGROUND_EVERY_S = 300.0


def copy_folder(folder: RemoteFolder, stop: threading.Event | None = None) -> bool:
    """Copies the folder's missing files (index files first), then its ``metadata.json``;
    False when stopped first, or when the disk has too little room (one warning line)."""
    todo = sorted(folder.files, key=lambda f: (not f[0].endswith(".index"), f[0]))
    todo = [(f, n) for f, n in todo if os.path.join(folder.local, f) not in folder.done]
    os.makedirs(folder.local, exist_ok=True)
    need, free = sum(n for _, n in todo), shutil.disk_usage(folder.local).free
    if need > free:
        print(
            f"warning: {folder.url} needs {need / 2**30:.2f} GiB, {folder.local} has {free / 2**30:.2f} "
            "GiB free: reading it from the bucket throughout (free the disk, or set "
            "--config.data.cache_dir to a larger one, to copy it)",
            flush=True,
        )
        return False
    if todo:
        print(
            f"copying {folder.url} ({need / 2**30:.2f} GiB, {len(todo)} files) into {folder.local} in "
            "the background; reading it from the bucket until then",
            flush=True,
        )
    bar = ProgressLines(f"copying {folder.url}", need, "B", every=BACKGROUND_EVERY_S, only_if_long=True)
    for file, size in todo:
        dst = os.path.join(folder.local, file)
        if not copy_object(f"{folder.url}/{file}", dst, size, stop, advance=bar.advance):
            return False
        folder.done.add(dst)
    atomic_files.write_text(os.path.join(folder.local, METADATA), folder.raw.decode())
    bar.close()
    return True


def copy_object(
    src: str,
    dst: str,
    size: int,
    stop: threading.Event | None = None,
    block: int = 16 << 20,
    advance: Callable[[int], None] | None = None,
) -> bool:
    """The bucket object `src` (of `size` bytes, as listed) to the local file `dst`, in
    blocks (memory: one block), to a temporary name, then into place; False (and nothing
    in place) when `stop` is set first. A read of another size (the object written again
    meanwhile, a damaged upload) is refused naming it. `advance(n)` is told of each block's
    n bytes (a progress line's)."""
    tmp = atomic_files.temp_path(dst)

    def copy() -> int:
        n = 0
        with files.open_read(src) as f, open(tmp, "wb") as out:
            while chunk := f.read(block):
                out.write(chunk)
                n += len(chunk)
                if advance is not None:
                    advance(len(chunk))
                if stop is not None and stop.is_set():
                    break
        return n

    try:
        written = reading(src, copy)
    except Exception:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    if stop is not None and stop.is_set():
        os.remove(tmp)
        return False
    if written != size:
        os.remove(tmp)
        raise RemoteReadError(f"{src}: {written} bytes read, {size} listed: upload it again")
    os.replace(tmp, dst)
    return True


LISTED_RECORD = ".copied.json"  # written last: the copy is whole


def local_listed(
    folder: str, listing: dict[str, list[int]], kind: str, name: str = "", root: str = ""
) -> str:
    """The local copy of the objects `listing` names (paths relative to the bucket folder
    `folder`, each with its size and generation, as `files.tree` gives them) under `root`
    (default `copies_root`), in a folder of its own per `kind` and `name` (what the copy
    stands for: default `folder`; a checkpoint's and a vocabulary's copies of one folder
    are two, and so are two checkpoints' of one folder): made once, whole (under a
    temporary name, its record written last), and again where an object was written
    since. Returns that folder; several processes of one machine may make it at once
    (the first kept)."""
    name = name or folder
    key = hashlib.sha256(f"{kind}:{name}".encode()).hexdigest()[:16]
    local = os.path.join(root or copies_root(), f"{kind}-{key}-{os.path.basename(folder)}")
    record = {"source": folder, "files": listing}
    if listed_record(local) != record:
        _copy_listed(folder, local, record)
    return local


def local_folder(url: str, what: str) -> str:
    """The local copy of everything under the bucket folder `url` (a fine-tuning task's
    files: small beside a pre-training corpus, read whole by every host), made once per
    machine and again where an object was written since; a local `url` is itself. A
    folder that is not there, or holds no file, is refused in one line naming `what`."""
    if not files.is_remote(url):
        return url
    url = url.rstrip("/")
    files.check_reachable(url, what)
    listing = files.tree(url)
    if not listing:
        raise FileNotFoundError(f"{what} {url} holds no files")
    return local_listed(url, listing, kind="data")


def local_file(url: str, what: str) -> str:
    """The local copy of the bucket file `url` (beside nothing else of its folder)."""
    if not files.is_remote(url):
        return url
    if not files.is_file(url):
        raise FileNotFoundError(f"{what} {url} does not exist")
    folder, name = url.rsplit("/", 1)
    local = local_listed(folder, {name: files.size_and_time(url)}, kind="data-file", name=url)
    return os.path.join(local, name)


def listed_record(local: str) -> dict | None:
    """The record of a copy `local_listed` made (None: no whole copy there)."""
    try:
        with open(os.path.join(local, LISTED_RECORD)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _copy_listed(folder: str, local: str, record: dict) -> None:
    """The files of `record` from the bucket `folder` into `local`, made whole under a
    temporary name first."""
    wanted = record["files"]
    need = sum(size for size, _ in wanted.values())
    parent = os.path.dirname(local)
    os.makedirs(parent, exist_ok=True)
    for left in atomic_files.abandoned(local):  # a copy killed half-way: its disk freed
        print(f"removing {left}, a copy its process left unfinished", flush=True)
        shutil.rmtree(left, ignore_errors=True)
    free = shutil.disk_usage(parent).free
    if need > free:
        raise OSError(
            f"{folder} needs {need / 2**30:.2f} GiB, {parent} has {free / 2**30:.2f} GiB free: "
            f"free the disk, or set {COPIES_ENV} to a folder on a larger one"
        )
    print(f"copying {folder} ({human_bytes(need)}, {len(wanted)} files) into {local}", flush=True)
    bar = ProgressLines(f"copying {folder}", need, "B", every=30.0, only_if_long=True)
    tmp = atomic_files.temp_path(local)  # this process's own: a leftover is told apart
    try:
        for rel, (size, _) in sorted(wanted.items()):
            dst = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            copy_object(f"{folder}/{rel}", dst, size, advance=bar.advance)  # a line each 30 s
        with open(os.path.join(tmp, LISTED_RECORD), "w") as f:
            json.dump(record, f)
        if listed_record(local) == record:
            print(f"{local}: copied meanwhile by another process, which is kept", flush=True)
            return
        if os.path.isdir(local):  # an older copy (the checkpoint was written again since)
            shutil.rmtree(local, ignore_errors=True)
        try:
            os.replace(tmp, local)
        except OSError:
            if listed_record(local) != record:  # another process's copy, of other objects
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    bar.close()
