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

from bert_jax.finetuning import checkpoint_head
from bert_jax.finetuning.finetune import Finetuning, load_inputs
from bert_jax.finetuning.outputs import write_json
from bert_jax.finetuning.settings import FinetuneSettings
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
    own = checkpoint_head.checkpoint_params(checkpoint, inputs, "--evaluate scores")
    params = engine.place_tree(own, ft.engine.state_shardings.params)
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
