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
from flax import serialization

from bert_jax.convert import layout
from bert_jax.convert.layout import Params
from bert_jax.model.config import BertConfig
from bert_jax.storage import run_steps


def save_bert_jax(
    folder: str, params: Params, config: BertConfig, label_names: list[str] | None = None
) -> None:
    """Params (scanned or not, padded or not) → ``folder/params`` and ``bert_config.json``.

    The tensors are written unpadded; the config keeps `vocab_pad_multiple`, so that a
    load pads them again. A task head (`layout.TASK_HEADS`) is written beside them, its
    kind and `label_names` in `TASK_RECORD`."""
    params, head = layout.split_task_head(params)
    params = layout.canonical(params, config)
    layout.validate(params, config, "params to export")
    params = layout.with_task_head(params, head, config, "params to export")
    folder = os.path.abspath(folder)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "bert_config.json"), "w") as f:
        json.dump(config.to_dict(), f, indent=2)
    checkpointer = ocp.StandardCheckpointer()
    checkpointer.save(os.path.join(folder, "params"), params, force=True)
    checkpointer.wait_until_finished()
    write_head_record(folder, params, label_names)


TASK_RECORD = "task.json"  # a fine-tuned model's task, and its head's kind and labels
HEAD_FILE = "head.msgpack"  # a fine-tuned model's task head (`finetuning.outputs.save_model`)


def head_record(folder: str) -> dict:
    """The ``head`` of a folder's `TASK_RECORD` (``{"kind": TASK_HEADS key, "labels": [...]}``),
    or {} where there is none."""
    path = os.path.join(folder, TASK_RECORD)
    if not os.path.exists(path):
        return {}
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} cannot be read: {e}") from None
    return (record.get("head") or {}) if isinstance(record, dict) else {}


def finetuned_head(folder: str) -> layout.TaskHead | None:
    """The task head of a fine-tuned model folder (`HEAD_FILE`, of the kind its
    `TASK_RECORD` names); None without one, or for a head of no `layout.TASK_HEADS` kind
    (the feature-based BiLSTM, a folder saved before kinds were recorded): the encoder
    then loads alone (`convert` says so)."""
    path = os.path.join(folder, HEAD_FILE)
    kind = head_record(folder).get("kind")
    if not os.path.exists(path) or kind not in layout.TASK_HEADS:
        return None
    with open(path, "rb") as f:
        head = serialization.msgpack_restore(f.read())
    if len(head) != 1:
        held = ", ".join(head)
        raise ValueError(f"{path} holds {len(head)} heads ({held}), not the one {TASK_RECORD} names")
    (tensors,) = head.values()
    return kind, tensors


def write_head_record(folder: str, params: Params, labels: list[str] | None) -> None:
    """A `TASK_RECORD` naming the task head of `params` (none without one) and its labels."""
    _, head = layout.split_task_head(params)
    if head is not None:
        with open(os.path.join(folder, TASK_RECORD), "w") as f:
            json.dump({"head": {"kind": head[0], "labels": list(labels or [])}}, f, indent=2)


def _restore_workdir_params(workdir: str, saved: run_steps.RunStep | None = None) -> Params:
    """Only the ``params`` of a train state of the run in ``workdir``: the latest in
    ``checkpoints/<step>/``, or the one `saved` names (``best/``, a step).

    A partial restore: the optimizer state (twice the size of the params for Adam) is
    never read.
    """
    saved = saved or run_steps.RunStep(workdir, "checkpoints", None)
    folder = os.path.join(workdir, saved.folder)
    manager = ocp.CheckpointManager(folder, item_handlers=ocp.PyTreeCheckpointHandler())
    try:
        steps = manager.all_steps()
        step = saved.step if saved.step is not None else manager.latest_step()
        if step is None:
            raise ValueError(f"{workdir}: no params/ and no {saved.folder}/<step>/ in it")
        if step not in steps:
            held = ", ".join(map(str, sorted(steps))) or "none"
            raise ValueError(f"{folder}/{step} is not a saved step of the run (its steps: {held})")
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
    if saved.step is not None:
        print(f"{workdir}: the weights of step {step} ({saved.folder}/{step})", flush=True)
    else:
        which = "latest" if saved.folder == "checkpoints" else "best"
        print(f"{workdir}: the weights of its {which} checkpoint, step {step}", flush=True)
    params = restored["params"]
    # A fine-tuning workdir holds `bert` plus a task head: the encoder is what converts.
    if "mlm" not in params:
        dropped = sorted(k for k in params if k != "bert")
        if dropped:
            logging.warning("%s: keeping the encoder, not converting %s", workdir, dropped)
        params = {"bert": params["bert"]} if "bert" in params else params
    return params


def read_bert_jax_config(path: str) -> BertConfig:
    """The `bert_config.json` of a bert_jax export or workdir."""
    path = run_steps.workdir_of(os.path.abspath(path))
    return layout.read_config(os.path.join(path, "bert_config.json"), path)


def load_bert_jax(path: str, expected: BertConfig | None = None) -> tuple[Params, BertConfig]:
    """A bert_jax export folder, or a workdir (its latest checkpoint), padded for its config.

    Exports and workdirs written before `vocab_pad_multiple` existed (no such key in
    `bert_config.json`) load unpadded, as they were saved; a workdir whose checkpoints
    hold more vocabulary rows than its config says (a run resumed with padding) loads
    with the padding its config gives."""
    path = os.path.abspath(path)
    config = read_bert_jax_config(path)
    layout.check_expected(config, expected, path)
    saved = run_steps.parse(path)  # a run's best/, checkpoints/ or one step in them
    if saved is not None:
        params, path = _restore_workdir_params(saved.workdir, saved), saved.workdir
    elif os.path.isdir(os.path.join(path, "params")):
        try:
            params = ocp.StandardCheckpointer().restore(os.path.join(path, "params"))
        except Exception as e:
            raise ValueError(f"{path}/params is not a readable orbax checkpoint: {e}") from e
    else:
        params = _restore_workdir_params(path)
    params, head = layout.split_task_head(params)
    params = layout.canonical(params, config)
    layout.validate(params, config, path)
    params = layout.for_config(params, config)
    return layout.with_task_head(params, head or finetuned_head(path), config, path), config
