"""The downstream suite's tasks. On the pinned files (fetched by `setup_env.sh test`; each
test skips, saying why, where its file is not cached): the prompt text is stripped, the
labels counted, the splits fixed, disjoint by group and of the sizes
docs/downstream_tasks.md records. On the miniature files (`downstream_root`): the SQuAD
conversion is exact (every answer is its context's slice at answer_start; the SQuAD
reader accepts the files), the official SQuAD scripts score the converted files as our
scorers do, and the classification tasks load their splits."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.tasks import (
    downstream_data,
    downstream_examples,
    downstream_qa,
    downstream_readers,
    downstream_splits,
    scorers,
    squad,
)
from bert_jax.tasks.registry import get_task
from configs import finetune as any_config
from tests.conftest import ROOT, pinned_downstream_file
from tests.tasks.test_squad import _official


def _task_data(config):
    """What the task reads of a fine-tuning config (resolved at the command's edge)."""
    return run_settings.finetune_settings(config).task_data


# Split sizes (examples; groups) as docs/downstream_tasks.md records them.
SIZES = {
    "disfl_qa": {"train": (6464, 982), "dev": (708, 107), "test": (822, 115)},
    "cpkc": {"train": (14069, 11303), "dev": (1708, 1377), "test": (1751, 1434)},
    "dialog_pairs": {"train": (40105, 39103), "dev": (4995, 4913), "test": (4900, 4790)},
    "vitaminc": {"train": (44234, 2477), "dev": (5599, 302), "test": (4835, 289)},
    "rotten_tomatoes": {"train": (9918, 399), "dev": (1415, 53), "test": (1419, 55)},
}
PROMPTS = ("\ncontext:", "Context:", "Question:", "Claim:", "In the preceding conversation, were the")


LABELS = {"dialog_pairs": [26415, 23585], "vitaminc": [27242, 20169, 7257], "rotten_tomatoes": [5384, 7368]}


@functools.cache  # each pinned file read once for both tests that read it (a skip is not cached)
def _records(task: str) -> list:
    return downstream_readers.READERS[task](pinned_downstream_file(downstream_readers.FILES[task]))


@pytest.mark.parametrize("task", list(downstream_readers.READERS))
def test_prompts_are_stripped_and_labels_counted(task) -> None:
    records = _records(task)
    for r in records:
        texts = [r.text_a] if r.text_b is None else [r.text_a, r.text_b]
        assert all(t and t == t.strip() for t in texts)
        assert not any(p in t for p in PROMPTS for t in texts), (task, texts)
    if task == "disfl_qa":
        assert len(records) == 8000 - 6  # 5 repeated inputs, 1 empty context
        assert sum(1 for r in records if r.answer) == 5887  # the rest are "unknown"
    if task in LABELS:
        assert [sum(r.label == k for r in records) for k in range(len(LABELS[task]))] == LABELS[task]


def _conversations() -> dict[str, str]:
    """Example id → its conversation, from the raw movie dialog file."""
    path = pinned_downstream_file(downstream_readers.FILES["dialog_pairs"])
    out = {}
    for _, entry in downstream_examples.bigbench_examples(path):
        conversation = entry["input"].partition(" ----- In the preceding conversation")[0]
        out[downstream_examples.content_id("dialog_pairs", entry["input"])] = conversation.strip()
    return out


@pytest.mark.parametrize("task", list(downstream_readers.READERS))
def test_splits_are_disjoint_by_group_and_of_the_recorded_sizes(task) -> None:
    records = _records(task)
    summary = downstream_splits.summary(records)
    assert {s: (v["examples"], v["groups"]) for s, v in summary.items()} == SIZES[task], task
    splits = downstream_splits.by_split(records)
    groups = {s: {r.group for r in rows} for s, rows in splits.items()}
    assert not groups["train"] & groups["dev"] and not groups["train"] & groups["test"]
    assert not groups["dev"] & groups["test"]
    if task != "dialog_pairs":  # the group keys are the contexts, passages, pages, films
        return
    # No line of six words or more is in two splits (the conversations' links).
    conversation = _conversations()
    lines = {
        s: {x for r in rows for x in downstream_readers._long_sentences(conversation[r.guid])}
        for s, rows in splits.items()
    }
    assert lines["train"] and not lines["train"] & (lines["dev"] | lines["test"])


def test_squad_conversion_is_exact(downstream_root) -> None:
    for task, version in downstream_qa.VERSIONS.items():
        folder = Path(downstream_qa.convert(task, str(downstream_root)))
        manifest = json.loads((folder / "conversion.json").read_text())
        contexts = {}
        for split in downstream_splits.SPLITS:
            path = folder / f"{split}-v{version}.json"
            assert manifest["files"][path.name] == downstream_data.file_sha256(str(path))
            data, examples = squad.read_examples(str(path), version_2=version == "2.0")
            assert len(examples) == manifest["counts"][split]["questions"] > 0
            contexts[split] = set()
            for article in data:
                for p in article["paragraphs"]:
                    contexts[split].add(p["context"])
                    for qa in p["qas"]:
                        for a in qa["answers"]:
                            assert p["context"][a["answer_start"] :].startswith(a["text"]) and a["text"]
                        assert qa.get("is_impossible", False) == (not qa["answers"])
        assert not contexts["train"] & contexts["dev"] and not contexts["train"] & contexts["test"]
    # A second call finds the files intact and keeps them; a damaged one is written again.
    train = Path(downstream_root, "cpkc", "train-v1.1.json")
    mtime = train.stat().st_mtime_ns
    assert downstream_qa.convert("cpkc", str(downstream_root)) and train.stat().st_mtime_ns == mtime
    train.write_text("{}")
    downstream_qa.convert("cpkc", str(downstream_root))
    assert squad.read_examples(str(train), version_2=False)[1]


def _tiny_predictions(data: list, n: int) -> tuple[list, dict[str, str]]:
    """The first `n` questions and answers of four kinds: gold, a longer span, a wrong
    one, and no answer."""
    qids = [qa["id"] for a in data for p in a["paragraphs"] for qa in p["qas"]][:n]
    data = squad.restrict(data, set(qids))
    preds = {}
    pairs = [(p["context"], qa) for a in data for p in a["paragraphs"] for qa in p["qas"]]
    for i, (context, qa) in enumerate(pairs):
        gold = qa["answers"][0]["text"] if qa["answers"] else ""
        words = context.split()
        preds[qa["id"]] = [gold, f"{gold} {words[-1]}", " ".join(words[:2]), ""][i % 4]
    return data, preds


def test_official_scripts_score_the_converted_files_as_ours_do(downstream_root, tmp_path) -> None:
    for task, version in downstream_qa.VERSIONS.items():
        folder = downstream_qa.convert(task, str(downstream_root))
        full = squad.load_json(str(Path(folder, f"dev-v{version}.json")))
        data, preds = _tiny_predictions(full["data"], 24)
        (tmp_path / "data.json").write_text(json.dumps({"version": version, "data": data}))
        (tmp_path / "preds.json").write_text(json.dumps(preds))
        script = _official(version)[1]
        args = [sys.executable, script, str(tmp_path / "data.json"), str(tmp_path / "preds.json")]
        out = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
        official = json.loads(out.stdout)
        ours = scorers.squad_v2(data, preds) if version == "2.0" else scorers.squad_v1(data, preds)
        assert ours == pytest.approx(official)
        assert 0 < official["f1"] < 100
        if version == "2.0":  # both kinds of question are in the tiny set
            assert official["HasAns_total"] and official["NoAns_total"]


def test_classification_tasks_load_their_splits(downstream_root) -> None:
    tok = tokenization.load_tokenizer()
    for task in ("dialog_pairs", "vitaminc", "rotten_tomatoes"):
        config = any_config.get_config(task)
        config.data_dir, config.max_eval_examples = str(downstream_root), 50
        split = get_task(task).load(_task_data(config), tok, "test")
        assert len(split) == 50 and "labels" in split.arrays
        pairs = split.arrays["segment_ids"].max() == 1
        assert pairs == (task != "rotten_tomatoes")  # A/B segments for the pair tasks
    assert get_task("vitaminc").eval_splits == ("dev", "test") == get_task("disfl_qa").eval_splits
    with pytest.raises(ValueError, match="has the splits train, dev, test, not 'validation'"):
        get_task("vitaminc").load(_task_data(any_config.get_config("vitaminc")), tok, "validation")
