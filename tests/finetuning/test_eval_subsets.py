"""`max_eval_examples` draws a seeded, label-stratified subset, the same in every evaluation."""

import collections
import dataclasses

import numpy as np

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.tasks import base, bbc, registry
from configs import bbc as bbc_config


def _task_data(config):
    """What the task reads of a fine-tuning config (resolved at the command's edge)."""
    return run_settings.finetune_settings(config).task_data


def test_bbc_dev_subset_covers_every_topic_and_repeats() -> None:
    # The dev split is sorted by topic: its first 32 articles are all business.
    assert {e.label for e in bbc.read("", "dev")[:32]} == {0}
    config = bbc_config.get_config()
    config.max_eval_examples = 32
    config.max_seq_length = 16
    task = registry.get_task("bbc")
    tok = tokenization.cached_tokenizer("", True)
    first, second = (
        task.load(_task_data(config), tok, "dev"),
        task.load(_task_data(config), tok, "dev"),
    )
    labels = first.arrays["labels"]
    assert len(labels) == 32 and len(set(labels.tolist())) > 1
    assert set(labels.tolist()) == set(range(len(bbc.LABELS)))  # stratified: all five topics
    for key in first.arrays:
        np.testing.assert_array_equal(first.arrays[key], second.arrays[key])
    assert [e.guid for e in first.meta] == [e.guid for e in second.meta]
    config.seed += 1  # another run's seed draws another subset
    assert [e.guid for e in task.load(_task_data(config), tok, "dev").meta] != [e.guid for e in first.meta]


def test_stratified_subset_keeps_label_shares_and_split_order() -> None:
    labels = [0] * 80 + [1] * 15 + [2] * 5
    items = list(range(100))
    config = base.TaskData(seed=7, max_train_examples=0, max_eval_examples=20)
    kept = base.subset(items, config, "dev", labels)
    assert kept == sorted(kept) and len(set(kept)) == 20
    assert collections.Counter(labels[i] for i in kept) == {0: 16, 1: 3, 2: 1}
    plain = base.subset(items, config, "dev")  # no labels (e.g. SQuAD, NER): a uniform draw
    assert len(plain) == 20 and plain == sorted(plain) and plain != items[:20]
    assert base.subset(items, config, "dev", labels) == kept
    config = dataclasses.replace(config, max_eval_examples=0)
    assert base.subset(items, config, "dev", labels) is items
    # Training subsets: a uniform seeded draw, labels or not.
    config = dataclasses.replace(config, max_train_examples=10)
    order = np.random.default_rng(7).permutation(100)[:10]
    assert base.subset(items, config, "train", labels) == sorted(order.tolist())
