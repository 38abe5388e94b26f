"""BERT (Devlin et al., 2019) in JAX/Flax, TPU first: the Python API.

    from bert_jax import BertModel, load_checkpoint, load_tokenizer
    params, config = load_checkpoint("path/to/hf_or_tf_or_bert_jax_checkpoint")
    tok = load_tokenizer("path/to/hf_or_tf_or_bert_jax_checkpoint")  # or a vocab file
    batch = tok.encode_pairs(["Paris is in France."], None, max_seq_length=16)
    sequence, pooled, _ = BertModel(config).apply(
        {"params": params["bert"]}, batch["input_ids"], batch["input_mask"], batch["segment_ids"]
    )

    from bert_jax import load_config, pretrain, finetune
    final = pretrain(load_config("configs/pretrain.py:demo"), "runs/demo")     # = bert-jax pretrain
    best = finetune(load_config("configs/bbc.py"), "runs/bbc")                 # = bert-jax finetune
    print(final.metrics["mlm_accuracy"], best.metrics["accuracy"])  # a JobResult each

Names are imported on first use, so `import bert_jax` loads neither JAX nor TensorFlow.
The subpackages are the architecture: `model`, `data`, `training`, `pretraining`,
`tasks`, `finetuning`, `ablations`, `convert`, `commands` (one per `bert-jax` subcommand).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

# Public name -> (module, attribute).
_API = {
    # The model (§3).
    "BertConfig": ("bert_jax.model.config", "BertConfig"),
    "MODEL_PRESETS": ("bert_jax.model.config", "MODEL_PRESETS"),
    "BertModel": ("bert_jax.model.encoder", "BertModel"),
    "BertForPreTraining": ("bert_jax.model.heads", "BertForPreTraining"),
    "BertForSequenceClassification": ("bert_jax.model.heads", "BertForSequenceClassification"),
    "BertForQuestionAnswering": ("bert_jax.model.heads", "BertForQuestionAnswering"),
    "BertForTokenClassification": ("bert_jax.model.heads", "BertForTokenClassification"),
    "BertForMultipleChoice": ("bert_jax.model.heads", "BertForMultipleChoice"),
    "extract_features": ("bert_jax.model.features", "extract"),
    "fill_mask": ("bert_jax.commands.fill_mask", "fill"),  # = bert-jax fill-mask
    "predict": ("bert_jax.commands.predict", "predict"),  # = bert-jax predict
    # Checkpoints: Hugging Face, the original TF release, bert_jax.
    "load_checkpoint": ("bert_jax.convert", "load_checkpoint"),
    "save_checkpoint": ("bert_jax.convert", "save_checkpoint"),
    # Text.
    "load_tokenizer": ("bert_jax.data.tokenization", "load_tokenizer"),
    "build_wordpiece_vocab": ("bert_jax.data.vocab_learning", "build_wordpiece_vocab"),
    # Run configs and the jobs the CLI runs.
    "load_config": ("bert_jax.training.run_config", "load_config"),
    "pretrain": ("bert_jax.commands.run_settings", "pretrain"),
    "finetune": ("bert_jax.commands.run_settings", "finetune"),
    "evaluate": ("bert_jax.commands.run_settings", "evaluate"),  # = bert-jax finetune --evaluate
    "JobResult": ("bert_jax.training.results", "JobResult"),  # what both jobs return
}

__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'bert_jax' has no attribute {name!r}")
    module, attribute = _API[name]
    if "jax" not in sys.modules:  # first use: as quiet a start as the CLI's
        from bert_jax.training import hardware

        hardware.quiet_platform(verbose=bool(os.environ.get("BERT_JAX_DEBUG")))
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # the next access skips this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
