"""A pre-training workdir's model description, ``bert_config.json``: written once the run
is accepted, checked before any restore, and the source of the restore transform for
checkpoints saved with other vocabulary padding (`model.vocab_padding.RowResize`).

The model alone goes to disk (`BertConfig`: shapes and architecture); how the run computes
it (`model.numerics.Numerics`) does not, except for the one choice its checkpoints' layout
depends on: whether the layers are scanned (``scan_layers``, which `BertConfig.from_dict`
ignores), so that a resumed run keeps it (`layer_loop`). Its `vocab_size` is the run's resolved one
(`model_vocab.resolved`: ``model.vocab_size=0`` becomes the tokenizer's size first), never 0.
"""

from __future__ import annotations

import jax

from bert_jax.model import vocab_padding
from bert_jax.model.config import ARCHITECTURE_KEYS, SHAPE_KEYS, BertConfig
from bert_jax.storage import atomic_files, files
from bert_jax.training.checkpoints import CheckpointMismatchError

NAME = "bert_config.json"


def _saved(workdir: str) -> dict | None:
    return files.read_json_if_exists(files.join(workdir, NAME))


def _require_vocab_size(config: BertConfig) -> None:
    if config.vocab_size < 1:
        raise ValueError(
            f"{NAME} takes the run's vocabulary size, not vocab_size={config.vocab_size}: "
            "resolve model.vocab_size=0 to the tokenizer's size first (`model_vocab.resolved`)"
        )


def check(workdir: str, config: BertConfig) -> None:
    """Requires the model shape of the workdir's `bert_config.json`, if there is one.

    Only reads: a refused run leaves the workdir as it was (`write` follows once the run is
    accepted)."""
    _require_vocab_size(config)
    saved = _saved(workdir)
    if saved is None:
        return
    current = config.to_dict()
    # A config written before the recipe switches existed is the paper's architecture.
    defaults = BertConfig().to_dict()
    saved = {**{k: defaults[k] for k in ARCHITECTURE_KEYS}, **saved}
    diffs = [
        f"{k}: checkpoint {saved.get(k)} vs config {current[k]}"
        for k in SHAPE_KEYS + ARCHITECTURE_KEYS
        if saved.get(k) != current[k]
    ]
    if diffs:
        raise CheckpointMismatchError(
            f"workdir {workdir} holds a checkpoint of another model: " + "; ".join(diffs)
        )


def layer_loop(workdir: str, requested: str) -> str:
    """The layer loop (`Numerics.layer_loop`) of a run in `workdir`: the one its
    checkpoints were saved with ("scan" or "unroll", from `bert_config.json`) when
    `requested` is "auto" (a warning line when that is not the platform's choice is left
    to the caller), else `requested`; an explicit loop the checkpoints do not have is
    refused in one line (their parameters are stacked, or not)."""
    saved = _saved(workdir)
    if saved is None or "scan_layers" not in saved:
        return requested
    held = "scan" if saved["scan_layers"] else "unroll"
    if requested in ("auto", held):
        return held
    kind = "scanned" if held == "scan" else "unrolled"
    raise CheckpointMismatchError(
        f"workdir {workdir} holds checkpoints of {kind} layers: resume with "
        f"--config.layer_loop={held} (or auto), or start a new workdir for layer_loop={requested}"
    )


def write(workdir: str, config: BertConfig, scanned: bool) -> None:
    """Writes `bert_config.json` (whole; process 0) unless the workdir has one: the model
    and whether its checkpoints hold scanned layers (`scanned`)."""
    _require_vocab_size(config)
    path = files.join(workdir, NAME)
    if jax.process_index() != 0 or files.exists(path):
        return
    atomic_files.write_json(path, {**config.to_dict(), "scan_layers": scanned}, indent=2)


def restore_transform(workdir: str) -> vocab_padding.RowResize | None:
    """The vocabulary-padding transform for the workdir's checkpoints (their real rows are
    the saved `vocab_size`), or None for a workdir without a model file."""
    saved = _saved(workdir)
    return None if saved is None else vocab_padding.RowResize(int(saved["vocab_size"]))
