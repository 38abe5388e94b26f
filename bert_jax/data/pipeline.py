"""Pre-training batches: prepared instances → host-local rows of global batches.

One path for every source. The built-in sources (``wiki_excerpt``, ``bbc_news``, ``text``, ``tfds``)
are prepared on first use into the cache (``cache_dir``, default ``~/.cache/bert_jax``,
keyed by the inputs, the vocabulary and the flags) by the same code as
`bert-jax prepare-data`; ``source=prepared`` reads folders made by that command (one per
sequence length, comma-separated in ``input_files``); ``source=tfrecord`` reads the
original layout (static masks) as it is.

Global batch ``k`` is stream positions ``[k*B, (k+1)*B)``; `sampler.lookup` maps a
position to (epoch, example id) in O(1), and host ``p`` of ``P`` reads only its rows
``[p*B/P, (p+1)*B/P)`` (one ``pread`` each). So batches depend on the data, the config and
the seed only, never on the number of hosts; a resume at step N starts at once; host
memory does not grow with the corpus. The host feeds unmasked ids with each row's
(example id, epoch, mask seed): masks are drawn on the device (`masking.py`), fresh every
epoch by default, the same every epoch with ``dynamic_masking=False``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import queue
import threading
from collections.abc import Iterator

import ml_collections
import numpy as np

from bert_jax.data import masking, records, sampler, tokenization
from bert_jax.data.prepare import EVAL_SEED

# EVAL_SEED (re-exported): the held-out split's masks never depend on the training seed.
__all__ = ["EVAL_SEED", "create_pretrain_iterator"]


def vocab_size_of(data_config: ml_collections.ConfigDict) -> int:
    return tokenizer_of(data_config).vocab_size


def tokenizer_of(c: ml_collections.ConfigDict):
    """The tokenizer the data config names (cached: the vocab is read once)."""
    return _load_tokenizer(vocab_file_of(c), bool(c.do_lower_case), c.tokenizer)


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
    learner = "spm-bpe-wordpiece-1"  # `tokenization.build_wordpiece_vocab`'s method
    raw = json.dumps([c.source, _stamp(inputs), size, bool(c.do_lower_case), float(c.eval_fraction), learner])
    path = os.path.join(_cache_dir(c), f"vocab-{hashlib.sha256(raw.encode()).hexdigest()[:16]}.txt")
    if not os.path.exists(path):
        from bert_jax.data import prepare
        from bert_jax.storage import atomic_files

        print(f"learning a {size:,}-token WordPiece vocabulary on {c.source} once into {path}", flush=True)
        sentences = (
            s
            for i, item in enumerate(inputs)
            for doc in prepare.split_held_out(item.documents(), float(c.eval_fraction), i)[0]
            for s in doc
        )
        vocab = tokenization.build_wordpiece_vocab(sentences, size, bool(c.do_lower_case))
        atomic_files.write_text(path, "\n".join(vocab) + "\n")
    return path


def _cache_dir(c: ml_collections.ConfigDict) -> str:
    return c.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "bert_jax")


def _stamp(inputs: list) -> list:
    """What identifies the inputs' contents: paths, parts, and files' sizes and times."""
    return [
        (i.path, i.tfds_split, i.parts)
        + ((os.path.getsize(i.path), os.path.getmtime(i.path)) if not i.tfds_split else ())
        for i in inputs
    ]


@functools.lru_cache(maxsize=4)
def _load_tokenizer(vocab_file: str, do_lower_case: bool, kind: str):
    return tokenization.load_tokenizer(vocab_file, do_lower_case, kind)


def masking_spec(
    c: ml_collections.ConfigDict, max_predictions_per_seq: int
) -> tuple[masking.MaskingSpec, np.ndarray | None]:
    """The device-side masking of this data config, and the vocabulary's continuation table."""
    tok = tokenizer_of(c)
    spec = masking.MaskingSpec(
        max_predictions_per_seq=max_predictions_per_seq,
        vocab_size=tok.vocab_size,
        cls_id=tok.special.cls,
        sep_id=tok.special.sep,
        pad_id=tok.special.pad,
        mask_id=tok.special.mask,
        masked_lm_prob=float(c.masked_lm_prob),
        mask_token_prob=float(c.mask_token_prob),
        random_token_prob=float(c.random_token_prob),
        whole_word_masking=bool(c.whole_word_masking),
        objective=c.objective,
    )
    return spec, (tok.is_continuation if spec.whole_word_masking else None)


def _prepare_options(c: ml_collections.ConfigDict, max_seq_length: int, seed: int):
    from bert_jax.data import prepare

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
    from bert_jax.data import corpora, prepare
    from bert_jax.tasks import bbc

    names = [s for s in c.source.split(",") if s]
    joined = len(names) > 1
    inputs = []
    for name in names:
        if name == "wiki_excerpt":
            path = "" if joined else c.input_files
            inputs.append(prepare.Input(path or corpora.wiki_excerpt_path()))
        elif name == "bbc_news":
            path = "" if joined else c.input_files
            inputs.append(prepare.Input(path or bbc.default_dir(), reader="bbc_news"))
        elif name == "text" and not joined:
            inputs += prepare.list_inputs(c.input_files)
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
        found = {}
        for d in dirs:
            found[int(records.read_metadata(d)["flags"]["max_seq_length"])] = d
        if max_seq_length not in found:
            raise records.PreparedDataError(
                f"no prepared folder for max_seq_length={max_seq_length} among {', '.join(dirs)} "
                f"(they hold {sorted(found)}): prepare one with --max_seq_length={max_seq_length}"
            )
        return found[max_seq_length]
    from bert_jax.data import prepare

    inputs = _builtin_inputs(c)
    opts = _prepare_options(c, max_seq_length, seed)
    raw = json.dumps([c.source, _stamp(inputs), opts.flags(), records.file_sha256(opts.vocab_file)])
    directory = os.path.join(_cache_dir(c), f"prepared-{hashlib.sha256(raw.encode()).hexdigest()[:16]}")
    if not os.path.exists(os.path.join(directory, records.METADATA)):
        print(f"preparing {c.source} data (seq {max_seq_length}) once into {directory}", flush=True)
        prepare.prepare(inputs, directory, opts)
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
    if data.size == 0:
        hint = (
            "prepare with --eval_fraction > 0 or set data.eval_files" if split == "eval" else "no instances"
        )
        raise records.PreparedDataError(f"{directory} has no {split} examples: {hint}")
    if data.size >= 2**31:
        raise records.PreparedDataError(f"{directory}: {data.size} examples; split it (ids are int32)")
    return data


def prefetch(it: Iterator, depth: int = 2) -> Iterator:
    """Runs `it` in a background thread, `depth` items ahead (errors re-raised here)."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def work() -> None:
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        pass
                if stop.is_set():
                    return
            q.put((done, None))
        except BaseException as e:
            q.put((done, e))

    threading.Thread(target=work, daemon=True).start()
    try:
        while True:
            item, error = q.get()
            if item is done:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()


def prepared_batches(
    data: records.PreparedSet,
    *,
    global_batch_size: int,
    seed: int,
    mask_seed: int,
    split: str,
    dynamic_masking: bool,
    start_step: int,
    process_index: int,
    process_count: int,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local unmasked rows of global batches start_step, start_step + 1, ..."""
    train = split == "train"
    if not train and data.size < global_batch_size:
        raise ValueError(
            f"the held-out split has {data.size} examples, fewer than one batch of "
            f"{global_batch_size}: raise eval_fraction or lower eval_batch_size"
        )
    step = start_step
    while train or (step + 1) * global_batch_size <= data.size:  # eval: one pass, no partial batch
        positions = sampler.host_positions(step, global_batch_size, process_index, process_count)
        epochs, ids = sampler.lookup(positions, data.size, seed, shuffle=train)
        rows = data.read(ids)
        rows["example_id"] = ids.astype(np.int32)
        rows["epoch"] = (epochs if dynamic_masking and train else np.zeros_like(epochs)).astype(np.int32)
        rows["mask_seed"] = np.full(len(ids), mask_seed, np.int32)
        yield rows
        step += 1


def create_pretrain_iterator(
    data_config: ml_collections.ConfigDict,
    *,
    global_batch_size: int,
    max_seq_length: int,
    max_predictions_per_seq: int,
    seed: int,
    split: str = "train",
    start_step: int = 0,
    process_index: int | None = None,
    process_count: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local rows of global batches ``start_step, start_step + 1, ...``.

    The train split repeats forever (a new order and new masks each epoch); the eval split
    is one pass over the held-out instances in a fixed order with fixed masks (a final
    partial batch is dropped). Prepared sources yield unmasked rows (`masking.RAW_KEYS`);
    ``tfrecord`` yields the original masked features.
    """
    if process_index is None or process_count is None:
        import jax

        process_index, process_count = jax.process_index(), jax.process_count()
    if global_batch_size % process_count:
        raise ValueError(f"global batch {global_batch_size} not divisible by {process_count} hosts")
    if data_config.source == "tfrecord":  # made by `bert-jax create-data` or the original
        from bert_jax.data import tfrecords

        yield from tfrecords.create_iterator(
            data_config.input_files if split == "train" else data_config.eval_files,
            global_batch_size=global_batch_size,
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            seed=seed,
            start_step=start_step,
            process_index=process_index,
            process_count=process_count,
            repeat=split == "train",
        )
        return
    data = open_prepared(data_config, split, max_seq_length, seed)
    yield from prefetch(
        prepared_batches(
            data,
            global_batch_size=global_batch_size,
            seed=seed,
            mask_seed=seed if split == "train" else EVAL_SEED,
            split=split,
            dynamic_masking=bool(data_config.dynamic_masking),
            start_step=start_step,
            process_index=process_index,
            process_count=process_count,
        )
    )


@functools.cache
def _jitted_mask():
    import jax

    return jax.jit(masking.mask_batch, static_argnames="spec")


def _mask_jit(rows, *, spec, is_continuation):
    return _jitted_mask()(rows, spec=spec, is_continuation=is_continuation)


def mask_host_batch(
    data_config: ml_collections.ConfigDict, rows: dict[str, np.ndarray], max_predictions_per_seq: int
) -> dict[str, np.ndarray]:
    """Masks host rows eagerly (for tools and tests; training masks inside its jitted step)."""
    if "masked_lm_positions" in rows:
        return rows
    spec, table = masking_spec(data_config, max_predictions_per_seq)
    out = _mask_jit({k: rows[k] for k in masking.RAW_KEYS}, spec=spec, is_continuation=table)
    return {k: np.asarray(v) for k, v in out.items()}
