"""Checkpoints in a bucket (``gs://...``): every format `convert` reads, from a local copy.

A released BERT is often kept in a bucket (the original ``run_pretraining.py
--init_checkpoint=gs://.../bert_model.ckpt``), and so is a pod run's workdir. The three
formats' readers (safetensors, TF's checkpoint reader, orbax's restore with its checks of
the folder) are all run on one local folder: `local_copy` makes it, once per machine and
checkpoint, and every later call (this process, a rerun, the next phase) finds it.

What is copied is what a load reads, not the whole folder:
- a TF checkpoint given by its prefix (``.../bert_model.ckpt``, or its ``.index``): that
  prefix's files, with ``bert_config.json`` and the tokenizer files beside it;
- a pre-training or fine-tuning workdir: its config, tokenizer and task files and its latest
  checkpoint (``checkpoints/<step>/``; on a bucket, the latest orbax marked committed), not
  the earlier steps, metrics, TensorBoard events or ``best_model/``;
- a bert_jax export: its config, tokenizer and task files and ``params/``;
- a TF folder: its first checkpoint's files (the one the TF reader reads) and the files
  beside them;
- a Hugging Face folder: its top-level files, without the weights of other frameworks
  beside ``model.safetensors`` (``pytorch_model.bin``, ``tf_model.h5``...).

A run's settings and a `plan` read only the config, tokenizer and task files (a copy of
its own, ``weights=False``); the weights are copied where they are loaded. A copy
(``<cache>/checkpoint-<hash of the URL>-<folder>``; the cache is
``$BERT_JAX_BUCKET_COPIES``, else ``~/.cache/bert_jax/bucket_copies``) is made under a
temporary name and renamed into place whole, its record (each object's size and
generation) last: a copy that stopped half-way is never read, and a checkpoint written
again in the bucket is copied again. Several processes of one machine (local pod tests)
may copy at once; the first to finish is kept.
"""

from __future__ import annotations

import os
import re

from bert_jax.convert import formats
from bert_jax.convert.bert_jax_format import HEAD_FILE, TASK_RECORD
from bert_jax.data import remote_copy, tokenization
from bert_jax.storage import files, run_steps

# Weights of other frameworks a Hugging Face folder may hold beside model.safetensors.
_OTHER_WEIGHTS = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack", "rust_model.ot", "model.onnx")
# Files a load may read beside a bert_jax or TF checkpoint's weights (config, tokenizer and
# its casing, a fine-tuned model's task head).
_BESIDE = ("bert_config.json", TASK_RECORD, HEAD_FILE, tokenization.CASING_FILE, *tokenization.SAVED_NAMES)

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".ot", ".onnx", ".pt")

# The local copy of each checkpoint URL (whole, or its config files: `local_copy`'s
# `weights`) this process has made or found, and each one's format.
_COPIES: dict[tuple[str, bool, str], str] = {}
_FORMATS: dict[str, str] = {}


def local_copy(path: str, root: str = "", *, weights: bool = True) -> str:
    """`path` itself when it is local; for a checkpoint in a bucket, the local path that
    stands for it (a folder, or a TF prefix in one), copied into `root` (default
    `remote_copy.copies_root`) unless a whole copy of the same objects is there. Without
    `weights`, only its config, tokenizer and task files (what `checkpoint_config` and
    `label_names` read: a plan or a run's settings need no weights)."""
    if not files.is_remote(path):
        return path
    url = path.rstrip("/")
    if (url, weights, root) in _COPIES:
        return _COPIES[url, weights, root]
    files.check_reachable(url, "checkpoint")  # one line, within a bound, if it cannot be
    folder, wanted, prefix, fmt = _checkpoint_files(url)
    if not weights:
        wanted = {k: v for k, v in wanted.items() if "/" not in k and not _is_weights(k)}
    kind = "checkpoint" if weights else "checkpoint-config"
    local = remote_copy.local_listed(folder, wanted, kind=kind, name=url, root=root)
    _COPIES[url, weights, root] = os.path.join(local, prefix) if prefix else local
    _FORMATS[url] = fmt
    return _COPIES[url, weights, root]


def format_of(url: str) -> str:
    """``hf``, ``tf`` or ``bert_jax`` for a checkpoint in a bucket, by the names there."""
    url = url.rstrip("/")
    if url not in _FORMATS:
        local_copy(url, weights=False)
    return _FORMATS[url]


def _is_weights(name: str) -> bool:
    """A file of weights (a TF shard, safetensors, a PyTorch or Keras file...), not a
    config, tokenizer or index file."""
    return ".data-" in name or name.endswith(_WEIGHT_SUFFIXES)


def _checkpoint_files(url: str) -> tuple[str, dict[str, list[int]], str, str]:
    """The bucket folder a load of `url` reads from, the files of it a load reads (size and
    generation by relative path), for a TF checkpoint the prefix of its files (given, or
    the first ``*.index`` of a folder, as the TF reader takes it), and the format."""
    step_of_run = _run_step_files(url)
    if step_of_run is not None:
        return step_of_run
    found = _listing(url)
    if not found:  # a TF prefix (or its .index), not a folder
        folder, prefix = url.rsplit("/", 1)
        prefix = prefix.removesuffix(".index")
        beside = {k: v for k, v in _listing(folder).items() if "/" not in k}
        if f"{prefix}.index" not in beside:
            raise remote_copy.RemoteReadError(
                f"cannot read {url}: no such folder, and no TF checkpoint {prefix}.index"
            )
        return folder, _tf_files(beside, prefix), prefix, "tf"
    top = {k: v for k, v in found.items() if "/" not in k}
    subfolders = {k.split("/", 1)[0] for k in found if "/" in k}
    fmt = formats.of_names(set(top) | subfolders)
    if fmt is None:
        inside = [d for d in sorted(subfolders) if formats.of_names(_names_in(found, f"{d}/"))]
        raise formats.not_a_checkpoint(url, inside)
    if fmt == "bert_jax":  # an export's params/, else a workdir's latest checkpoint
        inner = "params/" if "params" in subfolders else f"checkpoints/{_latest_step(url, found)}/"
        beside = {k: v for k, v in top.items() if k in _BESIDE}
        return url, {**beside, **{k: v for k, v in found.items() if k.startswith(inner)}}, "", fmt
    if fmt == "tf":  # a folder: its first checkpoint's files
        prefix = min(k for k in top if k.endswith(".index")).removesuffix(".index")
        return url, _tf_files(top, prefix), "", fmt
    if "model.safetensors" in top:
        top = {k: v for k, v in top.items() if k not in _OTHER_WEIGHTS}
    return url, top, "", fmt


def _run_step_files(url: str) -> tuple[str, dict[str, list[int]], str, str] | None:
    """A run's ``.../best``, ``.../checkpoints`` or one step in them (`storage.run_steps`):
    the workdir's config and tokenizer files and that step's folder, the local path being
    the step's folder in the copy. None for any other URL."""
    m = re.match(rf"^(.+)/({'|'.join(run_steps.FOLDERS)})(?:/(\d+))?$", url)
    if m is None:
        return None
    workdir, folder, step = m.groups()
    beside = {k: v for k, v in _listing(workdir).items() if "/" not in k}
    if run_steps.CONFIG not in beside:
        return None
    found = {f"{folder}/{k}": v for k, v in _listing(f"{workdir}/{folder}").items()}
    step = step or _latest_step(f"{workdir}/{folder}", found, folder)
    inner = f"{folder}/{step}/"
    wanted = {k: v for k, v in found.items() if k.startswith(inner)}
    if not wanted:
        held = sorted({m.group(1) for k in found if (m := re.match(rf"{folder}/(\d+)/", k))}, key=int)
        raise remote_copy.RemoteReadError(
            f"{url} does not exist (the steps saved there: {', '.join(held) or 'none'})"
        )
    files_beside = {k: v for k, v in beside.items() if k in _BESIDE}
    return workdir, {**files_beside, **wanted}, f"{folder}/{step}", "bert_jax"


def _tf_files(beside: dict[str, list[int]], prefix: str) -> dict[str, list[int]]:
    """A TF checkpoint's files (``prefix.*``) and the config and tokenizer files beside them."""
    return {k: v for k, v in beside.items() if k.startswith(f"{prefix}.") or k in _BESIDE}


def _listing(url: str) -> dict[str, list[int]]:
    """`files.tree(url)`; an error other than a bucket that did not answer as one line
    naming `url` (no permission, ...)."""
    return remote_copy.reading(url, lambda: files.tree(url))


def _names_in(found: dict[str, list[int]], prefix: str) -> set[str]:
    """The files and subfolders directly in the listing's folder `prefix` (``model/``)."""
    return {k[len(prefix) :].split("/", 1)[0] for k in found if k.startswith(prefix)}


def _latest_step(url: str, found: dict[str, list[int]], folder: str = "checkpoints") -> str:
    """A workdir's latest checkpoint step: the highest ``<folder>/<step>/``, among those
    orbax marked committed (``commit_success.txt``, written on a bucket) where any is."""
    steps = {m.group(1) for k in found if (m := re.match(rf"{folder}/(\d+)/", k))}
    committed = {s for s in steps if f"{folder}/{s}/commit_success.txt" in found}
    if not steps:
        raise remote_copy.RemoteReadError(f"{url}: no params/ and no {folder}/<step>/ in it")
    return max(committed or steps, key=int)
