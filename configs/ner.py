"""CoNLL-2003 NER: `--config=configs/ner.py` (paper §5.3, fine-tuning approach).

`data_dir` holds `train.txt`/`valid.txt`/`test.txt` (or `eng.train`/`eng.testa`/
`eng.testb`) in the CoNLL format. Word-level tags, the first WordPiece of each word
carries the tag; entity-level F1 as conlleval/seqeval.
"""

from __future__ import annotations

import ml_collections

from bert_jax.training import run_config

defaults = run_config.sibling(__file__, "defaults")


def get_config() -> ml_collections.ConfigDict:
    c = defaults.finetuning()
    c.task = "conll2003"
    # The paper uses a cased model for NER; set True for uncased checkpoints (the bundled
    # MiniLM's vocabulary is uncased: capitalised words would become [UNK]).
    c.data.do_lower_case = False
    c.max_seq_length = 128
    c.global_batch_size = 32
    c.learning_rate = 5e-5
    c.num_epochs = 3
    return c
