"""The offline downstream suite: `--config=configs/downstream.py:TASK` (or configs/finetune.py:TASK).

TASK is disfl_qa (SQuAD 2.0 style), cpkc (SQuAD 1.1 style), dialog_pairs (a sentence
pair like MRPC), vitaminc (NLI like MNLI) or rotten_tomatoes (sentiment like SST-2); see
docs/downstream_tasks.md. `data_dir` empty reads the cache that `bash scripts/setup_env.sh
downstream` fills (``$BERT_JAX_DOWNSTREAM_DIR`` or ``~/.cache/bert_jax/downstream``).
Dev and test are scored every epoch; the best epoch is chosen on dev. The run is followed
by its random-init baseline (the same fine-tuning from fresh weights, printed beside it;
`--config.random_init_baseline=False` skips it).

Defaults are for small models on a CPU: sequences of 128 pieces at most (QA: windows
every 64 pieces, questions cut at 32), batch 32, two epochs (three for the smaller Rotten
Tomatoes), lr 1e-4 for the bundled MiniLM and larger checkpoints; a model of the demo's
size (L2 H128) wants ~1e-3 (measured on Rotten Tomatoes, docs/downstream_tasks.md).
"""

from __future__ import annotations

import ml_collections

from bert_jax.training import run_config

defaults = run_config.sibling(__file__, "defaults")
squad = run_config.sibling(__file__, "squad")

QA = {"disfl_qa": "2.0", "cpkc": "1.1"}
CLASSIFICATION = {"dialog_pairs": 64, "vitaminc": 128, "rotten_tomatoes": 64}  # max_seq_length
TASKS = (*QA, *CLASSIFICATION)


def get_config(task: str = "rotten_tomatoes") -> ml_collections.ConfigDict:
    if task in QA:
        c = squad.get_config(QA[task])
        del c.train_file, c.dev_file  # the converted files in the cache
        c.max_seq_length = 128
        c.doc_stride = 64
        c.max_query_length = 32
        c.eval_batch_size = 64
    elif task in CLASSIFICATION:
        c = defaults.finetuning()
        c.max_seq_length = CLASSIFICATION[task]
    else:
        raise ValueError(f"unknown downstream task {task!r}; choose from {', '.join(TASKS)}")
    c.task = task
    c.data_dir = ""  # empty: $BERT_JAX_DOWNSTREAM_DIR or ~/.cache/bert_jax/downstream
    c.global_batch_size = 32
    c.learning_rate = 1e-4
    c.num_epochs = 3 if task == "rotten_tomatoes" else 2
    c.random_init_baseline = True  # small tasks: a score means little without it
    c.pack_row_multiple = 4  # short runs: ~3 compiled programs an epoch instead of ~10
    return c
