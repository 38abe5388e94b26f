"""Learning a vocabulary (WordPiece or SentencePiece) and pre-training data with either."""

import subprocess
import sys
from pathlib import Path

import numpy as np

from bert_jax.data import corpora, run_vocabulary, sources, tokenization, vocab_learning
from bert_jax.data.settings import DataSettings
from tests.conftest import ROOT
from tests.helpers.masking import mask_rows


def _text(tmp_path) -> Path:
    docs = corpora.load_documents("wiki_excerpt")[:10]
    path = tmp_path / "corpus.txt"
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    return path


def test_build_wordpiece_vocab_and_use_it(tmp_path) -> None:
    """Learned in two processes from the same text: the same vocabulary (every host of a
    pod learns its own), of exactly the size asked; the second into a folder (a new path
    ending in /), as its vocab.txt, which the tokenizer takes as the folder."""
    text = _text(tmp_path)
    vocab = tmp_path / "vocab.txt"
    for out in (str(vocab), f"{tmp_path}/again/"):
        cmd = ["build-vocab", f"--input_file={text}", f"--output={out}", "--vocab_size=2000"]
        proc = subprocess.run(
            [sys.executable, "-m", "bert_jax", *cmd], capture_output=True, text=True, cwd=ROOT, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert vocab.read_bytes() == (tmp_path / "again" / "vocab.txt").read_bytes()
    assert tokenization.load_tokenizer(str(tmp_path / "again")).vocab_file == str(
        tmp_path / "again" / "vocab.txt"
    )
    tokens = vocab.read_text().splitlines()
    assert tokens[:5] == list(tokenization.SPECIAL_TOKENS) and len(tokens) == len(set(tokens)) == 2000
    assert {"t", "##t", "the"} <= set(tokens)
    tok = tokenization.load_tokenizer(str(vocab))
    ids = tok.tokenize(["Anarchism is a political philosophy."])[0]
    assert ids and tok.special.unk not in ids


def test_sentencepiece_tokenizer_feeds_the_pipeline(tmp_path) -> None:
    text = _text(tmp_path)
    sentences = [s for d in corpora.read_text_files(str(text)) for s in d]
    model = vocab_learning.train_sentencepiece(sentences, str(tmp_path / "sp"), 1000)
    tok = tokenization.load_tokenizer(model, kind="sentencepiece")
    assert (tok.special.pad, tok.special.unk) == (0, 1)
    # Named without its kind, as fine-tuning and `features` name a checkpoint's spm.model
    # beside it: a .model file is read as what it is, not refused as a broken vocab.txt.
    assert tokenization.vocab_in_folder(model) == (model, "sentencepiece")
    assert tokenization.load_tokenizer(model).tokenize(["hello there"]) == tok.tokenize(["hello there"])
    assert tok.vocab[tok.special.mask] == "[MASK]"
    c = DataSettings(
        source="text", input_files=str(text), tokenizer="sentencepiece", vocab_file=model,
        cache_dir=str(tmp_path / "cache"), eval_fraction=0.1,
    )  # fmt: skip
    rows = next(
        sources.data_batches(
            c,
            global_batch_size=4,
            max_seq_length=64,
            max_predictions_per_seq=10,
            seed=0,
            process_index=0,
            process_count=1,
        )
    )
    batch = mask_rows(c, rows, 10)  # masks drawn as in training
    assert (batch["input_ids"][:, 0] == tok.special.cls).all()
    assert (batch["input_ids"] < tok.vocab_size).all()
    assert np.isin(tok.special.mask, batch["input_ids"])
    assert run_vocabulary.vocab_size_of(c) == 1000
