"""Sizes checked at start against the memory there is: a pre-training batch this host or a
device cannot hold is refused in one line naming its key (`batch_memory`, `memory_fit`)."""

import re

import pytest

from bert_jax.commands import run_settings
from bert_jax.pretraining import batch_memory
from bert_jax.training import memory_fit, sharding
from tests.conftest import tiny_pretraining

LIMIT = 100_000_000  # bytes, on the host and on the device


@pytest.fixture
def small_machine(monkeypatch) -> None:
    monkeypatch.setattr(memory_fit, "host_bytes", lambda: LIMIT)
    monkeypatch.setattr(memory_fit, "device_bytes", lambda: (LIMIT, "cpu"))


def _check(**overrides) -> None:
    run = run_settings.pretrain_settings(tiny_pretraining(**overrides))
    batch_memory.check(run, sharding.make_mesh(run.training.mesh_shape))


def test_a_batch_the_host_or_a_device_cannot_hold_is_refused_naming_its_key(small_machine) -> None:
    _check()  # the tests' batch of 4 x 32 tokens
    # Host: 1,000,000 rows x (32 int32 ids + an int64 position) = 136 MB.
    with pytest.raises(ValueError, match=re.escape(
        "config.global_batch_size=1000000: a batch of 1,000,000 rows of 32 tokens needs at least 130 MiB, "
        "more than the 95 MiB available on this host: lower --config.global_batch_size"
    )):  # fmt: skip
        _check(global_batch_size=1_000_000, eval_batch_size=4)
    # Device: 8,192 rows x (32 x 128 float32 activations + 2 x 32 x 32 float32 scores) = 201 MB;
    # four micro-batches hold a quarter of it.
    with pytest.raises(ValueError, match=re.escape(
        "config.global_batch_size=8192: one layer of activations for 8,192 rows of 32 tokens needs at "
        "least 192 MiB, more than the 95 MiB one cpu device holds: lower --config.global_batch_size or "
        "raise --config.grad_accum_steps"
    )):  # fmt: skip
        _check(global_batch_size=8192, eval_batch_size=4)
    _check(global_batch_size=8192, eval_batch_size=4, grad_accum_steps=4)
    with pytest.raises(ValueError, match=r"^config\.eval_batch_size=8192: one layer of activations"):
        _check(global_batch_size=8192, grad_accum_steps=4)  # eval batches are not split


def test_memory_is_read_from_the_machine() -> None:
    assert memory_fit.host_bytes() > 0
    available, platform = memory_fit.device_bytes()
    assert available > 0 and platform == "cpu"
