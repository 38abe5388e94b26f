"""A small prepared folder (30 Wikipedia articles at length 64) and its upload to a stand-in
bucket (TensorFlow's ``ram://``), for the tests of prepared data read from a bucket."""

from __future__ import annotations

import os
from pathlib import Path

from bert_jax.data import corpora, prepare
from bert_jax.storage import tensorflow_runtime


def wiki_prepared(folder: Path) -> str:
    """Prepares 30 articles of the Wikipedia excerpt into `folder`/prep; returns its path."""
    text = folder / "wiki.txt"
    text.write_text("\n\n".join("\n".join(d) for d in corpora.load_documents("wiki_excerpt")[:30]) + "\n")
    opts = prepare.Options(max_seq_length=64, dupe_factor=2, eval_fraction=0.1)
    prepare.prepare(prepare.list_inputs(str(text)), str(folder / "prep"), opts, progress=False)
    return str(folder / "prep")


def upload(local: str, url: str, *, metadata: bool = True) -> None:
    """The prepared folder `local` copied to `url` (without its metadata.json: unfinished)."""
    gfile = tensorflow_runtime.tensorflow().io.gfile
    gfile.makedirs(url)
    for name in sorted(os.listdir(local)):
        if name != "metadata.json" or metadata:
            gfile.copy(os.path.join(local, name), f"{url}/{name}", overwrite=True)
