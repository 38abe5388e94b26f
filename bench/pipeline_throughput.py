"""Input-pipeline throughput on one core: raw text → masked pre-training batches.

bert_jax's whole path (WordPiece in tensorflow-text, NSP instances, dynamic masking,
batches of the original features) against the reference `BertTokenizerFast` (Rust
`tokenizers`) doing only tokenization of the same sentences, in the same process, pinned
to one core. Prints tokens/s of each and the ratio (target: at least 1.0).

    .venv/bin/python bench/pipeline_throughput.py
"""

from __future__ import annotations

import os
import sys
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

    from bert_jax import corpora, input_pipeline, pretraining_data, tokenization

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    docs = corpora.load_documents("wiki_excerpt")
    sentences = [s for d in docs for s in d]
    vocab = tokenization.default_vocab_file()

    tok = tokenization.load_tokenizer(vocab)
    tok.tokenize(sentences[:100])  # build the TF graph once
    start = time.perf_counter()
    token_docs = input_pipeline.tokenize_documents(tok, docs)
    rng = np.random.default_rng(0)
    instances = pretraining_data.create_instances(token_docs, 128, 0.1, rng, tok.special)
    masking = pretraining_data.MaskingConfig()
    batch, batches = [], 0
    for inst in instances:
        batch.append(pretraining_data.to_features(inst, rng, 128, masking, tok.special, tok.vocab_size))
        if len(batch) == 32:
            stacked = {k: np.stack([b[k] for b in batch]) for k in batch[0]}
            batches += len(stacked["input_ids"]) > 0
            batch = []
    ours = time.perf_counter() - start
    tokens = sum(len(s) for d in token_docs for s in d)

    fast = transformers.BertTokenizerFast(vocab, do_lower_case=True)
    fast(sentences[:100], add_special_tokens=False)
    start = time.perf_counter()
    out = fast(sentences, add_special_tokens=False)["input_ids"]
    theirs = time.perf_counter() - start
    ref_tokens = sum(map(len, out))

    print(f"text: {len(docs)} documents, {len(sentences):,} sentences, {tokens:,} tokens")
    print(
        f"bert_jax text → masked batches: {tokens / ours:,.0f} tokens/s ({ours:.2f} s, "
        f"{len(instances):,} instances)"
    )
    print(f"BertTokenizerFast tokenization only: {ref_tokens / theirs:,.0f} tokens/s ({theirs:.2f} s)")
    print(f"ratio={(tokens / ours) / (ref_tokens / theirs):.2f}")


if __name__ == "__main__":
    main()
