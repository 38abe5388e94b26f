"""A checkpoint's own task head, as a fine-tuning run starts from it or leaves it out.

A fine-tuned checkpoint (an earlier run's ``best_model/``, a bert_jax export with a task
head, a `transformers` folder of the task's class: `convert.layout.TASK_HEADS`) carries
the head it was fine-tuned with. `--evaluate` scores it (`checkpoint_params`); a run with
``keep_head=True`` trains on from it, as the paper's best SQuAD system was fine-tuned on
TriviaQA first and then on SQuAD (Devlin et al., 2019, §4.2); otherwise the run starts a
fresh head and says in one line that the checkpoint's is left out. Classes the checkpoint
names (``id2label``, a ``best_model``'s ``task.json``) are matched to the task's by name
(case aside), whatever their order (`label_order`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import numpy as np

from bert_jax import convert
from bert_jax.convert import layout
from bert_jax.convert.bert_jax_format import HEAD_FILE
from bert_jax.finetuning.outputs import load_saved_params
from bert_jax.model import param_shapes


def _only_saved(checkpoint: str, inputs: Any) -> bool:
    """Whether the checkpoint's head is a best_model/'s `HEAD_FILE` alone (saved before
    its kind was recorded: not read as a task head by `convert`)."""
    if inputs.checkpoint_head is not None:
        return False
    return os.path.exists(os.path.join(convert.local_copy(checkpoint), HEAD_FILE))  # a bucket's: its copy


def checkpoint_params(checkpoint: str, inputs: Any, use: str) -> dict[str, Any]:
    """The task model's params (`finetune.FinetuningInputs`) with the checkpoint's encoder
    and its own head (the classes in the task's order); one line naming `use` (what asked
    for the head) when the checkpoint holds no head of the task's kind."""
    task = inputs.task
    kind = layout.task_head_name(task.model(inputs.bert_config))
    head = inputs.checkpoint_head
    if _only_saved(checkpoint, inputs):
        # a best_model/ of a head with no kind recorded
        return load_saved_params(convert.local_copy(checkpoint), inputs)
    if kind is None or head is None or head[0] != kind:
        holds = f"a {layout.TASK_HEADS[head[0]][0]}" if head is not None else "no task head"
        wanted = f"a {layout.TASK_HEADS[kind][0]}" if kind else "a BiLSTM head"
        raise ValueError(
            f"--config.init_checkpoint {checkpoint} holds {holds}, not {wanted} for {task.name}: {use} "
            "a checkpoint fine-tuned for the task (its best_model/, or a transformers folder of "
            f"{layout.TASK_HEADS[kind][1] if kind else 'its class'})"
        )
    tensors = {k: np.asarray(v) for k, v in head[1].items()}
    if task.label_names:
        order = label_order(convert.label_names(checkpoint), list(task.label_names), checkpoint, task.name)
        tensors = {"kernel": tensors["kernel"][:, order], "bias": tensors["bias"][order]}
    name = layout.head_module_name(kind)
    fitted = param_shapes.merge_params(
        inputs.params[name], tensors, f"{checkpoint}'s {layout.TASK_HEADS[kind][0]}"
    )
    return {**inputs.params, name: fitted}


def label_order(given: list[str] | None, wanted: list[str], checkpoint: str, task: str) -> list[int]:
    """The checkpoint's output index of each of the task's classes: by name where the
    checkpoint names the same classes (case aside), else in order with a warning line."""
    if given and sorted(n.lower() for n in given) == sorted(n.lower() for n in wanted):
        lowered = [n.lower() for n in given]
        return [lowered.index(n.lower()) for n in wanted]
    if given:
        why = f"names its classes {given}, {task}'s are {wanted}"
    else:
        why = "does not name its classes"
    print(f"warning: {checkpoint} {why}: taken in {task}'s order {wanted}", flush=True)
    return list(range(len(wanted)))


def starting_params(keep_head: bool, checkpoint: str, inputs: Any) -> Any:
    """`inputs` as a training run starts from them: with `keep_head` the checkpoint's own
    head in place of the fresh one; without it, a warning line when the checkpoint holds a
    task head that the fresh one replaces."""
    if keep_head:
        params = checkpoint_params(checkpoint, inputs, "--config.keep_head=true continues from")
        return dataclasses.replace(inputs, params=params)
    head, saved = inputs.checkpoint_head, _only_saved(checkpoint, inputs)
    if head is None and not saved:
        return inputs
    held = f"its {layout.TASK_HEADS[head[0]][0]}" if head is not None else f"the head in its {HEAD_FILE}"
    kind = layout.task_head_name(inputs.task.model(inputs.bert_config))
    again = saved or (head is not None and head[0] == kind)
    print(
        f"warning: {checkpoint} is fine-tuned: {inputs.task.name} starts a fresh head, not {held}"
        + (" (--config.keep_head=true continues from it)" if again else ""),
        flush=True,
    )
    return inputs
