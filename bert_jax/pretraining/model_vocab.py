"""The model's vocabulary size in a pre-training config, written once.

``model.vocab_size`` > 0 is the size as given: the tokenizer's ids must fit under it
(a larger table only wastes rows). ``model.vocab_size = 0`` means "the run's tokenizer's
size", so that a preset which learns its vocabulary (``data.learned_vocab_size``) names
the size in one place. Either way the table is then padded to a multiple of
``model.vocab_pad_multiple`` (`BertConfig.padded_vocab_size`).

Two readings, one rule:

- `planned_size`: without the data (`bert-jax plan`, ablation costs, FLOP counts). A
  learned vocabulary has exactly ``data.learned_vocab_size`` tokens
  (`vocab_learning.build_wordpiece_vocab`), so it is taken from there and never learned;
  another tokenizer is read from its file.
- `run_size`: what a run trains, from its tokenizer (learning a vocabulary once into the
  cache where the data config learns one), and refusing an explicit size the tokenizer's
  ids do not fit.

`PretrainSettings.of` writes `planned_size` into the run's settings (its model, data and
``bert_config.json`` read it: never 0); a run calls `check_run_size` before it trains
(for ``model.vocab_size=0`` the two sizes are one: a learned vocabulary has exactly
``data.learned_vocab_size`` tokens).
"""

from __future__ import annotations

from bert_jax.data import run_vocabulary
from bert_jax.data.settings import DataSettings

_NO_TOKENIZER = (
    "config.model.vocab_size=0 takes the tokenizer's size, and data.source=synthetic has no "
    "tokenizer: set --config.model.vocab_size=N"
)


def planned_size(vocab_size: int, data: DataSettings) -> int:
    """The model's vocabulary size known without reading any data: `vocab_size`
    (``model.vocab_size``), or with 0 ``data.learned_vocab_size`` (never learned here) or
    the size of the tokenizer's file."""
    if vocab_size:
        return vocab_size
    if data.source == "synthetic":
        raise ValueError(_NO_TOKENIZER)
    return data.learned_vocab_size or run_vocabulary.vocab_size_of(data)


def run_size(vocab_size: int, data: DataSettings) -> int:
    """The vocabulary size the run trains with: its tokenizer's for `vocab_size` 0 (a
    learned vocabulary is learned once, cached), else `vocab_size` (``model.vocab_size``)
    if the tokenizer's ids fit under it."""
    size = vocab_size
    if data.source == "synthetic":
        if not size:
            raise ValueError(_NO_TOKENIZER)
        return size
    vocab = run_vocabulary.vocab_size_of(data)
    if size and vocab > size:
        raise ValueError(
            f"the vocabulary has {vocab} tokens but config.model.vocab_size is {size}: set "
            f"--config.model.vocab_size={vocab} (or 0: the tokenizer's size)"
        )
    return size or vocab


UNUSED_SHARE = 0.1  # a table this much larger than the vocabulary is said (`check_run_size`)


def check_run_size(vocab_size: int, data: DataSettings) -> str | None:
    """What a run checks before it trains: the vocabulary learned where the data config
    learns one (once, cached) and the model's size holding the tokenizer's ids (`run_size`).
    Returns a warning when more than `UNUSED_SHARE` of an explicit size's rows are no
    token's (a preset's size beside a user's smaller vocabulary): never an input or a
    target, they only cost memory, time and a larger first loss."""
    size = run_size(vocab_size, data)
    if not vocab_size or data.source == "synthetic":
        return None
    vocab = run_vocabulary.vocab_size_of(data)
    if size - vocab <= UNUSED_SHARE * size:
        return None
    name = run_vocabulary.vocab_file_of(data) or "bert-base-uncased"
    return (
        f"config.model.vocab_size={size} has {size - vocab:,} rows more than the {vocab:,} tokens of "
        f"{name}: no token uses them; set --config.data.vocab_file to the vocabulary the size is for, or "
        "--config.model.vocab_size=0 to size the model to this one"
    )
