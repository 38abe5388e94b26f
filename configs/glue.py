"""GLUE: `--config=configs/glue.py:TASK` (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli).

The paper's settings (§4.1): max sequence 128, batch 32, 3 epochs, lr from
5e-5/4e-5/3e-5/2e-5 chosen on dev (`bert-jax finetune --sweep` runs the grid).
`data_dir` is the folder of the GLUE download (`<data_dir>/SST-2/train.tsv`, ...), the
task's own folder (`<data_dir>/train.tsv`), or `tfds` (`tfds:<dir>` for a TFDS data
folder). `predict_test=True` writes the GLUE submission files (`SST-2.tsv`, `MNLI-m.tsv`,
...) under `<workdir>/test/`.
"""

from __future__ import annotations

import ml_collections

from bert_jax.training import run_config

defaults = run_config.sibling(__file__, "defaults")

TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")


def get_config(task: str = "sst2") -> ml_collections.ConfigDict:
    if task not in TASKS:
        raise ValueError(f"unknown GLUE task {task!r}; choose from {', '.join(TASKS)}")
    c = defaults.finetuning()
    c.task = task
    c.max_seq_length = 128
    c.global_batch_size = 32
    c.learning_rate = 2e-5
    c.num_epochs = 3
    return c
