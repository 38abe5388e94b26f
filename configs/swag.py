"""SWAG: `--config=configs/swag.py` (paper §4.4): 3 epochs, lr 2e-5, batch 16.

`data_dir` holds the release's `train.csv`/`val.csv`/`test.csv`. Each of the four
endings is one `[CLS] sent1 [SEP] sent2 ending [SEP]` sequence.
"""

from __future__ import annotations

import ml_collections

from bert_jax.training import run_config

defaults = run_config.sibling(__file__, "defaults")


def get_config() -> ml_collections.ConfigDict:
    c = defaults.finetuning()
    c.task = "swag"
    c.max_seq_length = 128
    c.global_batch_size = 16
    c.eval_batch_size = 16
    c.learning_rate = 2e-5
    c.num_epochs = 3
    return c
