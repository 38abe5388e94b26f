"""The bert_jax format: a folder with ``bert_config.json`` and an orbax checkpoint of the
params under ``params/`` (per-layer names, the vocabulary unpadded); a pre-training or
fine-tuning workdir (``checkpoints/<step>/``) is read as well."""

from __future__ import annotations

import json
import os

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from bert_jax.convert import layout
from bert_jax.convert.layout import Params
from bert_jax.model.config import BertConfig


def save_bert_jax(folder: str, params: Params, config: BertConfig) -> None:
    """Params (scanned or not, padded or not) → ``folder/params`` and ``bert_config.json``.

    The tensors are written unpadded; the config keeps `vocab_pad_multiple`, so that a
    load pads them again. A sequence classifier (``classifier``) is written beside them."""
    params, classifier = layout.split_classifier(params)
    params = layout.canonical(params, config)
    layout.validate(params, config, "params to export")
    if classifier is not None:
        params["classifier"] = layout.check_classifier(classifier, config, "params to export")
    folder = os.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "bert_config.json"), "w") as f:
        json.dump(config.to_dict(), f, indent=2)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(folder, "params"), params, force=True)
    checkpointer.wait_until_finished()


def _restore_workdir_params(workdir: str) -> Params:
    """Only the ``params`` of the latest train state in ``workdir/checkpoints/<step>/``.

    A partial restore: the optimizer state (twice the size of the params for Adam) is
    never read.
    """
    manager = ocp.CheckpointManager(
        os.path.join(workdir, "checkpoints"), item_handlers=ocp.PyTreeCheckpointHandler()
    )
    try:
        step = manager.latest_step()
        if step is None:
            raise ValueError(f"{workdir}: no params/ and no checkpoints/<step>/ in it")
        metadata = manager.item_metadata(step)
        tree = getattr(metadata, "tree", metadata)
        if not isinstance(tree, dict) or "params" not in tree:
            raise ValueError(f"{workdir}/checkpoints/{step} holds no train state with params")
        target = {"params": jax.tree.map(lambda m: np.zeros(m.shape, m.dtype), tree["params"])}
        restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), target)
        restored = manager.restore(
            step,
            args=ocp.args.PyTreeRestore(item=target, restore_args=restore_args, partial_restore=True),
        )
    finally:
        manager.close()
    print(f"{workdir}: the weights of its latest checkpoint, step {step}", flush=True)
    params = restored["params"]
    # A fine-tuning workdir holds `bert` plus a task head: the encoder is what converts.
    if "mlm" not in params:
        dropped = sorted(k for k in params if k != "bert")
        if dropped:
            logging.warning("%s: keeping the encoder, not converting %s", workdir, dropped)
        params = {"bert": params["bert"]} if "bert" in params else params
    return params


def load_bert_jax(path: str, expected: BertConfig | None = None) -> tuple[Params, BertConfig]:
    """A bert_jax export folder, or a workdir (its latest checkpoint), padded for its config.

    Exports and workdirs written before `vocab_pad_multiple` existed (no such key in
    `bert_config.json`) load unpadded, as they were saved; a workdir whose checkpoints
    hold more vocabulary rows than its config says (a run resumed with padding) loads
    with the padding its config gives."""
    path = os.path.abspath(path)
    config = layout.read_config(os.path.join(path, "bert_config.json"), path)
    layout.check_expected(config, expected, path)
    if os.path.isdir(os.path.join(path, "params")):
        try:
            params = ocp.StandardCheckpointer().restore(os.path.join(path, "params"))
        except Exception as e:
            raise ValueError(f"{path}/params is not a readable orbax checkpoint: {e}") from e
    else:
        params = _restore_workdir_params(path)
    params, classifier = layout.split_classifier(params)
    params = layout.canonical(params, config)
    layout.validate(params, config, path)
    params = layout.for_config(params, config)
    if classifier is not None:
        params["classifier"] = layout.check_classifier(classifier, config, path)
    return params, config
