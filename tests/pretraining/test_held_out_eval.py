"""Held-out evaluation on prepared data: ``eval_steps`` bounds it to the first batches of the
held-out order (0 = the whole split), the sums kept on the device equal per-batch sums
read to the host, and the presets' default is bounded."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from bert_jax.commands import run_settings
from bert_jax.data import prepared_cache, sources
from bert_jax.pretraining import evaluation, pretrain
from bert_jax.training import sharding
from configs import pretrain as pretrain_config

EVAL_BATCH = 32


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    c = pretrain_config.get_config("tiny")
    c.data.source = "wiki_excerpt"  # prepared into the cache on first use
    c.data.cache_dir = str(tmp_path_factory.mktemp("cache"))
    c.eval_batch_size = EVAL_BATCH
    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    run = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    params = run.engine.init_state(0).params
    phase = run.run.phases()[0]
    held_out = prepared_cache.open_prepared(run.data, "eval", phase.max_seq_length, int(c.seed)).size
    return run, params, phase, held_out // EVAL_BATCH


def _evaluate(setup, eval_steps: int, monkeypatch) -> tuple[dict, np.ndarray, int]:
    """Metrics, targets and the number of eval steps run with `eval_steps`."""
    run, params, phase, _ = setup
    run.run = dataclasses.replace(run.run, eval_steps=eval_steps)  # kept: `_host_sums` reads the same
    step, calls = run.engine.eval_step, []
    with monkeypatch.context() as m:
        m.setitem(run.engine.__dict__, "eval_step", lambda p, b: calls.append(1) or step(p, b))
        metrics, targets = evaluation.evaluate_held_out(run, params, phase)
    return metrics, targets, len(calls)


def _host_sums(setup, num_batches: int) -> tuple[dict[str, float], np.ndarray]:
    """Reference: each batch's sums read to the host and added there in float64."""
    run, params, phase, _ = setup
    sums: dict[str, float] = {}
    targets = []
    for _, batch in zip(range(num_batches), run.eval_batches(phase), strict=False):
        for k, v in jax.device_get(run.engine.eval_step(params, batch)).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        targets.append(evaluation.masked_targets(batch))
    return sums, np.sort(np.concatenate(targets))


def test_eval_steps_bounds_the_prepared_held_out_pass(setup, monkeypatch) -> None:
    full_batches = setup[3]
    assert full_batches > 3  # the split holds more than the bound
    metrics, targets, calls = _evaluate(setup, 3, monkeypatch)
    assert calls == 3
    sums, want = _host_sums(setup, 3)  # the first 3 batches of the held-out order
    assert metrics["num_predictions"] == sums["mlm_weight"]
    assert metrics["mlm_loss"] == pytest.approx(sums["mlm_loss_sum"] / sums["mlm_weight"], rel=1e-6)
    np.testing.assert_array_equal(targets, want)
    # The same batches at every evaluation.
    again, _, _ = _evaluate(setup, 3, monkeypatch)
    assert again == metrics
    _, _, calls = _evaluate(setup, 1, monkeypatch)
    assert calls == 1


def test_a_bound_covering_the_split_is_the_full_pass(setup, monkeypatch) -> None:
    full_batches = setup[3]
    whole, whole_targets, calls = _evaluate(setup, 0, monkeypatch)  # 0: the whole split
    assert calls == full_batches
    covering, covering_targets, calls = _evaluate(setup, full_batches + 5, monkeypatch)
    assert calls == full_batches
    assert covering == whole
    np.testing.assert_array_equal(covering_targets, whole_targets)
    sums, want = _host_sums(setup, full_batches)
    for key in ("mlm_weight", "mlm_changed_weight"):
        assert sums[key] == whole[{"mlm_weight": "num_predictions"}.get(key, "num_changed_predictions")]
    assert whole["mlm_accuracy"] == pytest.approx(sums["mlm_correct"] / sums["mlm_weight"], rel=1e-6)
    np.testing.assert_array_equal(whole_targets, want)


def test_the_on_device_sum_is_compensated() -> None:
    """10,000 additions of 0.1 in plain float32 drift by ~1e-4 relative; compensated, the
    sum stays within float32's rounding of the exact 1000."""
    total = compensation = jax.numpy.zeros((), jax.numpy.float32)
    add = jax.jit(evaluation._neumaier_add)
    x = jax.numpy.float32(0.1)
    plain = np.float32(0.0)
    for _ in range(10_000):
        total, compensation = add(total, compensation, x)
        plain += np.float32(0.1)
    assert abs(float(total) + float(compensation) - 10_000 * float(np.float32(0.1))) < 1e-4
    assert abs(float(plain) - 1000.0) > 1e-2  # what the compensation saves


def test_negative_eval_steps_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"config\.eval_steps=-1"):
        sources.eval_batches_per_pass(-1)


@pytest.mark.parametrize("preset", sorted({*pretrain_config.SIZES, *pretrain_config.NAMED}))
def test_every_preset_bounds_its_evaluations_by_default(preset: str) -> None:
    c = pretrain_config.get_config(preset)
    assert sources.eval_batches_per_pass(int(c.eval_steps)) is not None and int(c.eval_steps) > 0
