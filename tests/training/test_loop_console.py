"""The progress line a person reads: tokens/s and ETA over training time only."""

import json
import time
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np

from bert_jax.training.loop import Hook, TrainingRun
from bert_jax.training.metric_writer import MetricsLogger
from bert_jax.training.settings import CheckpointSettings, TrainingSettings


class _SteadyEngine:
    """A train step that takes 20 ms of host time and changes nothing."""

    mesh = None

    def train_step(self, state, batch):
        time.sleep(0.02)
        return state, {"loss": jnp.float32(1.0), "grad_norm": jnp.float32(1.0)}


def test_an_evaluation_does_not_count_as_training_time(tmp_path) -> None:
    settings = TrainingSettings(
        checkpoints=CheckpointSettings(every_steps=0, keep=1, async_save=False), log_every_steps=5
    )
    batch = {"input_ids": np.zeros((4, 32), np.int32)}
    batches = iter(lambda: batch, None)

    def slow_evaluation(step, state, metrics):
        if step == 10:
            time.sleep(1.0)  # as long as 50 training steps

    with TrainingRun(str(tmp_path), settings, total_steps=20) as run:
        state = SimpleNamespace(step=jnp.int32(0))
        run.logger = MetricsLogger(str(tmp_path), 20)
        hooks = [Hook(slow_evaluation)]
        run.steps(_SteadyEngine(), state, batches, end=20, flops=lambda b: 1.0, hooks=hooks)
    rows = [json.loads(ln) for ln in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rate = {r["step"]: r["tokens_per_sec"] for r in rows}
    # The window after the evaluation (steps 11-15) trains as fast as the others.
    assert rate[15] > 0.6 * rate[20] and rate[15] > 0.6 * rate[10], rate
