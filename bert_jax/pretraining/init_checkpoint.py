"""Pre-training continued from a checkpoint (``init_checkpoint``), as the original
`run_pretraining.py --init_checkpoint` does: further pre-training of a released BERT on a
domain's text (BioBERT; Gururangan et al., 2020, "Don't Stop Pretraining").

The checkpoint is any that `convert` reads (a Hugging Face folder, an original TF
checkpoint, a bert_jax export or pre-training workdir). It gives the run:

- its model: architecture, dropout and vocabulary size as it was trained (`model_for`;
  the config's ``model`` block is not read, bar ``vocab_pad_multiple``);
- its vocabulary, unless ``data.vocab_file`` names one (`data_for`; a vocabulary learned
  on the corpus is refused: the embeddings' rows are the checkpoint's tokens);
- its weights at step 0 (`starting_params`), with a fresh optimizer state and schedule:
  the encoder, and the masked-LM and next-sentence heads where it has them (a bare
  encoder, e.g. a sentence-embedding model, gets fresh heads, said in one line each).

A workdir with checkpoints of its own resumes from them as any run does.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax

from bert_jax import convert
from bert_jax.data.settings import DataSettings
from bert_jax.model import param_shapes
from bert_jax.model.layer_scan import stack_layers
from bert_jax.training import engine, multihost

_HEADS = {"mlm": "masked-LM head", "nsp": "next-sentence head"}


def data_for(path: str, data: DataSettings) -> DataSettings:
    """The data settings of a run from `path`: its vocabulary unless one is named."""
    if data.learned_vocab_size:
        raise ValueError(
            f"config.init_checkpoint={path} keeps the checkpoint's vocabulary: unset config.data."
            "learned_vocab_size (a vocabulary learned on the corpus would not match its embeddings)"
        )
    return data if data.vocab_file else dataclasses.replace(data, vocab_file=path)


def model_for(path: str, model: dict[str, Any]) -> dict[str, Any]:
    """The model block of a run from `path`: the checkpoint's config, with the run's
    ``vocab_pad_multiple`` (`model`: the config's model block)."""
    config = convert.checkpoint_config(path)
    pad = model.get("vocab_pad_multiple", config.vocab_pad_multiple)
    return config.replace(vocab_pad_multiple=pad).to_dict()


def starting_params(job: Any, path: str, seed: int) -> Any:
    """Host params of the pre-training model of `job` (`pretrain.Pretraining`): the
    checkpoint's encoder and heads, heads it lacks freshly initialised (seeded by `seed`),
    in the run's layer layout (scanned or not) and vocabulary padding."""
    config = job.model_config
    loaded, _ = convert.load_checkpoint(path, vocab_pad_multiple=config.vocab_pad_multiple)
    multihost.check_same_weights(loaded, path)  # each host read it: the same step
    if job.numerics.scanned:
        loaded = stack_layers(loaded, config.num_hidden_layers, config)
    init = lambda key: nn.meta.unbox(job.objective.init_params(key))
    key = jax.random.key(seed)
    shapes = jax.eval_shape(init, key)
    missing = [k for k in shapes if k not in loaded]
    if jax.process_index() == 0:
        for k in missing:
            print(f"warning: {path} has no {_HEADS.get(k, k)}: it starts freshly initialised", flush=True)
        for k in loaded:
            if k not in shapes:
                print(f"warning: {path}'s {convert.HEADS.get(k, k)} is not used by this run", flush=True)
    # Only the missing heads are drawn (as fine-tuning's fresh head): the checkpoint's
    # parts are left out of the compiled program.
    fresh = jax.device_get(engine.run_once(lambda k: {n: v for n, v in init(k).items() if n in missing}, key))
    return {
        k: fresh[k] if k in missing else param_shapes.merge_params(v, loaded[k], path)
        for k, v in shapes.items()
    }
