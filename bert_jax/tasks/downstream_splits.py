"""Fixed train/dev/test splits of the downstream suite, drawn by group.

None of the suite's files has a split, and their examples come in groups that share text:
the questions of one SQuAD paragraph (Disfl-QA), the entity-substituted copies of one
Natural Questions passage (contextual_parametric_knowledge_conflicts), the claims about one
Wikipedia page (VitaminC), the reviews of one film (Rotten Tomatoes), the conversations
of one film that repeat each other's lines (movie dialog). A random split by example
would put the same text on both sides, so a whole group goes to one split, chosen by
the SHA-256 of a fixed seed and the group's key: 8 in 10 groups train, 1 dev, 1 test.
The split of a group depends on nothing else (not on the file's order or on other
groups), so it is the same on every machine and for every run.
"""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

SPLITS = ("train", "dev", "test")
SEED = "bert_jax downstream splits v1"


def split_of(group: str) -> str:
    """The split of every example whose group key is `group`."""
    bucket = int(hashlib.sha256(f"{SEED}\n{group}".encode()).hexdigest()[:15], 16) % 10
    return "train" if bucket < 8 else ("dev" if bucket == 8 else "test")


def by_split(records: Iterable[Any]) -> dict[str, list[Any]]:
    """Records (each with a ``group`` key) by split, in their order within each split."""
    out: dict[str, list[Any]] = {s: [] for s in SPLITS}
    for r in records:
        out[split_of(r.group)].append(r)
    return out


def linked_groups(keys: Sequence[str], shared: Sequence[Iterable[str]]) -> list[str]:
    """Each item's group key when items sharing any string of `shared` (e.g. a line of
    dialogue) form one group: the smallest of the own `keys` in its connected component,
    so that the result does not depend on the items' order."""
    parent = list(range(len(keys)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[str, int] = {}
    for i, strings in enumerate(shared):
        for s in strings:
            if s in first:
                a, b = root(i), root(first[s])
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                first[s] = i
    smallest: dict[int, str] = {}
    for i, key in enumerate(keys):
        r = root(i)
        smallest[r] = min(smallest.get(r, key), key)
    return [smallest[root(i)] for i in range(len(keys))]


def summary(records: Iterable[Any]) -> dict[str, dict[str, int]]:
    """Examples and groups per split (what docs/downstream_tasks.md records)."""
    examples: collections.Counter = collections.Counter()
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for r in records:
        split = split_of(r.group)
        examples[split] += 1
        groups[split].add(r.group)
    return {s: {"examples": examples[s], "groups": len(groups[s])} for s in SPLITS}
