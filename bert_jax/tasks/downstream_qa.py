"""Extractive QA of the downstream suite through the SQuAD task: ``disfl_qa`` (SQuAD 2.0
style: Disfl-QA, Gupta et al., 2021, disfluent questions over SQuAD 2.0 paragraphs) and
``cpkc`` (SQuAD 1.1 style: BIG-bench's contextual_parametric_knowledge_conflicts, Natural
Questions passages whose answer entity was substituted).

The raw file is converted once into official SQuAD JSON files in the cache,
``<cache>/<task>/{train,dev,test}-v{2.0,1.1}.json`` (`downstream_splits` draws the splits by
group), with ``conversion.json`` recording the raw file's sha256, the example counts and
each written file's sha256: a changed raw file or a damaged converted one is converted
again. `SquadTask` then reads, featurises and scores them exactly as SQuAD (the official
EM/F1; v2.0 also HasAns/NoAns). Dev and test are both scored each epoch; for
``disfl_qa`` the test split is answered at the no-answer threshold tuned on dev (its
``best_*`` keys are the scores at that threshold, ``best_f1_thresh`` the dev threshold),
so the test figure is not tuned on test.
"""

from __future__ import annotations

import json
import os
from typing import Any

from bert_jax.storage import atomic_files
from bert_jax.tasks import downstream_data, downstream_splits, scorers
from bert_jax.tasks.base import Split, TaskData
from bert_jax.tasks.downstream_examples import Record
from bert_jax.tasks.downstream_readers import FILES, READERS
from bert_jax.tasks.squad import SquadTask, write_json

CONVERTER = 1  # bump when the conversion changes: cached files are then rewritten
VERSIONS = {"disfl_qa": "2.0", "cpkc": "1.1"}


def squad_json(records: list[Record], version: str) -> dict[str, Any]:
    """Records as an official SQuAD file: one article per group, one paragraph per context."""
    articles: dict[str, dict[str, Any]] = {}
    paragraphs: dict[tuple[str, str], dict[str, Any]] = {}
    for r in records:
        article = articles.setdefault(r.group, {"title": f"group-{len(articles)}", "paragraphs": []})
        key = (r.group, r.text_b or "")
        if key not in paragraphs:
            paragraphs[key] = {"context": r.text_b, "qas": []}
            article["paragraphs"].append(paragraphs[key])
        answers = [{"text": r.answer, "answer_start": r.answer_start}] if r.answer else []
        qa: dict[str, Any] = {"id": r.guid, "question": r.text_a, "answers": answers}
        if version == "2.0":
            qa["is_impossible"] = not answers
        paragraphs[key]["qas"].append(qa)
    return {"version": version, "data": list(articles.values())}


def _manifest_ok(folder: str, raw_sha: str) -> bool:
    path = os.path.join(folder, "conversion.json")
    if not os.path.exists(path):
        return False
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, json.JSONDecodeError):
        return False
    if manifest.get("raw_sha256") != raw_sha or manifest.get("converter") != CONVERTER:
        return False
    for name, sha in manifest.get("files", {}).items():
        file = os.path.join(folder, name)
        if not os.path.exists(file) or downstream_data.file_sha256(file) != sha:
            return False
    return bool(manifest.get("files"))


def convert(task: str, data_dir: str = "") -> str:
    """The folder of `task`'s SQuAD files in the cache (written when missing or stale)."""
    raw = downstream_data.require(data_dir, FILES[task])
    folder = os.path.join(downstream_data.cache_dir(data_dir), task)
    raw_sha = downstream_data.file_sha256(raw)  # the pinned file's, or an own copy's
    if _manifest_ok(folder, raw_sha):
        return folder
    return write_splits(task, READERS[task](raw), folder, raw_sha)


def write_splits(task: str, records: list[Record], folder: str, raw_sha: str) -> str:
    """Writes the three split files and ``conversion.json`` into `folder`."""
    version = VERSIONS[task]
    os.makedirs(folder, exist_ok=True)
    files, counts = {}, {}
    for split, rows in downstream_splits.by_split(records).items():
        name = f"{split}-v{version}.json"
        atomic_files.write_text(os.path.join(folder, name), json.dumps(squad_json(rows, version)))
        files[name] = downstream_data.file_sha256(os.path.join(folder, name))
        answered = sum(1 for r in rows if r.answer)
        counts[split] = {"questions": len(rows), "answered": answered, "groups": len({r.group for r in rows})}
    manifest = {"task": task, "raw_sha256": raw_sha, "converter": CONVERTER, "files": files, "counts": counts}
    atomic_files.write_json(os.path.join(folder, "conversion.json"), manifest, indent=2)
    return folder


class DownstreamSquadTask(SquadTask):
    """`SquadTask` on a converted file of the suite, scored on dev and test."""

    def __init__(self, name: str) -> None:
        super().__init__(version_2=VERSIONS[name] == "2.0")
        self.name = name
        self.eval_splits = ("dev", "test")
        self.dev_threshold: float | None = None

    def path(self, data: TaskData, split: str) -> str:
        version = VERSIONS[self.name]
        return os.path.join(convert(self.name, data.data_dir), f"{split}-v{version}.json")

    def score(self, outputs: Any, split: Split, out_dir: str) -> dict[str, float]:
        scores = super().score(outputs, split, out_dir)
        if not self.version_2:
            return scores
        if split.name == "dev":
            self.dev_threshold = float(scores["best_f1_thresh"])
            return scores
        return self._at_dev_threshold(split, out_dir)

    def _at_dev_threshold(self, split: Split, out_dir: str) -> dict[str, float]:
        """Official v2.0 scores of the answers at dev's tuned no-answer threshold (the
        run's ``null_score_diff_threshold`` before any dev split was scored)."""
        threshold = self.dev_threshold
        if threshold is None:
            threshold = float(split.meta.options["null_score_diff_threshold"])
        with open(os.path.join(out_dir, "nbest_predictions.json"), encoding="utf-8") as f:
            nbest = json.load(f)
        with open(os.path.join(out_dir, "null_odds.json"), encoding="utf-8") as f:
            null_odds = json.load(f)
        best_text = {q: next((c["text"] for c in n if c["text"]), "") for q, n in nbest.items()}
        answers = {q: "" if null_odds[q] > threshold else best_text[q] for q in best_text}
        write_json(os.path.join(out_dir, "predictions_dev_threshold.json"), answers)
        official = scorers.squad_v2(split.meta.data, answers)
        scores: dict[str, float] = {k: float(v) for k, v in official.items()}
        scores.update(best_exact=scores["exact"], best_f1=scores["f1"], best_f1_thresh=threshold)
        return scores


def split_counts(task: str, data_dir: str = "") -> dict[str, Any]:
    """The per-split counts recorded at conversion (questions, answered, groups)."""
    with open(os.path.join(convert(task, data_dir), "conversion.json")) as f:
        return json.load(f)["counts"]
