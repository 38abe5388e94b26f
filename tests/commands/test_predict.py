"""`bert-jax predict` / `bert_jax.predict`: a fine-tuned classifier's labels, a tagger's
word tags, a span model's answers and a multiple-choice model's best ending on new text,
as `transformers` computes them from the same folder."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bert_jax
from bert_jax.data import tokenization
from tests.conftest import ROOT

TEXTS = [
    "The central bank raised interest rates again.",
    "A late goal won the cup final for the home side.",
    "Angela Merkel met officials of the European Union in Brussels on Monday.",
]
TAGS = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
CONFIG = dict(
    vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
    max_position_embeddings=64,
)  # fmt: skip


def _folder(root: Path, cls, labels: list[str], seed: int) -> Path:
    """A random tiny `transformers` model of `cls` with `labels`, its head's weights spread
    so that its predictions differ by more than rounding."""
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        **CONFIG,
        num_labels=len(labels),
        id2label=dict(enumerate(labels)),
        label2id={x: i for i, x in enumerate(labels)},
    )
    model = cls(config).eval()
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 1.0)
    folder = root / cls.__name__
    model.save_pretrained(folder)
    shutil.copy(tokenization.default_vocab_file(), folder / "vocab.txt")
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("classifiers")
    return {
        "topics": _folder(root, transformers.BertForSequenceClassification, ["business", "sport", "tech"], 0),
        "tags": _folder(root, transformers.BertForTokenClassification, TAGS, 1),
    }


def test_a_classifiers_labels_and_probabilities_are_the_pipelines(folders) -> None:
    got = bert_jax.predict(str(folders["topics"]), TEXTS)
    pipe = transformers.pipeline("text-classification", model=str(folders["topics"]), top_k=None)
    for record, want in zip(got, pipe(TEXTS), strict=True):
        want = {p["label"]: p["score"] for p in want}
        assert record["probabilities"].keys() == want.keys()
        np.testing.assert_allclose([record["probabilities"][k] for k in want], list(want.values()), rtol=1e-4)
        assert record["label"] == max(want, key=want.get) and record["probability"] == max(
            record["probabilities"].values()
        )
    # A TAB separates a pair's sentences: [CLS] A [SEP] B [SEP], as the pipeline's text_pair.
    (pair,) = bert_jax.predict(str(folders["topics"]), ["Who won?\tThe home side won the final."])
    want = pipe({"text": "Who won?", "text_pair": "The home side won the final."})
    np.testing.assert_allclose(
        [pair["probabilities"][p["label"]] for p in want], [p["score"] for p in want], rtol=1e-4
    )


def test_a_taggers_word_tags_are_its_first_pieces_and_make_entities(folders) -> None:
    (record,) = bert_jax.predict(str(folders["tags"]), TEXTS[2:])
    words = record["words"]
    assert words[:3] == ["Angela", "Merkel", "met"] and words[-2:] == ["Monday", "."]  # punctuation a word
    tokenizer = transformers.BertTokenizerFast(str(folders["tags"] / "vocab.txt"))
    enc = tokenizer(words, is_split_into_words=True, return_tensors="pt")
    model = transformers.BertForTokenClassification.from_pretrained(str(folders["tags"])).eval()
    with torch.no_grad():
        best = model(**enc).logits[0].argmax(-1).tolist()
    first = {}
    for position, word in enumerate(enc.word_ids()):
        if word is not None and word not in first:
            first[word] = position
    assert record["tags"] == [TAGS[best[first[w]]] for w in range(len(words))]
    from bert_jax.tasks import scorers

    assert [(e["type"], e["start"], e["end"]) for e in record["entities"]] == scorers.entities(record["tags"])
    assert all(e["text"] == " ".join(words[e["start"] : e["end"] + 1]) for e in record["entities"])


def test_a_span_models_answers_are_squads_decoding_of_its_logits(tmp_path) -> None:
    """QUESTION<TAB>PASSAGE: the windows SQuAD's evaluation cuts, the `transformers` model's
    start and end logits on them, decoded as SQuAD's evaluation decodes them; a passage
    longer than a row is read in several windows."""
    from bert_jax.tasks import squad_answers, squad_examples, squad_windows

    torch.manual_seed(2)
    model = transformers.BertForQuestionAnswering(transformers.BertConfig(**CONFIG)).eval()
    with torch.no_grad():
        model.qa_outputs.weight.normal_(0.0, 1.0)
    folder = tmp_path / "qa"
    model.save_pretrained(folder)
    shutil.copy(tokenization.default_vocab_file(), folder / "vocab.txt")
    texts = [f"Who met officials in Brussels?\t{TEXTS[2]}", f"What rose?\t{' '.join(TEXTS * 3)}"]
    got = bert_jax.predict(str(folder), texts, max_seq_length=48, doc_stride=16)
    tokenizer = tokenization.load_tokenizer(str(folder / "vocab.txt"))
    examples = [
        squad_examples.SquadExample(str(i), q, squad_examples.split_words(p)[0], "", -1, -1, False)
        for i, (q, p) in enumerate(t.split("\t") for t in texts)
    ]
    arrays, windows = squad_windows.featurize(examples, tokenizer, 48, 16, 44)
    assert list(windows.example).count(1) > 1  # the long passage: several windows
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor(arrays["input_ids"], dtype=torch.long),
            attention_mask=torch.tensor(arrays["input_mask"], dtype=torch.long),
            token_type_ids=torch.tensor(arrays["segment_ids"], dtype=torch.long),
        )
    _, null_odds, nbest = squad_answers.predict_answers(
        examples, windows, arrays["input_ids"], out.start_logits.numpy(), out.end_logits.numpy(),
        tokenizer.vocab, version_2=True,
    )  # fmt: skip
    for i, record in enumerate(got):
        best = next((c for c in nbest[str(i)] if c["text"]), {"text": "", "probability": 0.0})  # no span: ""
        assert record["answer"] == best["text"] and record["answer"] in texts[i].split("\t")[1]
        assert record["probability"] == pytest.approx(best["probability"], rel=1e-4)
        assert record["null_score_diff"] == pytest.approx(null_odds[str(i)], abs=1e-3)
    assert got[1]["answer"] and got[1]["probability"] > 0
    with pytest.raises(ValueError, match=r"text 1: a question-answering model reads QUESTION<TAB>PASSAGE"):
        bert_jax.predict(str(folder), ["no passage here"])


def test_a_multiple_choice_models_best_ending_is_its_highest_scored(tmp_path) -> None:
    """CONTEXT<TAB>ENDING<TAB>...: each ending scored after the context as the
    `transformers` model scores ``[CLS] context [SEP] ending [SEP]`` (texts of three and
    four endings in one call), the probabilities its softmax over them."""
    torch.manual_seed(3)
    model = transformers.BertForMultipleChoice(transformers.BertConfig(**CONFIG)).eval()
    with torch.no_grad():  # the pooler and the scorer spread, so that the endings' scores differ
        model.bert.pooler.dense.weight.normal_(0.0, 1.0)
        model.classifier.weight.normal_(0.0, 3.0)
    folder = tmp_path / "choice"
    model.save_pretrained(folder)
    shutil.copy(tokenization.default_vocab_file(), folder / "vocab.txt")
    texts = [
        "She opened the umbrella\tbecause it began to rain.\tand ate the soup.\tto the moon.",
        "The team trained all winter\tand won the league in spring.\tbut the bank raised rates."
        "\tso the river froze.\tthen slept.",
    ]
    got = bert_jax.predict(str(folder), texts)
    theirs = transformers.BertTokenizer(str(folder / "vocab.txt"))
    for text, record in zip(texts, got, strict=True):
        context, *endings = text.split("\t")
        enc = theirs([context] * len(endings), endings, padding=True, return_tensors="pt")
        with torch.no_grad():
            logits = model(**{k: v[None] for k, v in enc.items()}).logits[0]
        want = torch.softmax(logits, -1).numpy()
        np.testing.assert_allclose(record["probabilities"], want, rtol=1e-4)
        assert record["endings"] == endings and record["ending"] == endings[int(want.argmax())]
        assert record["choice"] == int(want.argmax()) and record["context"] == context
    assert all(max(r["probabilities"]) - min(r["probabilities"]) > 0.02 for r in got)  # scores that differ
    with pytest.raises(ValueError, match=r"text 2: a multiple-choice model reads CONTEXT<TAB>ENDING"):
        bert_jax.predict(str(folder), [texts[0], "one ending only\tthe end."])


def test_the_command_prints_writes_and_refuses_in_one_line(folders, tiny_checkpoint, tmp_path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "bert_jax", "predict", *args], capture_output=True, text=True, cwd=ROOT,
            timeout=300,
        )  # fmt: skip

    lines = tmp_path / "texts.txt"
    lines.write_text("\n".join(TEXTS[:2]) + "\n")
    out = tmp_path / "out" / "predictions.jsonl"
    proc = run(
        f"--checkpoint={folders['topics']}", f"--text={TEXTS[2]}", f"--input={lines}", f"--output={out}"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records == bert_jax.predict(str(folders["topics"]), [TEXTS[2], *TEXTS[:2]])
    shown = [ln for ln in proc.stdout.splitlines() if not ln.startswith("warning: ")]  # the fresh pooler
    assert shown[:3] == [f"{r['label']} ({r['probability']:.3f})\t{r['text']}" for r in records]
    assert shown[3] == f"wrote {out}: 3 texts"
    proc = run(f"--checkpoint={tiny_checkpoint}", f"--text={TEXTS[0]}")
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("bert-jax ")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert (
        len(errors) == 1
        and f"--checkpoint {tiny_checkpoint} holds the encoder alone: predict runs" in errors[0]
    )
