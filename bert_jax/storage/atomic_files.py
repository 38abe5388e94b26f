"""Files written whole or not at all: a temporary file beside the target, renamed over it.

A reader sees the old file or the whole new one, and a run killed mid-write leaves the
target as it was. The temporary name is the writer's own (``PATH.tmp-<host>-<pid>``), so
two jobs, or the hosts of a pod, writing one file into a shared folder never write into
each other's, and a leftover can be told from a write in progress (`writer_alive`).
Files get the mode the umask gives any new file (`write_with` too, for a library's writer
that makes its own temporary file readable by its owner only). On a bucket the object is
written straight to its name (objects appear whole)."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import socket
import stat
from collections.abc import Callable
from typing import Any

from bert_jax.storage import files

_MARK = ".tmp-"


def temp_path(path: str) -> str:
    """Where this process writes `path` before renaming it into place."""
    return f"{path}{_MARK}{socket.gethostname()}-{os.getpid()}"


def writer_alive(tmp: str) -> bool:
    """Whether the process that named `tmp` (a `temp_path`) may still be writing it: its
    process still runs on this machine, or it was another host's (not checkable here)."""
    host, _, pid = tmp.rpartition(_MARK)[2].rpartition("-")
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def abandoned(path: str) -> list[str]:
    """The temporary files or folders of `path` (`temp_path`s) whose writer stopped
    without removing them (killed): this machine's, their process gone."""
    return sorted(tmp for tmp in glob.glob(f"{glob.escape(path)}{_MARK}*") if not writer_alive(tmp))


def write_bytes(path: str, data: bytes) -> None:
    """`data` to `path` whole. A bucket path (``gs://``...) is written straight to its
    name: an object store publishes an object whole or not at all (`storage.files`)."""
    if files.is_remote(path):
        files.write_bytes_remote(path, data)
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = temp_path(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:  # a full disk, a path that is a folder: no temporary file left
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_with(path: str, writer: Callable[[str], None]) -> None:
    """`path` written whole by a library's own writer (``writer(name)`` writes the file
    `name`), with the mode the umask gives a new file, as `write_bytes` does: writers
    that write a temporary file of their own and rename it (safetensors' `save_file`)
    leave it readable by its owner only (0600). Local paths only."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = temp_path(path)
    with open(tmp, "wb"):  # made as any new file is: 0666 less the umask
        pass
    mode = stat.S_IMODE(os.stat(tmp).st_mode)
    try:
        writer(tmp)
        os.chmod(tmp, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    os.replace(tmp, path)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str, value: Any, **dump_options: Any) -> None:
    """`value` as JSON (``dump_options`` as for `json.dumps`, e.g. ``indent=2``)."""
    write_text(path, json.dumps(value, **dump_options) + "\n")
