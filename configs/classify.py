"""Sentence(-pair) classification on your own files: `configs/classify.py`.

    bert-jax finetune --config=configs/classify.py --config.data_dir=DIR \
        --config.init_checkpoint=CKPT --workdir=runs/mine

DIR holds ``train`` and ``dev`` (and ``test`` to predict) as ``.tsv``, ``.csv`` or
``.jsonl`` with a ``text`` (and optionally ``text_b``) and a ``label`` column; the classes
are the train file's labels, or a score is predicted where they are numbers and not all
integers (`bert_jax.tasks.own_classification`). The defaults are the
paper's GLUE recipe at sequence 128; no init_checkpoint: the bundled MiniLM.
"""

from __future__ import annotations

import ml_collections

from bert_jax.training import run_config

defaults = run_config.sibling(__file__, "defaults")


def get_config() -> ml_collections.ConfigDict:
    c = defaults.finetuning()
    c.task = "classify"
    c.data_dir = ""  # required: the folder of your train/dev files
    c.max_seq_length = 128
    c.global_batch_size = 32
    c.learning_rate = 2e-5
    c.num_epochs = 3
    # Packed batches' row counts rounded up to a multiple of 4: fewer programs to compile
    # (BBC News as own files, 2 epochs at 64 tokens: 3 compiled shapes and 51 s against 6 and
    # 66 s, the same losses and scores), as configs/downstream.py.
    c.pack_row_multiple = 4
    return c
