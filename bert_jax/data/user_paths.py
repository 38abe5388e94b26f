"""The paths a command is given, checked before it creates anything.

- An input must exist and be what its flag asks for, a file (`input_file`) or files
  matched by globs (`input_files`); otherwise one line names the flag, the path and what
  is wrong with it.
- An output never silently replaces, or merges into, an earlier one: an existing
  non-empty file (`output_file`) or folder (`output_folder`) is refused in one line naming
  the flag, unless ``--overwrite`` is given. So is an output whose folder cannot be made
  or written (`files.check_can_create`), before any work. A folder that holds files the
  command does not write is refused even then: `replace` removes only an earlier
  output's own files.
- Folders made for an output are removed again when the attempt fails and leaves them
  empty (`removed_if_failed`): a refusal or a crash leaves no folder behind.

Paths in a bucket (``gs://``...) are checked for existence only; input globs there are
read from local copies (`input_files`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

from bert_jax.data import remote_copy
from bert_jax.storage import files


def input_file(path: str, flag: str) -> str:
    """`path`, when it is an existing file (a bucket path: when it exists)."""
    if not path:
        raise ValueError(f"{flag} is empty: pass a file")
    if files.is_remote(path):
        if files.is_file(path):
            return path
        if files.is_dir(path):
            raise IsADirectoryError(f"{flag} {path} is a folder, not a file")
        raise FileNotFoundError(f"{flag} {path} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{flag} {path} is a folder, not a file")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{flag} {path} does not exist")
    return path


def input_files(patterns: list[str], flag: str) -> list[str]:
    """The files the globs match, sorted per glob; a glob that matches nothing, or that
    matches a folder, is refused."""
    found = []
    for pattern in patterns:
        if files.is_remote(pattern):
            found += _bucket_inputs(pattern, flag)
            continue
        matched = sorted(glob.glob(pattern))
        if not matched:
            raise FileNotFoundError(f"{flag}: no input files match {pattern!r}")
        folders = [m for m in matched if os.path.isdir(m)]
        if folders:
            what = (
                f"{flag} {pattern}"
                if matched == [pattern]
                else f"{flag}: {pattern!r} matches {folders[0]}, which"
            )
            raise IsADirectoryError(
                f"{what} is a folder, not a text file (give files, e.g. {os.path.join(folders[0], '*.txt')})"
            )
        found += matched
    return found


def _bucket_inputs(pattern: str, flag: str) -> list[str]:
    """The local copies of the bucket objects a glob matches (``gs://b/corpus/*.txt``),
    made once per machine (`remote_copy.local_listed`; again where one was written since):
    what reads them (`prepare`'s parts at byte offsets, its worker processes) reads local
    files. Refused as a local glob is: nothing matched, or a folder matched."""
    wildcard = min((i for i, ch in enumerate(pattern) if ch in "*?["), default=len(pattern))
    base = pattern[:wildcard].rsplit("/", 1)[0]
    matched = remote_copy.reading(pattern, lambda: files.glob(pattern))
    if not matched:
        raise FileNotFoundError(f"{flag}: no input files match {pattern!r}")
    found = remote_copy.reading(base, lambda: files.tree(base))
    names = sorted(m[len(base) + 1 :] for m in matched)
    folders = [n for n in names if n not in found]
    if folders:
        raise IsADirectoryError(
            f"{flag}: {pattern!r} matches {base}/{folders[0]}, which is a folder, not a text file"
        )
    local = remote_copy.local_listed(base, {n: found[n] for n in names}, kind="text", name=pattern)
    return [os.path.join(local, n) for n in names]


def output_file(path: str, flag: str, overwrite: bool) -> None:
    """Refuses a folder (or a path ending in /), an existing non-empty file unless
    `overwrite`, and a local path whose folder cannot be made or written
    (`files.check_can_create`)."""
    if not path:
        raise ValueError(f"{flag} is empty: pass a file name")
    if path.endswith(("/", os.sep)):
        raise IsADirectoryError(f"{flag} {path} names a folder (it ends in /): give a file name")
    if files.is_remote(path):
        exists = files.is_file(path)
        if not exists and files.is_dir(path):
            raise IsADirectoryError(f"{flag} {path} is a folder: give a file name")
    elif os.path.isdir(path):
        raise IsADirectoryError(f"{flag} {path} is a folder: give a file name")
    else:
        exists = os.path.exists(path) and os.path.getsize(path) > 0
    if exists and not overwrite:
        raise FileExistsError(
            f"{flag} {path} already exists: pass --overwrite to replace it, or another {flag}"
        )
    if not files.is_remote(path):  # its folder can be made and written, before any work
        files.check_can_create(path, flag, folder=os.path.dirname(os.path.abspath(path)))


def output_folder(path: str, flag: str, overwrite: bool, own: Callable[[str], bool]) -> list[str]:
    """What `replace` removes before writing into the folder `path`: nothing when it is new
    or empty; with `overwrite`, an earlier output (every entry a name that `own` says the
    command writes). Anything else is refused in one line."""
    entries = earlier_output(path, flag, own)
    if entries and not overwrite:
        raise FileExistsError(
            f"{flag} {path} already holds an earlier output: "
            f"pass --overwrite to replace it, or another {flag}"
        )
    return [os.path.join(path, e) for e in entries]


def earlier_output(path: str, flag: str, own: Callable[[str], bool]) -> list[str]:
    """The entries of the output folder `path` (none when it is new or empty); refuses a
    file, a folder that cannot be made or written, and a folder holding anything that
    `own` does not call the command's own."""
    if files.is_remote(path):
        entries = sorted({name.split("/", 1)[0] for name in files.tree(path)})
        if not entries and files.is_file(path):
            raise NotADirectoryError(f"{flag} {path} is a file, not a folder")
    else:
        if os.path.exists(path) and not os.path.isdir(path):
            raise NotADirectoryError(f"{flag} {path} is a file, not a folder")
        files.check_can_create(path, flag)
        entries = sorted(os.listdir(path)) if os.path.isdir(path) else []
    foreign = [e for e in entries if not own(e)]
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise FileExistsError(
            f"{flag} {path} holds files this command does not write ({foreign[0]}{more}): "
            "choose a new or empty folder"
        )
    return entries


def replace(paths: list[str], flag: str) -> None:
    """Removes an earlier output's entries (from `output_folder`), saying so in one line."""
    if not paths:
        return
    print(f"warning: {flag}: --overwrite removes the earlier output in {os.path.dirname(paths[0])}")
    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        else:
            os.remove(p)


def missing_folders(path: str) -> list[str]:
    """`path` and those of its parents that do not exist yet, deepest first."""
    if not path or files.is_remote(path):
        return []
    missing, folder = [], os.path.abspath(path)
    while not os.path.exists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


@contextlib.contextmanager
def staged_output(path: str, earlier: list[str], flag: str) -> Iterator[str]:
    """The local folder to write the output folder `path` into: `path` itself, its earlier
    output (`output_folder`) removed first (`replace`). For a bucket folder, a temporary
    local folder instead, uploaded to `path` when the block ends without an error (each
    object whole), then the earlier output's objects the upload did not replace removed: a
    command that fails before its upload leaves the bucket as it was. The temporary folder
    is removed either way."""
    if not files.is_remote(path):
        replace(earlier, flag)
        yield path
        return
    staging = tempfile.mkdtemp(prefix="bert_jax-output-")
    try:
        yield staging
        written = set(files.upload_tree(staging, path))
        if earlier:
            print(f"warning: {flag}: --overwrite replaces the earlier output in {path}")
        for entry in earlier:
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            inside = files.tree(entry)  # empty for an object
            stale = [f"{entry}/{n}" for n in inside if f"{name}/{n}" not in written]
            for url in stale if inside else ([] if name in written else [entry]):
                files.remove_tree(url)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def removed_if_failed(path: str) -> Iterator[None]:
    """On an error (or an interruption) inside the block, the folders it made for `path`
    (the folder and any missing parents) are removed again where they are left empty;
    a folder with something in it (a resumable part of a preparation) is kept."""
    made = missing_folders(path)
    try:
        yield
    except BaseException:
        for folder in made:
            try:
                os.rmdir(folder)  # only an empty folder
            except OSError:
                break
        raise
