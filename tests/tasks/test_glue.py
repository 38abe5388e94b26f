"""GLUE: the TSV layouts of the release (train/dev/test of all nine tasks), TFDS by name
(offline mock data), label mapping, submission files, and errors naming file and line."""

from __future__ import annotations

import socket
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from bert_jax.data import corpora, tokenization
from bert_jax.tasks import glue
from bert_jax.tasks.base import Split, TaskData
from bert_jax.tasks.registry import get_task
from tests.helpers.tfds_mock import prepared_mock_data

# One data line per split in each task's exact column layout (header as in the release).
S1, S2 = "The cat sat on the mat.", "A cat is sitting on a mat."
STSB = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
QQP = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"
MNLI = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2"
)
GLUE_FILES: dict[str, dict[str, str]] = {
    "CoLA": {
        "train.tsv": f"gj04\t1\t\t{S1}\ngj04\t0\t*\tMat the on sat cat.\n",
        "dev.tsv": f"gj04\t1\t\t{S2}\n",
        "test.tsv": f"index\tsentence\n0\t{S1}\n1\t{S2}\n",
    },
    "SST-2": {
        "train.tsv": "sentence\tlabel\na gripping , funny film \t1\nflat and dull \t0\n",
        "dev.tsv": "sentence\tlabel\nit 's a charming journey . \t1\n",
        "test.tsv": "index\tsentence\n0\tuneasy mishmash of styles and genres .\n",
    },
    "MRPC": {
        "train.tsv": f"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t702876\t702977\t{S1}\t{S2}\n",
        "dev.tsv": f"Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1\t2\t{S1}\tIt rained.\n",
        "test.tsv": f"index\t#1 ID\t#2 ID\t#1 String\t#2 String\n0\t1089874\t1089925\t{S1}\t{S2}\n",
    },
    "STS-B": {
        "train.tsv": f"{STSB}\tscore\n"
        f"0\tmain-captions\tMSRvid\t2012test\t0001\tnone\tnone\t{S1}\t{S2}\t4.750\n",
        "dev.tsv": f"{STSB}\tscore\n"
        f"0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\t{S1}\tIt rained.\t0.000\n",
        "test.tsv": f"{STSB}\n0\tmain-captions\tMSRvid\t2012test\t0024\tnone\tnone\t{S1}\t{S2}\n",
    },
    "QQP": {
        "train.tsv": f"{QQP}\n"
        "133273\t213221\t213222\tHow is the life of a math student?\tWhat is it like to study math?\t1\n",
        "dev.tsv": f"{QQP}\n201359\t303345\t303346\tWhy is the sky blue?\tWhy is the sea blue?\t0\n",
        "test.tsv": "id\tquestion1\tquestion2\n0\tWhy is Saturn a gas giant?\tWhat is Saturn made of?\n",
    },
    "MNLI": {
        "train.tsv": f"{MNLI}\tlabel1\tgold_label\n"
        f"0\t31193\t31193n\tgovernment\t( x )\t( y )\t(ROOT x)\t(ROOT y)\t{S1}\t{S2}\tneutral\tneutral\n",
        "dev_matched.tsv": f"{MNLI}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
        f"0\t63735\t63735n\tfiction\t( x )\t( y )\t(ROOT x)\t(ROOT y)\t{S1}\t{S2}\t"
        "entailment\tentailment\tneutral\tentailment\tentailment\tentailment\n",
        "dev_mismatched.tsv": f"{MNLI}\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label\n"
        f"0\t75290\t75290c\tletters\t( x )\t( y )\t(ROOT x)\t(ROOT y)\t{S1}\tNo cat.\t"
        "contradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction\tcontradiction\n",
        "test_matched.tsv": f"{MNLI}\n"
        f"0\t31493\t31493\ttravel\t( x )\t( y )\t"
        f"(ROOT x)\t(ROOT y)\t{S1}\t{S2}\n",
        "test_mismatched.tsv": f"{MNLI}\n"
        f"0\t16130\t16130\tfacetoface\t( x )\t( y )\t"
        f"(ROOT x)\t(ROOT y)\t{S1}\t{S2}\n",
    },
    "QNLI": {
        "train.tsv": f"index\tquestion\tsentence\tlabel\n0\tWhere did the cat sit?\t{S1}\tentailment\n",
        "dev.tsv": "index\tquestion\tsentence\tlabel\n0\tWhen did it rain?\tIt rained.\tnot_entailment\n",
        "test.tsv": f"index\tquestion\tsentence\n0\tWhere did the cat sit?\t{S1}\n",
    },
    "RTE": {
        "train.tsv": f"index\tsentence1\tsentence2\tlabel\n0\t{S1}\t{S2}\tentailment\n",
        "dev.tsv": f"index\tsentence1\tsentence2\tlabel\n0\t{S1}\tIt rained.\tnot_entailment\n",
        "test.tsv": f"index\tsentence1\tsentence2\n0\t{S1}\t{S2}\n1\t{S2}\t{S1}\n",
    },
    "WNLI": {
        "train.tsv": f"index\tsentence1\tsentence2\tlabel\n0\t{S1}\t{S2}\t1\n",
        "dev.tsv": f"index\tsentence1\tsentence2\tlabel\n0\t{S1}\tIt rained.\t0\n",
        "test.tsv": f"index\tsentence1\tsentence2\n0\t{S1}\t{S2}\n",
    },
}


def write_glue(root: Path) -> Path:
    for folder, files in GLUE_FILES.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / folder / name).write_text(text)
    return root


def test_every_task_reads_its_release_layout(tmp_path) -> None:
    root = str(write_glue(tmp_path))
    want_dev = {
        "cola": [(S2, None, 1)],
        "sst2": [("it 's a charming journey . ", None, 1)],
        "mrpc": [(S1, "It rained.", 0)],
        "stsb": [(S1, "It rained.", 0.0)],
        "qqp": [("Why is the sky blue?", "Why is the sea blue?", 0)],
        "qnli": [("When did it rain?", "It rained.", 1)],
        "rte": [(S1, "It rained.", 1)],
        "wnli": [(S1, "It rained.", 0)],
    }
    for task, want in want_dev.items():
        got = glue.read(task, root, "dev")
        assert [(e.text_a, e.text_b, e.label) for e in got] == want, task
        train = glue.read(task, root, "train")
        assert train and all(e.label is not None for e in train)
        test_name = next(iter(glue.submission_files(task)))
        test = glue.read(task, root, test_name)
        assert all(e.label is None for e in test) and test[0].guid == "0"
    assert [e.label for e in glue.read("cola", root, "train")] == [1, 0]
    assert glue.read("stsb", root, "train")[0].label == pytest.approx(4.75)
    matched, mismatched = (glue.read("mnli", root, s) for s in ("dev_matched", "dev_mismatched"))
    labels = glue.LABELS["mnli"]
    assert labels[matched[0].label] == "entailment" and labels[mismatched[0].label] == "contradiction"
    assert glue.read("mnli", root, "test_mismatched")[0].text_b == S2
    assert get_task("mnli").eval_splits == ("dev_matched", "dev_mismatched")
    # A split says how many of its examples did not fit in max_seq_length and were cut.
    tok = tokenization.load_tokenizer()
    fits, cut = (get_task("mrpc").load(TaskData(root, max_seq_length=n), tok, "dev") for n in (64, 8))
    assert (fits.cut, fits.described()) == (0, "dev 1")
    assert (cut.cut, cut.described()) == (1, "dev 1 (1 cut at max_seq_length=8)")


def _replace(root: Path, folder: str, name: str, text: str) -> None:
    (root / folder / name).write_text(text)


def test_bad_glue_files_name_the_file_and_line(tmp_path) -> None:
    write_glue(tmp_path)
    root = str(tmp_path)
    _replace(
        tmp_path,
        "RTE",
        "train.tsv",
        "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\ta\tb\tmaybe\n",
    )
    with pytest.raises(ValueError, match=r"RTE/train\.tsv:3: label 'maybe' is not one of"):
        glue.read("rte", root, "train")
    _replace(tmp_path, "QNLI", "train.tsv", "index\tquestion\tlabel\n0\tq\tentailment\n")
    with pytest.raises(ValueError, match=r"QNLI/train\.tsv:1: missing column 'sentence' in the header"):
        glue.read("qnli", root, "train")
    _replace(tmp_path, "CoLA", "train.tsv", "gj04\t1\t\tFine.\ngj04\t0\n")
    with pytest.raises(ValueError, match=r"CoLA/train\.tsv:2: missing column 3 \(the row has 2 fields\)"):
        glue.read("cola", root, "train")
    _replace(tmp_path, "WNLI", "dev.tsv", "index\tsentence1\tsentence2\tlabel\n")
    with pytest.raises(ValueError, match=r"WNLI/dev\.tsv: the dev split is empty"):
        glue.read("wnli", root, "dev")
    _replace(tmp_path, "STS-B", "dev.tsv", GLUE_FILES["STS-B"]["dev.tsv"].replace("0.000", "high"))
    with pytest.raises(ValueError, match=r"STS-B/dev\.tsv:2: score 'high' is not a number"):
        glue.read("stsb", root, "dev")
    with pytest.raises(
        FileNotFoundError, match=r"SST-2/train\.tsv does not exist \(config\.data_dir is the GLUE"
    ):
        glue.read("sst2", str(tmp_path / "nowhere"), "train")
    # The task's own folder as data_dir (its train.tsv there) reads the same examples.
    assert glue.read("sst2", str(Path(root) / "SST-2"), "train") == glue.read("sst2", root, "train")
    with pytest.raises(ValueError, match="unknown task 'sst3'"):
        get_task("sst3")


def test_submission_files_have_the_glue_names_and_format(tmp_path) -> None:
    root = str(write_glue(tmp_path / "data"))
    out = tmp_path / "submit"
    written = set()
    for task in glue.LAYOUTS:
        spec = glue.TASKS[task]
        for split in spec.test_files:
            examples = glue.read(task, root, split)
            preds = (
                np.arange(len(examples)) % max(spec.num_labels, 2) if spec.labels else np.array([6.2, -1.0])
            )
            path = glue.write_submission(task, split, examples, preds[: len(examples)], str(out))
            written.add(Path(path).name)
            lines = Path(path).read_text().splitlines()
            assert lines[0] == "index\tprediction" and len(lines) == len(examples) + 1
            first = lines[1].split("\t")
            assert first[0] == examples[0].guid
            want = spec.labels[0] if spec.labels else "5.000"  # STS-B clipped to [0, 5]
            assert first[1] == want, task
    assert written == {
        "CoLA.tsv", "SST-2.tsv", "MRPC.tsv", "STS-B.tsv", "QQP.tsv", "MNLI-m.tsv", "MNLI-mm.tsv",
        "QNLI.tsv", "RTE.tsv", "WNLI.tsv",
    }  # fmt: skip
    assert (out / "RTE.tsv").read_text() == "index\tprediction\n0\tentailment\n1\tnot_entailment\n"


def test_task_write_test_maps_logits_to_labels(tmp_path) -> None:
    root = str(write_glue(tmp_path / "data"))
    task = get_task("mnli")
    examples = glue.read("mnli", root, "test_matched")
    split = Split("test_matched", {"input_ids": np.zeros((1, 4), np.int32)}, examples)
    logits = np.array([[0.1, 0.2, 3.0]])  # class 2 = "neutral" in the release's label order
    path = task.write_test(logits, split, str(tmp_path / "out"))
    assert Path(path).read_text() == "index\tprediction\n0\tneutral\n"


def test_glue_from_tfds_by_name_with_mock_data() -> None:
    import tensorflow_datasets as tfds

    with prepared_mock_data(num_examples=7):
        for task in ("cola", "stsb", "mnli", "qqp"):
            spec = glue.TASKS[task]
            for split in (*spec.eval_splits, "train"):
                examples = glue.read(task, "tfds", split)
                assert len(examples) == 7 and all(isinstance(e.text_a, str) for e in examples)
                assert (examples[0].text_b is None) == (task == "cola")
                if spec.labels:
                    assert all(0 <= e.label < len(spec.labels) for e in examples)
                else:
                    assert all(isinstance(e.label, float) for e in examples)
            test = glue.read(task, "tfds", next(iter(spec.test_files)))
            assert all(e.label is None and e.guid.isdigit() for e in test)
        # TFDS orders MNLI's classes entailment/neutral/contradiction: mapped by name.
        raw = [int(r["label"]) for r in tfds.as_numpy(tfds.load("glue/mnli", split="train"))]
        ours = [e.label for e in glue.read("mnli", "tfds", "train")]
        tfds_names = glue.LAYOUTS["mnli"].tfds_labels
        assert [glue.LABELS["mnli"][o] for o in ours] == [tfds_names[r] for r in raw]
        assert len(set(raw)) > 1


def test_glue_by_tfds_name_on_a_machine_without_a_network_is_one_line_at_once(tmp_path, monkeypatch) -> None:
    """Not prepared and no download host resolving: refused before TFDS's retries (minutes
    of them), naming the way to the data; nothing is written in the data folder."""

    def no_network(host, *args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    for name in corpora._PROXIES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    offline = (
        r"is not prepared in .* and cannot be downloaded here \([a-z.]+ does not resolve: no network\?\)"
    )
    with pytest.raises(
        ValueError, match=rf"^TFDS dataset 'glue/mnli' {offline}.*holding MNLI/ \(config\.data_dir"
    ):
        glue.read("mnli", f"tfds:{tmp_path}", "train")
    assert not list(tmp_path.iterdir())
    # Behind a proxy the hosts are the proxy's to resolve: TFDS is left to download.
    import tensorflow_datasets as tfds

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    download = RuntimeError("downloading")
    with (
        mock.patch.object(tfds.core.DatasetBuilder, "download_and_prepare", side_effect=download),
        pytest.raises(RuntimeError, match="downloading"),
    ):
        glue.read("mnli", f"tfds:{tmp_path}", "train")
