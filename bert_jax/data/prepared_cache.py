"""Prepared folders for a pre-training data config: the ones ``data.input_files`` lists
(``source=prepared``; a bucket folder read in place while it is copied to the cache in
the background, `remote_copy`), or a cache folder the built-in sources are prepared into
on first use by `bert-jax prepare-data`'s code; opened and checked against the run's
vocabulary, length and objective."""

from __future__ import annotations

import hashlib
import json
import os

from bert_jax.data import corpus_inputs, prepare, records, remote_copy, remote_prepared, run_vocabulary
from bert_jax.data.settings import DataSettings
from bert_jax.storage import files


def prepare_options(c: DataSettings, max_seq_length: int, seed: int):
    return prepare.Options(
        vocab_file=run_vocabulary.tokenizer_of(c).vocab_file,
        do_lower_case=c.lower_case,
        tokenizer=c.tokenizer,
        max_seq_length=max_seq_length,
        dupe_factor=c.dupe_factor,
        short_seq_prob=c.short_seq_prob,
        random_seed=seed,
        nsp=c.nsp,
        eval_fraction=c.eval_fraction,
        full_sentences=c.full_sentences,
    )


def prepared_dir(
    c: DataSettings, max_seq_length: int, seed: int, split: str = "train", hosts: int = 1
) -> str | remote_copy.RemoteFolder:
    """The prepared folder that serves this split at this sequence length.

    ``source=prepared``: the one of ``input_files`` (or ``eval_files`` for the held-out
    split) made for `max_seq_length`; a bucket folder not yet copied whole is returned as
    the `remote_copy.RemoteFolder` to read in place. Built-in sources: a cache folder,
    prepared now on first use (with the run's seed as the pairing seed); a TFDS corpus is
    built first where one host runs (`hosts`), else must be prepared already.
    """
    if c.source == "prepared":
        listed = (c.eval_files if split == "eval" and c.eval_files else c.input_files).split(",")
        dirs = [d for d in listed if d]
        if not dirs:
            raise ValueError(
                "source=prepared needs --config.data.input_files=DIR[,DIR] (from `bert-jax prepare-data`)"
            )
        # A folder in a bucket: its local copy once whole, else read in place (`remote_copy`).
        opened = [
            remote_copy.open_folder(d, corpus_inputs.cache_dir(c)) if files.is_remote(d) else d for d in dirs
        ]
        found = {}
        for d in opened:
            meta = d.meta if isinstance(d, remote_copy.RemoteFolder) else records.read_metadata(d)
            found[int(meta["flags"]["max_seq_length"])] = d
        if max_seq_length not in found:
            raise records.PreparedDataError(
                f"no prepared folder for max_seq_length={max_seq_length} among {', '.join(dirs)} "
                f"(they hold {sorted(found)}): prepare one with --max_seq_length={max_seq_length}"
            )
        return found[max_seq_length]
    inputs = corpus_inputs.builtin_inputs(c)
    opts = prepare_options(c, max_seq_length, seed)
    raw = json.dumps(
        [c.source, corpus_inputs.stamp(inputs), opts.flags(), records.file_sha256(opts.vocab_file)]
    )
    directory = os.path.join(
        corpus_inputs.cache_dir(c), f"prepared-{hashlib.sha256(raw.encode()).hexdigest()[:16]}"
    )
    if not os.path.exists(os.path.join(directory, records.METADATA)):
        print(f"preparing {c.source} data (seq {max_seq_length}) once into {directory}", flush=True)
        # Made only once the vocabulary and inputs are checked; a failed attempt removes it
        # again unless it holds finished shards (the next run resumes from them).
        prepare.prepare(inputs, directory, opts, name="cache folder", hosts=hosts)
    return directory


def open_prepared(
    c: DataSettings, split: str, max_seq_length: int, seed: int, hosts: int = 1
) -> records.PreparedSet:
    """The prepared split, checked against the run's vocabulary, length and objective."""
    found = prepared_dir(c, max_seq_length, seed, split, hosts)
    if isinstance(found, remote_copy.RemoteFolder):
        data, directory = remote_prepared.RemotePreparedSet(found, split), found.url
    else:
        data, directory = records.PreparedSet(found, split), found
    records.check_compatible(
        data.meta,
        directory,
        vocab_file=run_vocabulary.tokenizer_of(c).vocab_file,
        max_seq_length=max_seq_length,
        nsp=c.nsp,
        do_lower_case=c.lower_case,
        full_sentences=c.full_sentences,
    )
    if data.size == 0 and split == "eval":
        hint = "prepare with --eval_fraction > 0 or set data.eval_files"
        raise records.NoHeldOutData(f"{directory} holds no held-out examples ({hint})")
    if data.size == 0:
        raise records.PreparedDataError(f"{directory} has no training examples")
    if data.size >= 2**31:
        raise records.PreparedDataError(f"{directory}: {data.size} examples; split it (ids are int32)")
    return data
