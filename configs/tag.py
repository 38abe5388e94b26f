"""Token tagging (named entities, any IOB2 tags) on your own CoNLL files: `configs/tag.py`.

    bert-jax finetune --config=configs/tag.py --config.data_dir=DIR \
        --config.init_checkpoint=CKPT --workdir=runs/mine

DIR holds ``train.txt`` and ``dev.txt`` (and ``test.txt`` to predict): a token a line with
its tag last, a blank line between sentences; the tag set is the train file's
(`bert_jax.tasks.own_tagging`). The defaults are the NER recipe of `configs/ner.py`, with
the casing recorded beside the checkpoint's vocabulary (the paper tags with a cased model).
"""

from __future__ import annotations

import ml_collections

from bert_jax.training import run_config

defaults = run_config.sibling(__file__, "defaults")


def get_config() -> ml_collections.ConfigDict:
    c = defaults.finetuning()
    c.task = "tag"
    c.data_dir = ""  # required: the folder of your CoNLL files
    c.max_seq_length = 128
    c.global_batch_size = 32
    c.learning_rate = 5e-5
    c.num_epochs = 3
    return c
