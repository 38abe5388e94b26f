"""Fine-tuning on a user's own files. Classification (`configs/classify.py`): TSV, CSV and
JSONL as written, the classes from the train file, one line for each fault. Tagging
(`configs/tag.py`): CoNLL files of any IOB2 tags, the tag set from the train file. Each
end to end on a tiny model, its predictions and saved head carrying the labels' names."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest

import bert_jax
from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.tasks import own_classification
from bert_jax.tasks.base import TaskData
from bert_jax.tasks.registry import get_task
from bert_jax.training import run_config
from configs import classify as classify_config
from configs import tag as tag_config
from tests.helpers.task_data import bbc_sentences, tagged_sentences


def _tiny_run(config, checkpoint: str, data: Path, **keys):
    """`config` from the tiny checkpoint on the files in `data`, batch 8, test predicted."""
    keys = dict(
        init_checkpoint=checkpoint, data_dir=str(data), global_batch_size=8, predict_test=True, **keys
    )
    run_config.set_keys(config, keys)
    config.data.vocab_file = tokenization.default_vocab_file()
    return config


def _load(folder: Path, split: str, max_seq_length: int = 64):
    task = get_task("classify")
    split_data = task.load(
        TaskData(str(folder), max_seq_length=max_seq_length), tokenization.load_tokenizer(), split
    )
    return task, split_data


def test_each_format_is_read_as_written_and_the_classes_come_from_train(tmp_path, monkeypatch) -> None:
    (tmp_path / "train.csv").write_text(
        'text,label\n"A sentence, with a comma",10\n"Two\nlines",-1\nplain,2\n\n', newline=""
    )
    (tmp_path / "validation.jsonl").write_text(
        json.dumps({"sentence": "dev one", "sentence2": "its pair", "label": -1}) + "\n\n"
        + json.dumps({"sentence": "dev two", "label": 10, "extra": None}) + "\n"
    )  # fmt: skip
    (tmp_path / "test.tsv").write_text('idx\ttext\nt7\tA "quoted" test\nt8\tanother\n')
    reads, read_rows = [], own_classification.read_rows
    monkeypatch.setattr(
        own_classification, "read_rows", lambda p, labelled: reads.append(p) or read_rows(p, labelled)
    )
    task, train = _load(tmp_path, "train")
    assert reads == [str(tmp_path / "train.csv")]  # read once: for the classes, and as the split
    assert task.label_names == ("-1", "2", "10")  # integers in their order, not as text
    assert [e.text_a for e in train.meta] == ["A sentence, with a comma", "Two\nlines", "plain"]
    assert list(train.arrays["labels"]) == [2, 0, 1]
    _, dev = _load(tmp_path, "dev")
    assert [(e.text_a, e.text_b, e.label) for e in dev.meta] == [
        ("dev one", "its pair", 0),
        ("dev two", None, 2),
    ]
    assert dev.arrays["segment_ids"][0].max() == 1  # a pair where the row has one
    _, test = _load(tmp_path, "test")
    assert [(e.text_a, e.guid, e.label) for e in test.meta] == [
        ('A "quoted" test', "t7", None),
        ("another", "t8", None),
    ]
    assert "labels" not in test.arrays
    (tmp_path / "train.csv").write_text("text,label\na,pos\nb,neg\nc,neutral\n")
    assert _load(tmp_path, "train")[0].label_names == ("neg", "neutral", "pos")  # text labels as text
    bilstm = get_task("classify+bilstm")  # its label names are the inner task's (its task.json's)
    bilstm.load(TaskData(str(tmp_path)), tokenization.load_tokenizer(), "train")
    assert bilstm.label_names == ("neg", "neutral", "pos")


def test_scores_for_labels_make_it_a_regression(tmp_path) -> None:
    """Labels that are numbers, not all integers (similarity scores): one output, squared
    error, Pearson chosen on; an integer among them is a score too."""
    (tmp_path / "train.tsv").write_text("text_a\ttext_b\tlabel\na\tb\t3.8\nc\td\t1\ne\tf\t0.25\n")
    (tmp_path / "dev.tsv").write_text("text_a\ttext_b\tlabel\na\tb\t4.5\n")
    task, train = _load(tmp_path, "train")
    assert (task.regression, task.main_metric, task.label_names, task.spec.num_labels) == (
        True,
        "pearson",
        (),
        1,
    )
    assert train.arrays["labels"].dtype == np.float32
    assert list(train.arrays["labels"]) == [np.float32(3.8), 1.0, 0.25]
    assert set(task.spec.metrics(np.array([1.0, 2.0, 3.0]), np.array([1.1, 2.2, 2.9]))) == {
        "pearson",
        "spearman",
    }
    bilstm = get_task("classify+bilstm")  # its main metric is the inner task's, once data set it
    bilstm.load(TaskData(str(tmp_path)), tokenization.load_tokenizer(), "dev")
    assert bilstm.main_metric == "pearson"
    (tmp_path / "dev.tsv").write_text("text_a\ttext_b\tlabel\na\tb\tn/a\n")
    with pytest.raises(ValueError, match=r"dev\.tsv:2: label 'n/a' is not a number, as .*train\.tsv's are$"):
        _load(tmp_path, "dev")
    assert not own_classification.scores(("0", "1", "2")) and own_classification.scores(("1", "2.5"))


TWO = "text\tlabel\na\t1\nb\t0\n"
FAULTS = [  # (files, the split read, the one line)
    ({}, "train", r"^task classify: no train file in .* \(looked for train\.tsv\|\.csv\|\.jsonl\)$"),
    ({"train.tsv": TWO, "train.csv": "text,label\na,1\n"}, "train", r"are both the train split"),
    (
        {"train.tsv": "words\tlabel\na\t1\n"},
        "train",
        r"train\.tsv: no text/sentence/sentence1/text_a column \(its columns: words, label\)$",
    ),
    (
        {"train.tsv": "text\tlabel\na\t1\nb\t1\n"},
        "train",
        r"train\.tsv: one label only \(1\): .* two or more$",
    ),
    ({"train.tsv": "text\tlabel\na\t1\nb\n"}, "train", r"train\.tsv:3: 1 fields, the header has 2$"),
    ({"train.tsv": "text\tlabel\na\t1\nb\t\n"}, "train", r"train\.tsv:3: no label$"),
    (
        {"train.jsonl": '{"text": "a", "label": 1}\n{"text": "b",\n'},
        "train",
        r"train\.jsonl:2: not a JSON object",
    ),
    (  # a quoted field over two lines: the line the row ends on
        {"train.csv": 'text,label\n"a\nb",1\nc\n', "dev.tsv": TWO},
        "train",
        r"train\.csv:4: 1 fields, the header has 2$",
    ),
    (
        {"train.tsv": TWO, "dev.tsv": "text\tlabel\nc\t1\nd\t7\n"},
        "dev",
        r"dev\.tsv:3: label '7' is not one of .*train\.tsv's \(0, 1\)$",
    ),
]


@pytest.mark.parametrize(("files", "split", "error"), FAULTS)
def test_each_fault_in_the_files_is_one_line_naming_file_and_line(tmp_path, files, split, error) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises((ValueError, FileNotFoundError), match=error):
        _load(tmp_path, split)


def test_a_run_on_own_files_trains_predicts_and_saves_its_labels(tmp_path, tiny_checkpoint) -> None:
    """The label is the first word ("great" / "awful" before a real sentence): learnable by
    a tiny model in a few epochs; the test predictions and the saved head name the labels."""
    sentences = bbc_sentences(210, seed=1)
    rows = [
        (("great : " if i % 2 else "awful : ") + s, "positive" if i % 2 else "negative")
        for i, s in enumerate(sentences)
    ]
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "train.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([("text", "label"), *rows[:170]])
    (data / "dev.jsonl").write_text(
        "".join(json.dumps({"text": s, "label": y}) + "\n" for s, y in rows[170:200])
    )
    (data / "test.tsv").write_text(
        "id\ttext\n" + "".join(f"row{i}\t{s}\n" for i, (s, _) in enumerate(rows[200:]))
    )
    c = _tiny_run(classify_config.get_config(), tiny_checkpoint, data, max_seq_length=48, learning_rate=2e-3,
                  num_epochs=6)  # fmt: skip
    best = run_settings.finetune(c, str(tmp_path / "run"))
    assert best.metrics["accuracy"] >= 0.9 and best.metrics["f1_macro"] >= 0.9
    lines = (tmp_path / "run" / "test" / own_classification.PREDICTIONS).read_text().splitlines()
    assert lines[0] == "id\tprediction" and [x.split("\t")[0] for x in lines[1:]] == [
        f"row{i}" for i in range(10)
    ]
    got = [x.split("\t")[1] for x in lines[1:]]
    assert sum(g == y for g, (_, y) in zip(got, rows[200:], strict=True)) >= 9
    record = json.loads((tmp_path / "run" / "best_model" / "task.json").read_text())
    assert record["head"] == {"kind": "classifier", "labels": ["negative", "positive"]}
    # `bert-jax predict` on the best model: the run's own test predictions, row by row.
    predicted = bert_jax.predict(str(tmp_path / "run" / "best_model"), [s for s, _ in rows[200:]])
    assert [r["label"] for r in predicted] == got


CONLL = "EGFR B-GENE\nbinds O\nerlotinib B-CHEM\n.\tO\n\nThe O\nBRCA1 B-GENE\nprotein I-GENE\n"


def test_tags_are_the_train_files_iob2_types_and_other_tags_are_one_line(tmp_path) -> None:
    (tmp_path / "train.txt").write_text(CONLL)
    (tmp_path / "dev.txt").write_text("-DOCSTART- -X- -X- O\n\naspirin NN B-NP B-CHEM\nworks VBZ B-VP O\n")
    task = get_task("tag")
    dev = task.load(TaskData(str(tmp_path)), tokenization.load_tokenizer(), "dev")
    assert task.label_names == ("O", "B-CHEM", "I-CHEM", "B-GENE", "I-GENE")  # I-CHEM though train has none
    assert [s.tags for s in dev.meta.sentences] == [["B-CHEM", "O"]]
    assert dev.arrays["labels"][0, 1] == 1  # B-CHEM on "aspirin"'s first piece
    (tmp_path / "dev.txt").write_text("aspirin B-DRUG\n")
    with pytest.raises(ValueError, match=r"dev\.txt:1: tag 'B-DRUG' is not one of \['O', 'B-CHEM'"):
        get_task("tag").load(TaskData(str(tmp_path)), tokenization.load_tokenizer(), "dev")
    for text, error in (("a PER\n", r"train\.txt: tag 'PER' is not IOB2"), ("a O\n", r"every tag is O")):
        (tmp_path / "train.txt").write_text(text)
        with pytest.raises(ValueError, match=error):
            get_task("tag").load(TaskData(str(tmp_path)), tokenization.load_tokenizer(), "dev")
    with pytest.raises(ValueError, match=r"^task tag: set config\.data_dir"):
        get_task("tag").load(TaskData(""), tokenization.load_tokenizer(), "train")


def test_a_tagging_run_on_own_files_learns_its_tags_and_saves_them(tmp_path, tiny_checkpoint) -> None:
    """Gazetteer genes and chemicals inserted in real sentences (``word TAG`` lines)."""
    names = [("egfr", "GENE"), ("brca one", "GENE"), ("aspirin", "CHEM"), ("sodium chloride", "CHEM")]
    rng, data = random.Random(0), tmp_path / "data"
    data.mkdir()
    for name, n in (("train.txt", 90), ("dev.txt", 30), ("test.txt", 10)):
        lines = []
        for words in tagged_sentences(n, len(name) + n, names, rng):
            lines += [f"{w} {t}" for w, t in words] + [""]
        (data / name).write_text("\n".join(lines) + "\n")
    c = _tiny_run(tag_config.get_config(), tiny_checkpoint, data, max_seq_length=64, learning_rate=3e-3,
                  num_epochs=8)  # fmt: skip
    best = run_settings.finetune(c, str(tmp_path / "run"))
    assert best.metrics["f1"] > 0.5  # the names are learnable from their pieces
    tags = ["O", "B-CHEM", "I-CHEM", "B-GENE", "I-GENE"]
    predicted = (tmp_path / "run" / "test" / "test_predictions.txt").read_text().splitlines()
    assert {line.split()[2] for line in predicted if line} <= set(tags)  # word gold predicted
    assert any(line.split()[2].startswith("B-") for line in predicted if line)
    record = json.loads((tmp_path / "run" / "best_model" / "task.json").read_text())
    assert record["head"] == {"kind": "token_classifier", "labels": tags}
