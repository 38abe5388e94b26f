"""`bert-jax finetune --evaluate`: a fine-tuned checkpoint's own head scored on a task's
evaluation splits, nothing trained.

The checkpoint (``init_checkpoint``) is an earlier run's ``best_model/``, a bert_jax export
with a task head, or a `transformers` folder of the task's class
(`BertForSequenceClassification` for GLUE, BBC and the offline classification tasks,
`BertForTokenClassification` for CoNLL-2003, `BertForQuestionAnswering` for SQuAD,
`BertForMultipleChoice` for SWAG: `convert.layout.TASK_HEADS`); the task's data, lengths
and batches come from the config, as a run's evaluation. Classes the checkpoint names
(``id2label``, a ``best_model``'s ``task.json``) are matched to the task's by name (case
aside), whatever their order: MNLI's three are ordered differently across published
models. A checkpoint that names none, or other names, is taken in the task's order, said
in one warning line. Writes the task's prediction files under ``eval/<split>/`` and the
scores in ``evaluation.json``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import numpy as np

from bert_jax import convert
from bert_jax.convert import layout
from bert_jax.finetuning.finetune import Finetuning, FinetuningInputs, load_inputs
from bert_jax.finetuning.outputs import load_saved_params, write_json
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.model import param_shapes
from bert_jax.training import engine
from bert_jax.training.results import JobResult

RESULTS = "evaluation.json"


def evaluate_checkpoint(settings: FinetuneSettings, workdir: str, *, overwrite: bool = False) -> JobResult:
    """The scores of ``settings.init_checkpoint``'s own head on the task's evaluation splits
    (the first split's keys plain, others ``split/key``), written to `workdir`. An earlier
    evaluation there of another checkpoint or config is refused unless `overwrite`."""
    if not settings.init_checkpoint:
        raise ValueError(
            "--evaluate scores a fine-tuned checkpoint: set --config.init_checkpoint (a best_model/ "
            "folder, or a transformers folder of the task's class)"
        )
    checkpoint = settings.init_checkpoint
    settings = settings.for_checkpoint(checkpoint)
    check_earlier(os.path.abspath(workdir), checkpoint, settings.config, overwrite)
    inputs = load_inputs(settings, read_train=False)
    ft = Finetuning(settings, inputs, total_steps=1, trains=False)
    params = engine.place_tree(checkpoint_params(checkpoint, inputs), ft.engine.state_shardings.params)
    workdir = os.path.abspath(workdir)
    scores = ft.evaluate(params, os.path.join(workdir, "eval"))
    if jax.process_index() == 0:
        write_json(
            os.path.join(workdir, RESULTS),
            {"task": inputs.task.name, "checkpoint": checkpoint, "config": settings.config, "scores": scores},
        )
        print(f"{inputs.task.name} of {checkpoint}: " + "  ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        print(f"scores: {os.path.join(workdir, RESULTS)}", flush=True)
    return JobResult(step=0, metrics=scores)


def check_earlier(workdir: str, checkpoint: str, config: dict[str, Any], overwrite: bool) -> None:
    """Refuses, in one line, to replace the evaluation `workdir` holds of another
    checkpoint or config (the same one is computed again)."""
    path = os.path.join(workdir, RESULTS)
    if overwrite or not os.path.exists(path):
        return
    try:
        with open(path) as f:
            earlier = json.load(f)
    except (OSError, ValueError):
        earlier = {}
    same_config = earlier.get("config") == json.loads(json.dumps(config, default=str))
    if earlier.get("checkpoint") != checkpoint or not same_config:
        raise ValueError(
            f"--workdir {workdir} holds the evaluation of {earlier.get('checkpoint', 'another run')} with "
            "another config or checkpoint: pass --overwrite to replace it, or another --workdir"
        )


def checkpoint_params(checkpoint: str, inputs: FinetuningInputs) -> dict[str, Any]:
    """The task model's params with the checkpoint's encoder and its own head (the classes
    in the task's order, `label_order`); one line when it holds no head of the task's kind."""
    task = inputs.task
    kind = layout.task_head_name(task.model(inputs.bert_config))
    head = inputs.checkpoint_head
    if head is None and os.path.exists(os.path.join(checkpoint, "head.msgpack")):
        return load_saved_params(checkpoint, inputs)  # a best_model/ of a head with no kind recorded
    if kind is None or head is None or head[0] != kind:
        holds = f"a {layout.TASK_HEADS[head[0]][0]}" if head is not None else "no task head"
        wanted = f"a {layout.TASK_HEADS[kind][0]}" if kind else "a BiLSTM head"
        raise ValueError(
            f"--config.init_checkpoint {checkpoint} holds {holds}, not {wanted} for {task.name}: --evaluate "
            "scores a checkpoint fine-tuned for the task (its best_model/, or a transformers folder of "
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
