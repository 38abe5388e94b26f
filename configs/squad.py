"""SQuAD: `--config=configs/squad.py:1.1` or `:2.0` (`v1.1`, `2`, ... too; paper §4.2, §4.3).

`data_dir` holds the official `train-v1.1.json`/`dev-v1.1.json` (or v2.0); `train_file`
/`dev_file` override the names. v1.1: 3 epochs, lr 5e-5, batch 32; v2.0: 2 epochs,
lr 5e-5, batch 48. Windows of 384 pieces every 128, questions cut at 64 pieces, answers at
most 30 pieces from the 20 best starts and ends. Dev predictions (`predictions.json`,
v2.0 also `null_odds.json`) land in `<workdir>/eval/epoch<k>/dev/`; score them again
with `bert-jax eval-squad`.
"""

from __future__ import annotations

import ml_collections

from bert_jax.tasks.base import QAWindows
from bert_jax.training import run_config
from bert_jax.training.resolver import to_config

defaults = run_config.sibling(__file__, "defaults")


# The version as written after the colon: 1.1 / 2.0, with or without a "v", or its major.
VERSIONS = {"1.1": "1.1", "1": "1.1", "2.0": "2.0", "2": "2.0"}


def get_config(version: str = "1.1") -> ml_collections.ConfigDict:
    given, version = version, VERSIONS.get(version.lower().removeprefix("v"), "")
    if not version:
        raise ValueError(f"SQuAD version {given!r}: choose configs/squad.py:1.1 or configs/squad.py:2.0")
    c = defaults.finetuning()
    c.task = f"squad{version}"
    # doc_stride, max_query_length, n_best_size, max_answer_length, null_score_diff_threshold
    # (v2.0; the tuned value is reported as best_f1_thresh), train_file, dev_file:
    c.update(to_config(QAWindows()))  # `bert_jax.tasks.base.QAWindows`
    c.max_seq_length = 384
    c.global_batch_size = 32 if version == "1.1" else 48
    c.eval_batch_size = 32
    c.learning_rate = 5e-5
    c.num_epochs = 3 if version == "1.1" else 2
    return c
