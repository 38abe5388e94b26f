"""Every default of every run config, in one place: the typed settings' own fields, as the
`ConfigDict` blocks the other config files start from.

- `training()`: the keys every job shares (`bert_jax.training.settings.TrainingSettings`:
  numerics, mesh and sharding rules, the optimizer, accumulation, checkpoints, logging).
- `data()`: the pre-training data block (`bert_jax.data.settings.DataSettings`).
- `pretraining()`: a pre-training run (`bert_jax.pretraining.settings.PretrainSettings`:
  the paper's schedule, the shared keys and the data block), the model block BERT-Base's;
  `pretrain.py`'s sizes and recipes change what they need.
- `finetuning()`: a fine-tuning run (`bert_jax.finetuning.settings.FinetuneSettings`: the
  paper's §4 and §A.3 values); the task files (`glue.py`, `squad.py`, ...) change what
  their task needs.

Each field's comment there says what the key does; its range sits beside it and is checked
when a config is read (`bert_jax.training.resolver`). A key missing here is a key the code
does not read.
"""

from __future__ import annotations

import ml_collections

from bert_jax.data.settings import DataSettings
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.model.config import BertConfig
from bert_jax.pretraining.settings import PretrainSettings
from bert_jax.training.resolver import to_config
from bert_jax.training.settings import TrainingSettings


def training() -> ml_collections.ConfigDict:
    return to_config(TrainingSettings())


def data() -> ml_collections.ConfigDict:
    return to_config(DataSettings())


def pretraining() -> ml_collections.ConfigDict:
    c = to_config(PretrainSettings(model=BertConfig()))
    del c["config"]  # the record's copy of the config as written, not a key
    return c


def finetuning() -> ml_collections.ConfigDict:
    c = to_config(FinetuneSettings())
    del c["config"]  # the record's copy of the config as written, not a key
    return c
