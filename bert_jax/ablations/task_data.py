"""Task data by TFDS name for the tasks that read the original files (SQuAD, CoNLL-2003).

GLUE reads ``data_dir="tfds"`` itself (`tasks.glue`). For SQuAD and CoNLL-2003 a column
whose data folder is ``tfds`` (or ``tfds:<TFDS data dir>``) gets TFDS's splits written
once, in the original format, under ``<cache>/<task>/``: ``train-v1.1.json``/
``dev-v1.1.json`` (or v2.0) as the official release (paragraphs grouped by title and
context, in TFDS's order), and ``train.txt``/``valid.txt``/``test.txt`` with one ``word
POS chunk NER`` line per token. The task then reads them as it reads the originals.
"""

from __future__ import annotations

import json
import os
from typing import Any

from bert_jax.data import corpora
from bert_jax.storage import atomic_files, files, tensorflow_runtime
from bert_jax.tasks import glue

# task → (TFDS name, {file split: TFDS split})
_TFDS = {
    "squad1.1": ("squad/v1.1", {"train": "train", "dev": "validation"}),
    "squad2.0": ("squad/v2.0", {"train": "train", "dev": "validation"}),
    "conll2003": ("conll2003", {"train": "train", "valid": "validation", "test": "test"}),
}


def is_tfds(data_dir: str) -> bool:
    return data_dir == "tfds" or data_dir.startswith("tfds:")


def resolve(task: str, data_dir: str, cache: str) -> str:
    """The folder the task reads: `data_dir`, or for a TFDS name of SQuAD/CoNLL-2003 the
    exported copy (written on first use)."""
    task = task.split("+")[0]
    if not is_tfds(data_dir) or task not in _TFDS:
        return data_dir
    folder = os.path.join(cache, task)
    done = os.path.join(folder, ".complete")
    if not os.path.exists(done):
        os.makedirs(folder, exist_ok=True)
        tfds_dir = data_dir.partition(":")[2] or None
        name, splits = _TFDS[task]
        corpora.ensure_tfds(name, tfds_dir or "", instead=_instead(task))  # a table runs on one host
        for split, tfds_split in splits.items():
            rows = _load(name, tfds_split, tfds_dir)
            if task == "conll2003":
                _write_conll(rows, os.path.join(folder, f"{split}.txt"), name, tfds_dir)
            else:
                version = task.removeprefix("squad")
                _write_squad(rows, os.path.join(folder, f"{split}-v{version}.json"), version)
        atomic_files.write_text(done, f"{name}\n")
    return folder


def _instead(task: str) -> str:
    family = "conll2003" if task == "conll2003" else "squad"
    return f"or give the folder of the original files (config.data_dirs.{family})"


def check(task: str, data_dir: str, where: str) -> None:
    """Refuses in one line naming `where` (a column) task data this machine cannot get: a
    TFDS name neither prepared nor downloadable here (`corpora.check_tfds`), a local folder
    that does not exist. For a table's columns before its rows pre-train (hours to days)."""
    task = task.split("+")[0]
    try:
        if is_tfds(data_dir):
            tfds_dir = data_dir.partition(":")[2]
            if task in _TFDS:
                corpora.check_tfds(_TFDS[task][0], tfds_dir, _instead(task))
            elif task in glue.TASKS:
                glue.check_tfds(task, tfds_dir)
        elif data_dir and not files.is_remote(data_dir) and not os.path.isdir(data_dir):
            raise ValueError(f"data folder {data_dir} does not exist")
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None


def _load(name: str, split: str, data_dir: str | None) -> list[dict[str, Any]]:
    tfds = tensorflow_runtime.tensorflow_datasets()

    return list(tfds.as_numpy(tfds.load(name, split=split, data_dir=data_dir, download=False)))


def _text(x: Any) -> str:
    return x.decode("utf-8") if isinstance(x, bytes) else str(x)


def _write_conll(rows: list[dict[str, Any]], path: str, name: str, data_dir: str | None) -> None:
    tfds = tensorflow_runtime.tensorflow_datasets()

    features = tfds.builder(name, data_dir=data_dir).info.features
    names = {k: features[k].feature.names for k in ("pos", "chunks", "ner")}
    lines = ["-DOCSTART- -X- -X- O", ""]
    for row in rows:
        for i, token in enumerate(row["tokens"]):
            tags = [names[k][int(row[k][i])] for k in ("pos", "chunks", "ner")]
            lines.append(" ".join([_text(token).replace(" ", "_") or "_", *tags]))
        lines.append("")
    atomic_files.write_text(path, "\n".join(lines) + "\n")


def _answers(block: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"text": _text(t), "answer_start": int(s)}
        for t, s in zip(block["text"], block["answer_start"], strict=True)
    ]


def _write_squad(rows: list[dict[str, Any]], path: str, version: str) -> None:
    articles: dict[str, dict[str, Any]] = {}
    paragraphs: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        title, context = _text(row["title"]), _text(row["context"])
        article = articles.setdefault(title, {"title": title, "paragraphs": []})
        if (title, context) not in paragraphs:
            paragraphs[(title, context)] = {"context": context, "qas": []}
            article["paragraphs"].append(paragraphs[(title, context)])
        qa = {"id": _text(row["id"]), "question": _text(row["question"]), "answers": _answers(row["answers"])}
        if version == "2.0":
            qa["is_impossible"] = bool(row["is_impossible"])
            if qa["is_impossible"]:
                qa["answers"] = []
                qa["plausible_answers"] = _answers(row["plausible_answers"])
        paragraphs[(title, context)]["qas"].append(qa)
    atomic_files.write_text(path, json.dumps({"version": version, "data": list(articles.values())}))
