"""CoNLL-2003 reading/tagging (first piece carries the tag) and SWAG's CSV release format."""

from __future__ import annotations

import numpy as np
import pytest

from bert_jax.data import tokenization
from bert_jax.tasks import base, ner, swag

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
unaffable JJ I-NP O
call NN I-NP O
to TO B-VP O
boycott VB I-VP O
British JJ B-NP B-MISC
lamb NN I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

-DOCSTART- -X- -X- O

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP O
"""


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.load_tokenizer()


def test_conll_reading_and_errors(tmp_path) -> None:
    path = tmp_path / "train.txt"
    path.write_text(CONLL)
    sentences = ner.read_conll(str(path))
    assert [s.words for s in sentences] == [
        ["EU", "rejects", "German", "unaffable", "call", "to", "boycott", "British", "lamb", "."],
        ["Peter", "Blackburn"],
        ["BRUSSELS", "1996-08-22"],
    ]
    assert sentences[1].tags == ["B-PER", "I-PER"] and sentences[1].line == 14
    assert ner.split_path(str(tmp_path), "train") == str(path)
    (tmp_path / "eng.testa").write_text(CONLL)
    assert ner.split_path(str(tmp_path), "dev").endswith("eng.testa")

    bad = tmp_path / "bad.txt"
    bad.write_text("EU NNP B-NP B-ORG\nrejects VBZ B-VP B-FOO\n")
    with pytest.raises(ValueError, match=r"bad\.txt:2: tag 'B-FOO' is not one of"):
        ner.read_conll(str(bad))
    bad.write_text("EU NNP B-NP B-ORG\n\nlonely\n")
    with pytest.raises(ValueError, match=r"bad\.txt:3: expected 'word \.\.\. TAG'"):
        ner.read_conll(str(bad))
    bad.write_text("-DOCSTART- -X- -X- O\n\n")
    with pytest.raises(ValueError, match=r"bad\.txt: no sentences \(empty split\)"):
        ner.read_conll(str(bad))


def test_first_piece_carries_the_tag_and_decoding_maps_back(tokenizer, tmp_path) -> None:
    path = tmp_path / "train.txt"
    path.write_text(CONLL)
    sentences = ner.read_conll(str(path))
    arrays, first = ner.featurize(sentences, tokenizer, 12)
    pieces = [tokenizer.tokenize([w])[0] for w in sentences[0].words]
    assert [len(p) for p in pieces[:5]] == [1, 1, 1, 3, 1]  # un ##aff ##able
    ids, labels = arrays["input_ids"][0], arrays["labels"][0]
    assert ids[0] == tokenizer.special.cls
    expected_labels, position = [ner.IGNORE], 1
    for word_pieces, tag, pos in zip(pieces, sentences[0].tags, first[0], strict=False):
        if position + len(word_pieces) > 11:
            break
        assert pos == position and list(ids[pos : pos + len(word_pieces)]) == word_pieces
        expected_labels += [ner.TAGS.index(tag)] + [ner.IGNORE] * (len(word_pieces) - 1)
        position += len(word_pieces)
    assert ids[position] == tokenizer.special.sep
    assert list(labels[: len(expected_labels)]) == expected_labels
    assert (labels[len(expected_labels) :] == ner.IGNORE).all()
    assert (first[0] == -1).any()  # the 12-piece row cut the sentence: those words are "O"
    # The split says how many sentences lost words (their words count as "O" in the score).
    split = ner.NerTask().load(base.TaskData(str(tmp_path), max_seq_length=12), tokenizer, "train")
    assert (split.cut, split.described()) == (1, f"train {len(sentences)} (1 cut at max_seq_length=12)")
    assert ner.NerTask().load(base.TaskData(str(tmp_path), max_seq_length=64), tokenizer, "train").cut == 0
    # Logits that put each word's gold tag on its first piece decode to the gold tags.
    logits = np.zeros((*arrays["input_ids"].shape, len(ner.TAGS)), np.float32)
    for i, s in enumerate(sentences):
        for pos, tag in zip(first[i], s.tags, strict=True):
            if pos >= 0:
                logits[i, pos, ner.TAGS.index(tag)] = 5.0
    decoded = ner.decode(logits, first)
    assert decoded[1:] == [s.tags for s in sentences[1:]]
    cut = first[0] < 0
    assert [t for t, c in zip(decoded[0], cut, strict=True) if not c] == [
        t for t, c in zip(sentences[0].tags, cut, strict=True) if not c
    ]
    assert all(t == "O" for t, c in zip(decoded[0], cut, strict=True) if c)


SWAG_CSV = (
    ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
    '0,anetv_jkn6uvmqwh4,3416,"Members of the procession walk down the street holding small horn '
    'brass instruments. A drum line","Members of the procession walk down the street holding small horn '
    'brass instruments.",A drum line,gold,"passes by walking down the street playing their instruments.",'
    '"has heard approaching them.","arrives and they\'re outside dancing and asleep.",'
    '"turns the lead singer watches the performance.",0\n'
    "1,lsmdc0001,17,Then he sits. He,Then he sits.,He,gold,looks up.,eats a shoe.,flies off.,"
    '"sings, loudly.",3\n'
)


def test_swag_release_csv_and_choices(tokenizer, tmp_path) -> None:
    path = tmp_path / "train.csv"
    path.write_text(SWAG_CSV)
    examples = swag.read_swag(str(path), labelled=True)
    assert [e.label for e in examples] == [0, 3]
    assert examples[0].start == "A drum line" and examples[1].endings[3] == "sings, loudly."
    arrays, cut = swag.featurize(examples, tokenizer, 40)
    assert arrays["input_ids"].shape == (2, 4, 40) and list(arrays["labels"]) == [0, 3]
    assert cut == 0  # every choice fits in 40 pieces; at 12, the first question's do
    assert swag.featurize(examples, tokenizer, 12)[1] == 1
    row = arrays["input_ids"][0, 0]
    ending = tokenizer.tokenize(["A drum line passes by walking down the street playing their instruments."])[
        0
    ]
    sep = tokenizer.special.sep
    first_sep = int(np.argmax(row == sep))
    assert list(row[first_sep + 1 : first_sep + 1 + len(ending)]) == ending
    seg = arrays["segment_ids"][0, 0]
    assert seg[first_sep] == 0 and seg[first_sep + 1] == 1

    path.write_text(SWAG_CSV.replace(",3\n", ",7\n"))
    with pytest.raises(ValueError, match=r"train\.csv:3: label '7' is not one of 0-3"):
        swag.read_swag(str(path), labelled=True)
    path.write_text(SWAG_CSV.replace('"sings, loudly."', "sings, loudly."))  # unquoted comma
    with pytest.raises(ValueError, match=r"train\.csv:3: 13 fields, the header has 12"):
        swag.read_swag(str(path), labelled=True)
    path.write_text(SWAG_CSV.replace("ending3,", "ending_3,"))
    with pytest.raises(ValueError, match=r"train\.csv:1: missing column\(s\) \['ending3'\]"):
        swag.read_swag(str(path), labelled=True)
    path.write_text(SWAG_CSV.splitlines()[0] + "\n")
    with pytest.raises(ValueError, match=r"train\.csv: no examples \(empty split\)"):
        swag.read_swag(str(path), labelled=True)
    test = tmp_path / "test.csv"
    test.write_text(SWAG_CSV.replace(",label", "").replace(",0\n", "\n").replace(",3\n", "\n"))
    assert [e.label for e in swag.read_swag(str(test), labelled=False)] == [None, None]
