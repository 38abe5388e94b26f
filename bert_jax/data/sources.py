"""Where pre-training rows come from: the one switch over ``config.data.source``.

- Text: the built-in corpora (``wiki_excerpt``, ``bbc_news``, or both joined by a comma),
  ``text`` (globs of files in the original format) and ``tfds`` (a TFDS text dataset) are
  prepared on first use into the cache (``data.cache_dir``, default ``~/.cache/bert_jax``,
  keyed by the inputs, the vocabulary and the flags) by the same code as `bert-jax
  prepare-data`, with the vocabulary of ``data.vocab_file`` or one learned on the corpus
  (``data.learned_vocab_size``, also cached).
- ``prepared``: folders made by `bert-jax prepare-data` (one per sequence length,
  comma-separated in ``data.input_files``), read by position (`pipeline`); a folder in a
  bucket (``gs://...``) is copied to the cache once and read there (`remote_copy`).
- ``tfrecord``: the original's TFRecords (static masks), read as they are; a resume
  seeks to its position (`tfrecord_index`).
- ``synthetic``: random ids in the real layout (tests and benchmarks).

`batches` gives host-local rows of global batches from any of them; the vocabulary is
`run_vocabulary`'s, prepared folders `prepared_cache`'s.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import jax
import numpy as np

from bert_jax.data import (
    corpus_inputs,
    pipeline,
    prepare,
    prepared_cache,
    synthetic,
    tfrecords,
)
from bert_jax.data.settings import DataSettings


def batches(
    data: DataSettings,
    *,
    seed: int,
    eval_steps: int,
    vocab_size: int,
    split: str,
    global_batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    start_step: int = 0,
    process_index: int | None = None,
    process_count: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local rows of global batches ``start_step, start_step + 1, ...`` of a run's
    data (its ``seed``, ``eval_steps`` and ``model.vocab_size`` beside it): ``synthetic``
    here (it needs the model's vocabulary size), every other source through `data_batches`."""
    if process_index is None or process_count is None:
        process_index, process_count = jax.process_index(), jax.process_count()
    where = dict(start_step=start_step, process_index=process_index, process_count=process_count)
    shape = dict(global_batch_size=global_batch_size, max_seq_length=max_seq_length)
    held_out = None if split == "train" else eval_batches_per_pass(eval_steps)
    if data.source != "synthetic":
        return data_batches(
            data, split=split, seed=seed, max_predictions_per_seq=max_predictions_per_seq,
            num_batches=held_out, **shape, **where,
        )  # fmt: skip
    _check_divisible(global_batch_size, process_count)
    return synthetic.create_iterator(
        max_predictions_per_seq=max_predictions_per_seq,
        vocab_size=vocab_size,
        seed=seed + (0 if split == "train" else 10_000),
        num_batches=None if split == "train" else held_out or SYNTHETIC_EVAL_STEPS,
        **shape,
        **where,
    )


SYNTHETIC_EVAL_STEPS = 4  # synthetic data has no held-out split to pass over in full


def eval_batches_per_pass(eval_steps: int) -> int | None:
    """How many global batches one held-out evaluation reads: the first
    ``config.eval_steps`` of the held-out order (the same ones every evaluation, so the
    curve compares like with like), or the whole split when it is 0 (None here)."""
    steps = int(eval_steps)
    if steps < 0:
        raise ValueError(f"config.eval_steps={steps}: a number of batches, or 0 for the whole held-out split")
    return steps or None


def data_batches(
    c: DataSettings,
    *,
    seed: int,
    split: str = "train",
    global_batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    start_step: int = 0,
    process_index: int = 0,
    process_count: int = 1,
    num_batches: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local rows of global batches of the data settings `c` (any source but
    ``synthetic``).

    The train split repeats forever (a new order and new masks each epoch); the eval split
    is one pass over the held-out instances in a fixed order with fixed masks (a final
    partial batch is dropped), or its first `num_batches` global batches when that is set
    (batches ``start_step .. num_batches - 1``). Prepared sources yield unmasked rows
    (`masking.RAW_KEYS`), masked on the devices; ``tfrecord`` yields the original's masked
    rows.
    """
    _check_divisible(global_batch_size, process_count)
    where = dict(start_step=start_step, process_index=process_index, process_count=process_count)
    if split == "train":
        num_batches = None
    if c.source == "tfrecord":  # made by `bert-jax create-data` or the original
        it = tfrecords.create_iterator(
            c.input_files if split == "train" else c.eval_files,
            global_batch_size=global_batch_size,
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            seed=seed,
            repeat=split == "train",
            cache_dir=corpus_inputs.cache_dir(c),  # the files' record counts, for a resume
            **where,
        )
        return it if num_batches is None else itertools.islice(it, max(num_batches - start_step, 0))
    data = prepared_cache.open_prepared(c, split, max_seq_length, seed, hosts=process_count)
    return pipeline.prefetch(
        pipeline.prepared_batches(
            data,
            global_batch_size=global_batch_size,
            seed=seed,
            mask_seed=seed if split == "train" else prepare.EVAL_SEED,
            split=split,
            dynamic_masking=c.dynamic_masking,
            num_batches=num_batches,
            **where,
        )
    )


def _check_divisible(global_batch_size: int, process_count: int) -> None:
    if global_batch_size % process_count:
        raise ValueError(f"global_batch_size={global_batch_size} is not divisible by {process_count} hosts")
