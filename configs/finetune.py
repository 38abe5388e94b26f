"""Any fine-tuning task by name: `--config=configs/finetune.py:TASK`.

TASK is a GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli), bbc,
squad1.1, squad2.0, conll2003 or swag; the config comes from the task's own file
(configs/glue.py, bbc.py, squad.py, ner.py, swag.py).
"""

from __future__ import annotations

import importlib.util
import os

import ml_collections


def _load(name: str):
    """A sibling config file as a module (config_flags loads files by path, so the
    `configs` folder need not be importable)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_finetune_config_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def get_config(task: str = "bbc") -> ml_collections.ConfigDict:
    glue = _load("glue")
    if task in glue.TASKS:
        return glue.get_config(task)
    if task in ("squad1.1", "squad2.0"):
        return _load("squad").get_config(task[len("squad") :])
    if task == "conll2003":
        return _load("ner").get_config()
    if task in ("bbc", "swag"):
        return _load(task).get_config()
    raise ValueError(
        f"unknown task {task!r}: a GLUE task ({', '.join(glue.TASKS)}), bbc, squad1.1, "
        "squad2.0, conll2003 or swag"
    )
