"""Data-preparation throughput on one core: raw text → prepared pre-training records.

bert_jax's host-side path (WordPiece in tensorflow-text, one pairing of NSP instances, the
documents' tokens and the index of instances `prepare-data` writes; masks are drawn
later, on the device) against
the reference `BertTokenizerFast` (Rust `tokenizers`) doing only tokenization of the same
sentences, in the same process, pinned to one core. Prints tokens/s of each and the ratio
(target: at least 1.0).

    .venv/bin/python bench/pipeline_throughput.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core, for both
os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    import numpy as np
    import tensorflow as tf
    import transformers

    from bert_jax.data import corpora, prepare, pretraining_examples, records, tokenization

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    docs = corpora.load_documents("wiki_excerpt")
    sentences = [s for d in docs for s in d]
    vocab = tokenization.default_vocab_file()

    tok = tokenization.load_tokenizer(vocab)
    tok.tokenize(sentences[:100])  # build the TF graph once
    start = time.perf_counter()
    token_docs = prepare.tokenize_documents(tok, docs)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        writer = records.SplitWriter(os.path.join(tmp, "shard.train"), np.dtype("<u2"), lambda p: p + ".tmp")
        writer.add_documents(token_docs)
        offsets = pretraining_examples.token_offsets(token_docs)
        instances = pretraining_examples.create_instances(
            token_docs, 128, 0.1, rng, tok.special, offsets=offsets, materialize=False
        )
        writer.add_instances(instances)
        writer.close()
        ours = time.perf_counter() - start
        assert writer.count == len(instances)
    tokens = sum(len(s) for d in token_docs for s in d)

    fast = transformers.BertTokenizerFast(vocab, do_lower_case=True)
    fast(sentences[:100], add_special_tokens=False)
    start = time.perf_counter()
    out = fast(sentences, add_special_tokens=False)["input_ids"]
    theirs = time.perf_counter() - start
    ref_tokens = sum(map(len, out))

    print(f"text: {len(docs)} documents, {len(sentences):,} sentences, {tokens:,} tokens")
    print(
        f"bert_jax text → prepared records: {tokens / ours:,.0f} tokens/s ({ours:.2f} s, "
        f"{len(instances):,} instances)"
    )
    print(f"BertTokenizerFast tokenization only: {ref_tokens / theirs:,.0f} tokens/s ({theirs:.2f} s)")
    print(f"ratio={(tokens / ours) / (ref_tokens / theirs):.2f}")


if __name__ == "__main__":
    main()
