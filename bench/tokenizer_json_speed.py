"""Tokenizer speed: a Hugging Face tokenizer.json (byte-level BPE) against WordPiece.

Both through bert_jax's own `tokenize` (what `prepare-data`, the fine-tuning tasks and
`features` call): the tokenizer.json path (`tokenizer_json.TokenizerJson`, Rust
`tokenizers`' `encode_batch_fast`) and the WordPiece path (tensorflow-text's
`FastBertTokenizer` with the bundled bert-base-uncased vocabulary). The tokenizer.json is a
cased ModernBERT-style BPE of 50,368 tokens (ModernBERT's size) learned on the same
bundled Wikipedia excerpt (`vocab_learning.byte_level_bpe`). Every sentence of the excerpt,
alternating, `--repeats` passes each; prints the median tokens/s and sentences/s of each
and their ratio (tokenizer.json / WordPiece); `transformers`' own call on the same file is
printed for reference (the same Rust underneath). ``--one_core`` pins the process (and both
libraries' thread pools) to one core; by default both use every core they see.

    .venv/bin/python bench/tokenizer_json_speed.py [--one_core] [--repeats=5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("--one_core", action="store_true", help="one core for both tokenizers")
ARGS.add_argument("--repeats", type=int, default=5)
ARGS.add_argument("--vocab_size", type=int, default=50_368)

if __name__ == "__main__":
    OPTIONS = ARGS.parse_args()
    if OPTIONS.one_core:  # before `tokenizers` and TensorFlow start their thread pools
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def timed(tok, sentences: list[str]) -> tuple[float, int]:
    start = time.perf_counter()
    ids = tok.tokenize(sentences)
    return time.perf_counter() - start, sum(map(len, ids))


class _Reference:
    """`transformers.PreTrainedTokenizerFast` on the same file, called as its users do."""

    def __init__(self, path: str) -> None:
        import transformers

        self.tok = transformers.PreTrainedTokenizerFast(tokenizer_file=path)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        return self.tok(texts, add_special_tokens=False)["input_ids"]


def main(options: argparse.Namespace) -> None:
    from bert_jax.data import corpora, tokenization, vocab_learning
    from bert_jax.storage import tensorflow_runtime

    if options.one_core:
        tf = tensorflow_runtime.tensorflow()
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    sentences = [s for d in corpora.load_documents("wiki_excerpt") for s in d]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tokenizer.json")
        vocab_learning.byte_level_bpe(sentences, options.vocab_size).save(path)
        tokenizers = {
            "tokenizer.json (BPE)": tokenization.load_tokenizer(path),
            "WordPiece (tf-text)": tokenization.load_tokenizer(),
            "reference: transformers on the tokenizer.json": _Reference(path),
        }
        for tok in tokenizers.values():
            tok.tokenize(sentences[:1000])  # warm-up: TF's graph, the BPE cache
        times: dict[str, list[float]] = {name: [] for name in tokenizers}
        counts: dict[str, int] = {}
        for _ in range(options.repeats):
            for name, tok in tokenizers.items():
                seconds, counts[name] = timed(tok, sentences)
                times[name].append(seconds)
    cores = "1 core" if options.one_core else f"{len(os.sched_getaffinity(0))} cores"
    print(f"{len(sentences):,} sentences of the Wikipedia excerpt, {cores}, median of {options.repeats}:")
    rates = {}
    for name in tokenizers:
        median = statistics.median(times[name])
        rates[name] = (counts[name] / median, len(sentences) / median)
        print(
            f"  {name}: {rates[name][0]:,.0f} tokens/s, {rates[name][1]:,.0f} sentences/s "
            f"({counts[name]:,} tokens, {median:.3f} s)"
        )
    bpe, wordpiece, _ = rates.values()
    print(
        f"  ratio tokenizer.json / WordPiece: {bpe[0] / wordpiece[0]:.2f}x tokens/s, "
        f"{bpe[1] / wordpiece[1]:.2f}x sentences/s"
    )


if __name__ == "__main__":
    main(OPTIONS)
