"""Pre-training evaluates its last step once: by the evaluation hook when the cadence or
the run's end brings it there, or (a run resumed after its last step) once after the loop;
``metrics.jsonl`` and the result record it either way."""

import json
from pathlib import Path

import pytest

from bert_jax.commands import run_settings
from bert_jax.pretraining import evaluation
from tests.conftest import tiny_pretraining


@pytest.fixture
def evaluations(monkeypatch) -> list[int]:
    """The phase of each held-out evaluation, whoever asks for it."""
    calls: list[int] = []
    real = evaluation.evaluate_held_out

    def counted(job, params, phase):
        calls.append(phase.start)
        return real(job, params, phase)

    monkeypatch.setattr(evaluation, "evaluate_held_out", counted)
    return calls


def _eval_rows(workdir: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows if r.get("split") == "eval"]
    assert len(steps) == len(set(steps)), steps  # one row per evaluated step
    return {r["step"]: r for r in rows if r.get("split") == "eval"}


@pytest.mark.parametrize(("every", "evaluated"), [(2, [2, 4]), (0, [4])])
def test_the_last_step_is_evaluated_once_and_recorded(tmp_path, evaluations, every, evaluated) -> None:
    config = tiny_pretraining(num_train_steps=4, eval_every_steps=every, checkpoint_every_steps=0)
    result = run_settings.pretrain(config, str(tmp_path))
    assert result.step == 4 and len(evaluations) == len(evaluated)
    rows = _eval_rows(tmp_path)
    assert sorted(rows) == evaluated
    assert {k: rows[4][k] for k in ("mlm_accuracy", "mlm_loss")} == {
        k: result.metrics[k] for k in ("mlm_accuracy", "mlm_loss")
    }
    assert (tmp_path / "best_metric.json").exists()
    # Run again after its last step: no step trains, the final evaluation runs once (its row
    # is already there) and the result is the same.
    evaluations.clear()
    again = run_settings.pretrain(config, str(tmp_path))
    assert len(evaluations) == 1 and _eval_rows(tmp_path) == rows
    assert again.metrics["mlm_accuracy"] == result.metrics["mlm_accuracy"]
