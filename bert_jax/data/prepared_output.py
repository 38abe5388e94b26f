"""Whether a preparation may write into its folder, checked before anything is written.

A folder is prepared into when it is new or empty, or when it holds an unfinished
preparation of the same settings: the same flags, vocabulary and inputs (the shards'
``.json`` records), which is then resumed, its finished shards kept. A finished
preparation (``metadata.json``), or one of other settings, is refused in one line unless
``overwrite`` is given, and then its files are removed first (`user_paths.replace`); a
folder holding anything that is not a preparation's file is refused even then.
"""

from __future__ import annotations

import json
import os

from bert_jax.data import records, user_paths


def is_own(name: str) -> bool:
    """A file a preparation writes: its shards (and their temporary files), metadata.json."""
    return name.startswith((records.METADATA, "shard-"))


def check_folder(
    out_dir: str,
    inputs: dict[str, str],
    flags: dict,
    vocab_sha256: str,
    *,
    overwrite: bool = False,
    name: str = "--output_dir",
) -> list[str]:
    """The files to remove before preparing (only with `overwrite`); raises where the
    folder must not be prepared into. `inputs` maps each shard's stem to its input's
    description, `name` is how messages call the folder (a flag, or "cache folder")."""
    entries = user_paths.earlier_output(out_dir, name, is_own)  # refuses a file, foreign files
    if not entries:
        return []
    problem = _other_settings(out_dir, entries, inputs, flags, vocab_sha256)
    if problem is None:
        return []  # an unfinished preparation of these settings: resumed
    if not overwrite:
        raise ValueError(
            f"{name} {out_dir} {problem}: pass --overwrite to prepare it anew, or use another {name}"
        )
    return [os.path.join(out_dir, e) for e in entries]


def _other_settings(
    out_dir: str, entries: list[str], inputs: dict[str, str], flags: dict, vocab_sha256: str
) -> str | None:
    """What makes the folder's contents not a resumable part of this preparation (None
    where they are one)."""
    if records.METADATA in entries:
        meta = _read(os.path.join(out_dir, records.METADATA))
        if meta.get("flags") != flags:
            return f"holds a preparation with other flags ({records.METADATA}: {meta.get('flags')})"
        return f"already holds a finished preparation ({records.METADATA})"
    for entry in entries:
        if entry.startswith(records.METADATA):
            continue  # metadata.json being written (its temporary file): by a finishing host
        stem = entry.split(".", 1)[0]
        if stem not in inputs:
            return f"holds shards of another list of inputs ({entry}; these inputs make {len(inputs)} shards)"
        if entry != f"{stem}.json":
            continue
        info = _read(os.path.join(out_dir, entry))
        if info.get("flags") != flags:
            return f"holds a preparation with other flags ({entry}: {info.get('flags')})"
        if not _same_input(info.get("input", ""), inputs[stem]):
            return f"holds a preparation of other inputs ({entry}: {info.get('input')}, not {inputs[stem]})"
        if info.get("vocab_sha256", vocab_sha256) != vocab_sha256:
            return f"holds a preparation with another vocabulary ({entry})"
    return None


def _same_input(recorded: str, expected: str) -> bool:
    return recorded == expected or os.path.abspath(recorded) == os.path.abspath(expected)


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} cannot be read as a preparation's record ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not a preparation's record")
    return value
