"""The vocabulary of a pre-training data config and its masking rule: ``data.vocab_file``
("" = bert-base-uncased), or a WordPiece vocabulary learned once on the source's training
documents (``data.learned_vocab_size``, cached), through the cached tokenizer."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from bert_jax.data import corpus_inputs, masking, prepare, tokenization, vocab_learning
from bert_jax.data.settings import DataSettings
from bert_jax.storage import atomic_files


def vocab_size_of(data: DataSettings) -> int:
    return tokenizer_of(data).vocab_size


def tokenizer_of(c: DataSettings) -> tokenization.Tokenizer:
    """The tokenizer the data config names (cached: the vocab is read once)."""
    return tokenization.cached_tokenizer(vocab_file_of(c), c.lower_case, c.tokenizer)


def vocab_file_of(c: DataSettings, hosts: int = 1) -> str:
    """The data config's vocabulary: ``vocab_file`` ("" = bert-base-uncased), or with
    ``learned_vocab_size`` > 0 a WordPiece vocabulary of that size learned on the training
    documents of the source (held-out documents excluded), once, into the cache. A TFDS
    corpus not yet prepared is built first where one host runs (`hosts`), else refused in
    one line (each host would build it at once; `prepare.ensure_tfds`)."""
    size = c.learned_vocab_size
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
    inputs = corpus_inputs.builtin_inputs(c)
    learner = "spm-bpe-wordpiece-1"  # `vocab_learning.build_wordpiece_vocab`'s method
    raw = json.dumps([c.source, corpus_inputs.stamp(inputs), size, c.lower_case, c.eval_fraction, learner])
    path = os.path.join(
        corpus_inputs.cache_dir(c), f"vocab-{hashlib.sha256(raw.encode()).hexdigest()[:16]}.txt"
    )
    if not os.path.exists(path):
        prepare.ensure_tfds(inputs, build=hosts == 1)
        print(f"learning a {size:,}-token WordPiece vocabulary on {c.source} once into {path}", flush=True)
        sentences = (
            s
            for i, item in enumerate(inputs)
            for doc in prepare.split_held_out(item.documents(), c.eval_fraction, i)[0]
            for s in doc
        )
        vocab = vocab_learning.build_wordpiece_vocab(sentences, size, c.lower_case)
        atomic_files.write_text(path, "\n".join(vocab) + "\n")
    return path


def masking_spec(
    c: DataSettings, max_predictions_per_seq: int
) -> tuple[masking.MaskingSpec, np.ndarray | None]:
    """The data config's masking rule for its vocabulary, and the vocabulary's
    continuation table (whole-word masking only)."""
    tok = tokenizer_of(c)
    spec = masking.MaskingSpec.of(
        tok.special,
        tok.vocab_size,
        max_predictions_per_seq,
        masked_lm_prob=c.masked_lm_prob,
        mask_token_prob=c.mask_token_prob,
        random_token_prob=c.random_token_prob,
        whole_word_masking=c.whole_word_masking,
        objective=c.objective,
    )
    return spec, (tok.is_continuation if spec.whole_word_masking else None)
