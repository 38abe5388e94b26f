"""The typed run's phases (`PretrainSettings`); phase 2's own remat policy and gradient
accumulation (`phase2_remat_policy`, `phase2_grad_accum_steps`): checked before the run,
applied when the run switches phase, and the same training as without them."""

import json

import pytest

from bert_jax.commands import run_settings
from bert_jax.pretraining import pretrain
from bert_jax.pretraining.settings import PhaseStep
from bert_jax.training import engine
from tests.conftest import tiny_two_phase


def test_phase_step_falls_back_to_the_runs_and_for_phase_changes_only_what_differs() -> None:
    c = tiny_two_phase(remat_policy="dots", grad_accum_steps=2)
    run = run_settings.pretrain_settings(c)
    assert run.phase_step(1) == run.phase_step(2) == PhaseStep("dots", 2)
    assert run.for_phase(2) is run
    c.phase2_remat_policy, c.phase2_grad_accum_steps = "full", 4
    run = run_settings.pretrain_settings(c)
    assert run.phase_step(1) == PhaseStep("dots", 2) and run.phase_step(2) == PhaseStep("full", 4)
    second = run.for_phase(2)
    assert (second.training.numerics.remat_policy, second.training.grad_accum_steps) == ("full", 4)
    assert (run.training.numerics.remat_policy, run.training.grad_accum_steps) == ("dots", 2)  # untouched
    assert second.phase_step(1) == PhaseStep("full", 4) and second.model == run.model


def test_phases_split_the_steps_as_the_paper_does() -> None:
    run = run_settings.pretrain_settings(tiny_two_phase(num_train_steps=1000, phase2_fraction=0.1))
    first, second = run.phases()
    assert (first.start, first.end, first.max_seq_length) == (0, 900, 32)
    assert (second.start, second.end, second.max_seq_length, second.max_predictions_per_seq) == (
        900,
        1000,
        64,
        8,
    )
    one_phase = run_settings.pretrain_settings(tiny_two_phase(phase2_fraction=0.0))
    assert [p.end for p in one_phase.phases()] == [4]


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
        pretrain.check_run(run_settings.pretrain_settings(tiny_two_phase(**{key: value})))
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
    run_settings.pretrain(tiny_two_phase(), str(tmp_path / "plain"))
    assert sorted(set(traced)) == [(32, "none", 1), (64, "none", 1)]
    traced.clear()
    run_settings.pretrain(
        tiny_two_phase(phase2_remat_policy="full", phase2_grad_accum_steps=2), str(tmp_path / "phase2")
    )
    assert sorted(set(traced)) == [(32, "none", 1), (64, "full", 2)]
    plain, saving = _losses(tmp_path / "plain"), _losses(tmp_path / "phase2")
    assert sorted(plain) == sorted(saving) == [1, 2, 3, 4]
    # The same gradient in two micro-batches, recomputed: the same losses in phase 2.
    for s in (3, 4):
        assert saving[s] == pytest.approx(plain[s], rel=1e-4)
