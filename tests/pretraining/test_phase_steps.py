"""Phase 2's own remat policy and gradient accumulation (`phase2_remat_policy`,
`phase2_grad_accum_steps`): checked before the run, applied when the run switches phase,
and the same training as without them."""

import json

import pytest

from bert_jax.pretraining import phase_steps, pretrain
from bert_jax.training import engine
from tests.conftest import tiny_pretraining


def _config(**overrides):
    return tiny_pretraining(
        **{"model.hidden_dropout_prob": 0.0, "model.attention_probs_dropout_prob": 0.0},
        num_train_steps=4,
        eval_every_steps=0,
        checkpoint_every_steps=0,
        phase2_fraction=0.5,
        phase2_max_seq_length=64,
        phase2_max_predictions_per_seq=8,
        **overrides,
    )


def test_settings_fall_back_to_the_runs_and_step_config_copies_only_when_they_differ() -> None:
    c = _config(remat_policy="dots", grad_accum_steps=2)
    assert phase_steps.settings(c, 1) == phase_steps.settings(c, 2) == ("dots", 2)
    assert phase_steps.step_config(c, 2) is c
    c.phase2_remat_policy, c.phase2_grad_accum_steps = "full", 4
    assert phase_steps.settings(c, 1) == ("dots", 2) and phase_steps.settings(c, 2) == ("full", 4)
    second = phase_steps.step_config(c, 2)
    assert second is not c and (second.remat_policy, second.grad_accum_steps) == ("full", 4)
    assert (c.remat_policy, c.grad_accum_steps) == ("dots", 2)  # the run's config is untouched


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("phase2_remat_policy", "some", "config.phase2_remat_policy='some'"),
        ("remat_policy", "", "config.remat_policy=''"),
        ("phase2_grad_accum_steps", 3, "config.phase2_grad_accum_steps=3"),
        ("phase2_grad_accum_steps", -1, "config.phase2_grad_accum_steps=-1"),
        ("grad_accum_steps", 0, "config.grad_accum_steps=0"),
    ],
)
def test_check_refuses_a_bad_phase_setting_in_one_line_naming_the_key(key, value, named) -> None:
    with pytest.raises(ValueError) as err:
        pretrain.check_config(_config(**{key: value}))
    assert named in str(err.value) and "\n" not in str(err.value)


def _losses(workdir) -> dict[int, float]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if r.get("split", "train") == "train" and "loss" in r}


def test_phase2_runs_its_own_step_settings_and_trains_the_same(tmp_path, monkeypatch) -> None:
    traced = []
    step = engine.train_step

    def spy(state, batch, *, objective, grad_accum_steps, **kw):
        # Runs once per compilation: the settings each phase's step was built with.
        shape = batch["input_ids"].shape
        traced.append((shape[1], objective.model.numerics.remat_policy, grad_accum_steps))
        return step(state, batch, objective=objective, grad_accum_steps=grad_accum_steps, **kw)

    monkeypatch.setattr(engine, "train_step", spy)
    pretrain.train_and_evaluate(_config(), str(tmp_path / "plain"))
    assert sorted(set(traced)) == [(32, "none", 1), (64, "none", 1)]
    traced.clear()
    pretrain.train_and_evaluate(
        _config(phase2_remat_policy="full", phase2_grad_accum_steps=2), str(tmp_path / "phase2")
    )
    assert sorted(set(traced)) == [(32, "none", 1), (64, "full", 2)]
    plain, saving = _losses(tmp_path / "plain"), _losses(tmp_path / "phase2")
    assert sorted(plain) == sorted(saving) == [1, 2, 3, 4]
    # The same gradient in two micro-batches, recomputed: the same losses in phase 2.
    for s in (3, 4):
        assert saving[s] == pytest.approx(plain[s], rel=1e-4)
