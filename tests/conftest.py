"""Test set-up shared by every test module."""

import os
import sys
from pathlib import Path

import pytest

# Tests run on the CPU (one device in this process; sharding tests start subprocesses with
# 8 virtual devices). Set before JAX is imported anywhere.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # the plan tests load libtpu twice

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # so `configs` and `bench` import as packages


def tiny_pretraining(**overrides):
    """The pre-training config most tests start from: the tiny model on synthetic data, a
    few short steps. `overrides` may name nested keys with dots (``**{"data.nsp": False}``)."""
    from configs import pretrain as pretrain_config

    c = pretrain_config.get_config("tiny")
    c.data.source = "synthetic"
    c.update(
        dict(
            global_batch_size=4,
            max_seq_length=32,
            max_predictions_per_seq=5,
            num_train_steps=6,
            warmup_steps=1,
            log_every_steps=1,
            eval_every_steps=3,
            eval_steps=1,
            checkpoint_every_steps=2,
        )
    )
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = c
        for p in parents:
            node = node[p]
        node[leaf] = value
    return c


def tiny_two_phase(**overrides):
    """`tiny_pretraining` in two phases (sequence 32 for 2 steps, then 64 for 2), no
    dropout, no evaluation or checkpoints: the phase tests' start."""
    settings = {
        "model.hidden_dropout_prob": 0.0,
        "model.attention_probs_dropout_prob": 0.0,
        "num_train_steps": 4,
        "eval_every_steps": 0,
        "checkpoint_every_steps": 0,
        "phase2_fraction": 0.5,
        "phase2_max_seq_length": 64,
        "phase2_max_predictions_per_seq": 8,
    }
    return tiny_pretraining(**{**settings, **overrides})


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> str:
    """A tiny BERT checkpoint with the bundled vocabulary, for fine-tuning tests."""
    from tests.helpers.task_data import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="module")
def downstream_root(tmp_path_factory) -> Path:
    """A downstream-data folder of the suite's five files in miniature (their sources' own
    formats, real sentences), taken in as own copies: the tests of the code that reads,
    converts and fine-tunes on them never depend on the pinned files' download."""
    from tests.helpers.downstream_files import miniature_cache

    return miniature_cache(tmp_path_factory.mktemp("downstream"))


def pinned_downstream_file(name: str) -> str:
    """The cached pinned file `name` (a key of `downstream_data.MEMBERS`), or a skip saying
    why it is not there (`setup_env.sh test` fetches the files; a source can be gone)."""
    from bert_jax.tasks import downstream_data

    root = downstream_data.cache_dir()
    reason = downstream_data.problem(root, downstream_data.MEMBERS[name])
    if reason or name in downstream_data.copies(root):
        pytest.skip(f"the pinned file is not in the cache: {reason or 'an own copy is'}")
    return os.path.join(root, name)
