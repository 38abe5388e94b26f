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
- ``tfrecord``: the original's TFRecords (static masks), read as they are.
- ``synthetic``: random ids in the real layout (tests and benchmarks).

`batches` gives host-local rows of global batches from any of them.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Iterator

import jax
import ml_collections
import numpy as np

from bert_jax.data import (
    bbc_news,
    corpora,
    masking,
    pipeline,
    prepare,
    records,
    remote_copy,
    synthetic,
    tfrecords,
    tokenization,
    vocab_learning,
)
from bert_jax.storage import atomic_files


def batches(
    config: ml_collections.ConfigDict,
    *,
    split: str,
    global_batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    start_step: int = 0,
    process_index: int | None = None,
    process_count: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local rows of global batches ``start_step, start_step + 1, ...`` of a run
    config's data: ``synthetic`` here (it needs the model's vocabulary size), every other
    source through `data_batches`."""
    if process_index is None or process_count is None:
        process_index, process_count = jax.process_index(), jax.process_count()
    where = dict(start_step=start_step, process_index=process_index, process_count=process_count)
    shape = dict(global_batch_size=global_batch_size, max_seq_length=max_seq_length)
    if config.data.source != "synthetic":
        return data_batches(
            config.data, split=split, seed=int(config.seed), max_predictions_per_seq=max_predictions_per_seq,
            num_batches=None if split == "train" else eval_batches_per_pass(config), **shape, **where,
        )  # fmt: skip
    _check_divisible(global_batch_size, process_count)
    return synthetic.create_iterator(
        max_predictions_per_seq=max_predictions_per_seq,
        vocab_size=int(config.model.vocab_size),
        seed=int(config.seed) + (0 if split == "train" else 10_000),
        num_batches=None if split == "train" else eval_batches_per_pass(config) or SYNTHETIC_EVAL_STEPS,
        **shape,
        **where,
    )


SYNTHETIC_EVAL_STEPS = 4  # synthetic data has no held-out split to pass over in full


def eval_batches_per_pass(config: ml_collections.ConfigDict) -> int | None:
    """How many global batches one held-out evaluation reads: the first
    ``config.eval_steps`` of the held-out order (the same ones every evaluation, so the
    curve compares like with like), or the whole split when it is 0 (None here)."""
    steps = int(config.eval_steps)
    if steps < 0:
        raise ValueError(f"config.eval_steps={steps}: a number of batches, or 0 for the whole held-out split")
    return steps or None


def data_batches(
    c: ml_collections.ConfigDict,
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
    """Host-local rows of global batches of the data config `c` (any source but
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
            **where,
        )
        return it if num_batches is None else itertools.islice(it, max(num_batches - start_step, 0))
    data = open_prepared(c, split, max_seq_length, seed)
    return pipeline.prefetch(
        pipeline.prepared_batches(
            data,
            global_batch_size=global_batch_size,
            seed=seed,
            mask_seed=seed if split == "train" else prepare.EVAL_SEED,
            split=split,
            dynamic_masking=bool(c.dynamic_masking),
            num_batches=num_batches,
            **where,
        )
    )


def _check_divisible(global_batch_size: int, process_count: int) -> None:
    if global_batch_size % process_count:
        raise ValueError(f"global_batch_size={global_batch_size} is not divisible by {process_count} hosts")


def vocab_size_of(data_config: ml_collections.ConfigDict) -> int:
    return tokenizer_of(data_config).vocab_size


def tokenizer_of(c: ml_collections.ConfigDict) -> tokenization.Tokenizer:
    """The tokenizer the data config names (cached: the vocab is read once)."""
    return tokenization.cached_tokenizer(vocab_file_of(c), bool(c.do_lower_case), c.tokenizer)


def vocab_file_of(c: ml_collections.ConfigDict) -> str:
    """The data config's vocabulary: ``vocab_file`` ("" = bert-base-uncased), or with
    ``learned_vocab_size`` > 0 a WordPiece vocabulary of that size learned on the training
    documents of the source (held-out documents excluded), once, into the cache."""
    size = int(c.learned_vocab_size)
    if not size:
        return c.vocab_file
    if c.vocab_file:
        raise ValueError("data.vocab_file and data.learned_vocab_size are both set: keep one of them")
    if c.tokenizer != "wordpiece":
        raise ValueError(
            f"data.learned_vocab_size learns a WordPiece vocabulary, not data.tokenizer={c.tokenizer}"
        )
    if c.source in ("prepared", "tfrecord", "synthetic"):
        raise ValueError(
            f"data.learned_vocab_size learns on text (wiki_excerpt, bbc_news, text, tfds), not on "
            f"data.source={c.source}: prepare the data with the vocabulary in data.vocab_file"
        )
    inputs = _builtin_inputs(c)
    learner = "spm-bpe-wordpiece-1"  # `vocab_learning.build_wordpiece_vocab`'s method
    raw = json.dumps([c.source, _stamp(inputs), size, bool(c.do_lower_case), float(c.eval_fraction), learner])
    path = os.path.join(_cache_dir(c), f"vocab-{hashlib.sha256(raw.encode()).hexdigest()[:16]}.txt")
    if not os.path.exists(path):
        print(f"learning a {size:,}-token WordPiece vocabulary on {c.source} once into {path}", flush=True)
        sentences = (
            s
            for i, item in enumerate(inputs)
            for doc in prepare.split_held_out(item.documents(), float(c.eval_fraction), i)[0]
            for s in doc
        )
        vocab = vocab_learning.build_wordpiece_vocab(sentences, size, bool(c.do_lower_case))
        atomic_files.write_text(path, "\n".join(vocab) + "\n")
    return path


def masking_spec(
    c: ml_collections.ConfigDict, max_predictions_per_seq: int
) -> tuple[masking.MaskingSpec, np.ndarray | None]:
    """The data config's masking rule for its vocabulary, and the vocabulary's
    continuation table (whole-word masking only)."""
    tok = tokenizer_of(c)
    spec = masking.MaskingSpec.of(
        tok.special,
        tok.vocab_size,
        max_predictions_per_seq,
        masked_lm_prob=float(c.masked_lm_prob),
        mask_token_prob=float(c.mask_token_prob),
        random_token_prob=float(c.random_token_prob),
        whole_word_masking=bool(c.whole_word_masking),
        objective=c.objective,
    )
    return spec, (tok.is_continuation if spec.whole_word_masking else None)


def _cache_dir(c: ml_collections.ConfigDict) -> str:
    return c.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "bert_jax")


def _stamp(inputs: list) -> list:
    """What identifies the inputs' contents: paths, parts, and files' sizes and times."""
    return [
        (i.path, i.tfds_split, i.parts)
        + ((os.path.getsize(i.path), os.path.getmtime(i.path)) if not i.tfds_split else ())
        + ((i.start, i.end) if i.end >= 0 else ())
        for i in inputs
    ]


def _prepare_options(c: ml_collections.ConfigDict, max_seq_length: int, seed: int):
    return prepare.Options(
        vocab_file=tokenizer_of(c).vocab_file,
        do_lower_case=bool(c.do_lower_case),
        tokenizer=c.tokenizer,
        max_seq_length=max_seq_length,
        dupe_factor=int(c.dupe_factor),
        short_seq_prob=float(c.short_seq_prob),
        random_seed=seed,
        nsp=bool(c.nsp),
        eval_fraction=float(c.eval_fraction),
        full_sentences=bool(c.full_sentences),
    )


def _builtin_inputs(c: ml_collections.ConfigDict) -> list:
    """The inputs of the built-in sources; ``source`` may join several with commas
    (``wiki_excerpt,bbc_news``), each then reading its own default data."""
    names = [s for s in c.source.split(",") if s]
    joined = len(names) > 1
    inputs = []
    for name in names:
        if name == "wiki_excerpt":
            path = "" if joined else c.input_files
            inputs.append(prepare.Input(path or corpora.wiki_excerpt_path()))
        elif name == "bbc_news":
            path = "" if joined else c.input_files
            inputs.append(prepare.Input(path or bbc_news.default_dir(), reader="bbc_news"))
        elif name == "text" and not joined:
            inputs += prepare.list_inputs(c.input_files, flag="--config.data.input_files")
        elif name == "tfds" and not joined:
            if not c.tfds_name:
                raise ValueError("source=tfds needs --config.data.tfds_name=NAME")
            inputs += prepare.list_inputs(tfds_name=c.tfds_name, tfds_num_shards=int(c.tfds_num_shards))
        else:
            raise ValueError(
                f"data.source={c.source!r}: one of wiki_excerpt, bbc_news, text, tfds, prepared, "
                "tfrecord, synthetic, or built-in corpora joined by commas (wiki_excerpt,bbc_news)"
            )
    return inputs


def prepared_dir(c: ml_collections.ConfigDict, max_seq_length: int, seed: int, split: str = "train") -> str:
    """The prepared folder that serves this split at this sequence length.

    ``source=prepared``: the one of ``input_files`` (or ``eval_files`` for the held-out
    split) made for `max_seq_length`. Built-in sources: a cache folder, prepared now on
    first use (with the run's seed as the pairing seed).
    """
    if c.source == "prepared":
        listed = (c.eval_files if split == "eval" and c.eval_files else c.input_files).split(",")
        dirs = [d for d in listed if d]
        if not dirs:
            raise ValueError(
                "source=prepared needs --config.data.input_files=DIR[,DIR] (from `bert-jax prepare-data`)"
            )
        # A folder in a bucket is read from a local copy, made once (`remote_copy`).
        dirs = [remote_copy.local_copy(d, _cache_dir(c)) if remote_copy.is_remote(d) else d for d in dirs]
        found = {}
        for d in dirs:
            found[int(records.read_metadata(d)["flags"]["max_seq_length"])] = d
        if max_seq_length not in found:
            raise records.PreparedDataError(
                f"no prepared folder for max_seq_length={max_seq_length} among {', '.join(dirs)} "
                f"(they hold {sorted(found)}): prepare one with --max_seq_length={max_seq_length}"
            )
        return found[max_seq_length]
    inputs = _builtin_inputs(c)
    opts = _prepare_options(c, max_seq_length, seed)
    raw = json.dumps([c.source, _stamp(inputs), opts.flags(), records.file_sha256(opts.vocab_file)])
    directory = os.path.join(_cache_dir(c), f"prepared-{hashlib.sha256(raw.encode()).hexdigest()[:16]}")
    if not os.path.exists(os.path.join(directory, records.METADATA)):
        print(f"preparing {c.source} data (seq {max_seq_length}) once into {directory}", flush=True)
        # Made only once the vocabulary and inputs are checked; a failed attempt removes it
        # again unless it holds finished shards (the next run resumes from them).
        prepare.prepare(inputs, directory, opts, name="cache folder")
    return directory


def open_prepared(
    c: ml_collections.ConfigDict, split: str, max_seq_length: int, seed: int
) -> records.PreparedSet:
    """The prepared split, checked against the run's vocabulary, length and objective."""
    directory = prepared_dir(c, max_seq_length, seed, split)
    data = records.PreparedSet(directory, split)
    records.check_compatible(
        data.meta,
        directory,
        vocab_file=tokenizer_of(c).vocab_file,
        max_seq_length=max_seq_length,
        nsp=bool(c.nsp),
        do_lower_case=bool(c.do_lower_case),
        full_sentences=bool(c.full_sentences),
    )
    if data.size == 0 and split == "eval":
        hint = "prepare with --eval_fraction > 0 or set data.eval_files"
        raise records.NoHeldOutData(f"{directory} holds no held-out examples ({hint})")
    if data.size == 0:
        raise records.PreparedDataError(f"{directory} has no training examples")
    if data.size >= 2**31:
        raise records.PreparedDataError(f"{directory}: {data.size} examples; split it (ids are int32)")
    return data
