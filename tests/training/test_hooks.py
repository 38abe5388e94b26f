"""Logging, the progress line, the divergence stop and a job's own work are hooks of one
kind (`hooks.Hook`), each reaching the run through its `StepContext` only."""

import json
import math
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.storage import files
from bert_jax.training import exit_codes, hooks, loop
from bert_jax.training.metric_writer import MetricsLogger
from bert_jax.training.settings import CheckpointSettings, TrainingSettings

BATCH = {"input_ids": np.zeros((2, 8), np.int32)}


class _Engine:
    """A train step whose loss is the step number (NaN from `nan_from` on)."""

    mesh = None

    def __init__(self, nan_from: int = 0) -> None:
        self.nan_from = nan_from

    def train_step(self, state, batch):
        step = int(state.step) + 1
        loss = math.nan if self.nan_from and step >= self.nan_from else float(step)
        return SimpleNamespace(step=jnp.int32(step)), {
            "loss": jnp.float32(loss),
            "grad_norm": jnp.float32(1.0),
        }


def _settings(log_every: int) -> TrainingSettings:
    saving = CheckpointSettings(checkpoint_every_steps=0, keep_checkpoints=1, async_checkpointing=False)
    return TrainingSettings(checkpoints=saving, log_every_steps=log_every)


def _rows(workdir) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def _train(workdir, settings, engine, total, job_hooks=(), ends=()):
    with loop.TrainingRun(str(workdir), settings, total_steps=total) as run:
        run.logger = MetricsLogger(str(workdir), total)
        defaults = hooks.default_hooks(settings, total_steps=total, console_keys=("grad_norm",), ends=ends)
        state = SimpleNamespace(step=jnp.int32(0))
        batches = iter(lambda: BATCH, None)
        return run.steps(
            engine, state, batches, end=total, flops=lambda b: 1.0, hooks=[*defaults, *job_hooks]
        )


def test_default_hooks_keep_their_cadence_and_a_job_hook_logs_through_its_context(tmp_path, capsys) -> None:
    seen = []

    def job_hook(ctx: hooks.StepContext) -> None:
        seen.append((ctx.step, int(ctx.state.step), float(ctx.metrics["loss"]), ctx.total_steps))
        ctx.log({"score": ctx.step / 10}, split="dev")

    _train(
        tmp_path,
        _settings(log_every=3),
        _Engine(),
        7,
        [hooks.Hook(job_hook, every=2, also_at=(7,))],
        ends=(5,),
    )
    rows = _rows(tmp_path)
    train = {r["step"]: r for r in rows if "split" not in r}
    assert sorted(train) == [3, 5, 6]  # every 3, and at the listed end (not 7: ends replace the default)
    assert all(train[s]["loss"] == s and {"tokens_per_sec", "mfu"} <= set(train[s]) for s in train)
    dev = [(r["step"], r["score"]) for r in rows if r.get("split") == "dev"]
    assert dev == [(2, 0.2), (4, 0.4), (6, 0.6), (7, 0.7)]
    assert seen == [(s, s, float(s), 7) for s in (2, 4, 6, 7)]
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step")]
    assert [ln.split()[1] for ln in lines] == ["3/7", "5/7", "6/7"] and "grad_norm 1.0000" in lines[0]


def test_a_non_finite_loss_stops_at_its_log_step_after_the_row_and_the_line(tmp_path, capsys) -> None:
    later = []
    with pytest.raises(loop.DivergedError, match=r"diverged at step 4: loss is nan; .*no checkpoint"):
        _train(
            tmp_path,
            _settings(log_every=2),
            _Engine(nan_from=3),
            10,
            [hooks.Hook(lambda ctx: later.append(ctx.step))],
        )
    assert [r["step"] for r in _rows(tmp_path)] == [2, 4] and math.isnan(_rows(tmp_path)[-1]["loss"])
    assert capsys.readouterr().out.splitlines()[-1].startswith("step       4/10  loss nan")
    assert later == [1, 2, 3]  # the step found diverged reaches no later hook (an evaluation)


def test_an_error_ending_the_run_stays_the_one_reported_when_finishing_its_saves_fails(
    tmp_path, capsys, monkeypatch
) -> None:
    """A bucket outage met by the run is met again when the run closes its checkpoints (the
    async save of the same step): that second failure is a warning line, and the first
    error is what leaves the run (its exit code, 74, is the restart loop's signal). With no
    error ending the run, a failure to finish its saves is raised."""
    settings = _settings(log_every=1)
    outage = RuntimeError("gs://b/run/metrics.jsonl cannot be reached (writing; retried for 15 s)")

    def failing_close() -> None:
        raise ValueError("ABORTED: Error writing in OCDBT database: All 5 retry attempts failed")

    with (
        pytest.raises(RuntimeError) as raised,
        loop.TrainingRun(str(tmp_path), settings, total_steps=2) as run,
    ):
        run.logger = MetricsLogger(str(tmp_path), 2)
        monkeypatch.setattr(run.ckpt, "close", failing_close)
        raise outage
    assert raised.value is outage
    assert capsys.readouterr().out.splitlines() == [
        "warning: finishing the run's files also failed: "
        "ABORTED: Error writing in OCDBT database: All 5 retry attempts failed"
    ]
    with (
        pytest.raises(ValueError, match="ABORTED"),
        loop.TrainingRun(str(tmp_path), settings, total_steps=2) as run,
    ):
        monkeypatch.setattr(run.ckpt, "close", failing_close)


def test_a_bucket_gone_or_a_peer_lost_leaves_the_save_in_flight_without_waiting(
    tmp_path, monkeypatch
) -> None:
    """Past the bucket's retry bound (or with a peer process gone) the run ends at once: the
    pending async save is not waited for (orbax's hosts would wait minutes for each other;
    its step has no commit, so a restart resumes from the last committed one), and with the
    bucket gone the metrics are not flushed to it either."""
    settings = _settings(log_every=1)
    for error, logs_closed in (
        (files.BucketUnreachableError("gs://b/run cannot be reached"), False),
        (exit_codes.PeerLost("lost a peer process"), True),
    ):
        closed = []
        with pytest.raises(type(error)), loop.TrainingRun(str(tmp_path), settings, total_steps=2) as run:
            run.logger = MetricsLogger(str(tmp_path), 2)
            monkeypatch.setattr(run.ckpt, "close", lambda closed=closed: closed.append("checkpoints"))
            monkeypatch.setattr(run.logger, "close", lambda closed=closed: closed.append("logs"))
            raise error
        assert closed == (["logs"] if logs_closed else [])
