"""The inputs of the built-in text sources (``data.source``: ``wiki_excerpt``, ``bbc_news``,
joined by commas, ``text`` globs, ``tfds``) and the cache they are prepared into: what
identifies them (`stamp`) keys the cached vocabulary and prepared folders."""

from __future__ import annotations

import os

from bert_jax.data import bbc_news, corpora, prepare
from bert_jax.data.settings import DataSettings


def cache_dir(c: DataSettings) -> str:
    return c.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "bert_jax")


# How `corpora.read_text_file` reads a text file, in the stamp of each: a vocabulary or
# folder prepared from a file before one-line documents were split into sentences, or
# before lines of several sentences were read as documents, is not reused for it.
TEXT_READER = "paragraph-lines-as-documents"


def stamp(inputs: list) -> list:
    """What identifies the inputs' contents: paths, parts, files' sizes and times, and the
    reader of a text file."""
    return [
        (i.path, i.tfds_split, i.parts)
        + ((os.path.getsize(i.path), os.path.getmtime(i.path)) if not i.tfds_split else ())
        + ((i.start, i.end) if i.end >= 0 else ())
        + ((TEXT_READER,) if _plain_text(i) else ())
        for i in inputs
    ]


def _plain_text(i: prepare.Input) -> bool:
    """An input `corpora.read_text_file` reads (not a wiki dump, BBC folder or TFDS part)."""
    return not (i.reader or i.tfds_split or i.path.endswith((".xml", ".xml.bz2", ".bz2")))


def builtin_inputs(c: DataSettings) -> list:
    """The inputs of the built-in sources; ``source`` may join several with commas
    (``wiki_excerpt,bbc_news``), each then reading its own default data."""
    names = [s for s in c.source.split(",") if s]
    joined = len(names) > 1
    inputs = []
    for name in names:
        if name == "wiki_excerpt":
            path = "" if joined else c.input_files
            inputs.append(prepare.Input(path or corpora.wiki_excerpt_path()))
        elif name == "bbc_news":
            path = "" if joined else c.input_files
            inputs.append(prepare.Input(path or bbc_news.default_dir(), reader="bbc_news"))
        elif name == "text" and not joined:
            inputs += prepare.list_inputs(c.input_files, flag="--config.data.input_files")
        elif name == "tfds" and not joined:
            if not c.tfds_name:
                raise ValueError("source=tfds needs --config.data.tfds_name=NAME")
            inputs += prepare.list_inputs(
                tfds_name=c.tfds_name, tfds_num_shards=c.tfds_num_shards, tfds_data_dir=c.tfds_data_dir
            )
        else:
            raise ValueError(
                f"data.source={c.source!r}: one of wiki_excerpt, bbc_news, text, tfds, prepared, "
                "tfrecord, synthetic, or built-in corpora joined by commas (wiki_excerpt,bbc_news)"
            )
    return inputs
