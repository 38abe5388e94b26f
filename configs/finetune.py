"""Any fine-tuning task by name: `--config=configs/finetune.py:TASK`.

TASK is a GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli), bbc,
squad1.1, squad2.0, conll2003, swag, a task of the offline downstream suite (disfl_qa,
cpkc, dialog_pairs, vitaminc, rotten_tomatoes), or classify or tag (your own files); the
config comes from the task's own file (configs/glue.py, bbc.py, squad.py, ner.py,
swag.py, downstream.py, classify.py, tag.py).
"""

from __future__ import annotations

import ml_collections

from bert_jax.training import run_config


def _load(name: str):
    return run_config.sibling(__file__, name)


def get_config(task: str = "bbc") -> ml_collections.ConfigDict:
    glue = _load("glue")
    if task in glue.TASKS:
        return glue.get_config(task)
    if task in ("squad1.1", "squad2.0"):
        return _load("squad").get_config(task[len("squad") :])
    if task == "conll2003":
        return _load("ner").get_config()
    if task in ("bbc", "swag", "classify", "tag"):
        return _load(task).get_config()
    downstream = _load("downstream")
    if task in downstream.TASKS:
        return downstream.get_config(task)
    raise ValueError(
        f"unknown task {task!r}: a GLUE task ({', '.join(glue.TASKS)}), bbc, squad1.1, "
        f"squad2.0, conll2003, swag, a downstream task ({', '.join(downstream.TASKS)}), classify or tag"
    )
