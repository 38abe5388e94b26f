"""A small prepared folder (30 Wikipedia articles at length 64), a bucket this process
reaches (the GCS API emulator, through the same client and path layer as a TPU VM's
``gs://``), and the folder's upload to it: for the tests of prepared data read from a bucket."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bert_jax.data import corpora, prepare
from bert_jax.storage import emulator, files, gcs
from tests.helpers import pod


def wiki_texts(folder: Path, articles: int, parts: int = 1, stem: str = "wiki") -> Path:
    """The first `articles` of the Wikipedia excerpt as `parts` text files in the original
    format (``<stem>.txt``, or ``<stem>-<i>.txt`` for several, article i in part i mod
    `parts`); returns `folder`."""
    docs = corpora.load_documents("wiki_excerpt")[:articles]
    for i in range(parts):
        name = f"{stem}-{i}.txt" if parts > 1 else f"{stem}.txt"
        (folder / name).write_text("\n\n".join("\n".join(d) for d in docs[i::parts]) + "\n")
    return folder


def wiki_prepared(folder: Path) -> str:
    """Prepares 30 articles of the Wikipedia excerpt into `folder`/prep; returns its path."""
    text = wiki_texts(folder, 30) / "wiki.txt"
    opts = prepare.Options(max_seq_length=64, dupe_factor=2, eval_fraction=0.1)
    prepare.prepare(prepare.list_inputs(str(text)), str(folder / "prep"), opts, progress=False)
    return str(folder / "prep")


@contextlib.contextmanager
def bucket(data_dir: Path) -> Iterator[str]:
    """``gs://BUCKET`` on an emulator serving `data_dir`, reached by this process's gcsfs
    (the variables `storage.emulator` sets, applied now and undone after)."""
    with pod.emulator(data_dir) as url, pytest.MonkeyPatch.context() as patch:
        for key, value in emulator.environment(url).items():
            patch.setenv(key, value)
        gcs.configure()
        import fsspec
        import gcsfs

        saved = dict(fsspec.config.conf.get("gcs", {}))
        fsspec.config.set_conf_env(fsspec.config.conf)  # the token, read from the variables
        gcsfs.GCSFileSystem.clear_instance_cache()  # a client made before pointed elsewhere
        try:
            yield f"gs://{pod.BUCKET}"
        finally:
            gcsfs.GCSFileSystem.clear_instance_cache()
            fsspec.config.conf["gcs"] = saved


def upload(local: str, url: str, *, metadata: bool = True) -> None:
    """The prepared folder `local` copied to `url` (without its metadata.json: unfinished)."""
    for name in sorted(os.listdir(local)):
        if name != "metadata.json" or metadata:
            files.write_bytes_remote(f"{url}/{name}", Path(local, name).read_bytes())
