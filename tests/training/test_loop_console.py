"""The progress line a person reads: tokens/s, MFU and ETA over training time only.

The loop runs on a fake clock that the steps and the evaluation advance, so every rate and
ETA is exact, whatever else the machine is doing.
"""

import json
import re
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.training import hooks, loop
from bert_jax.training.metric_writer import MetricsLogger
from bert_jax.training.settings import CheckpointSettings, TrainingSettings

STEP_S, COMPILE_S, EVALUATION_S = 2.0, 500.0, 1000.0  # fake seconds
TOKENS = 4 * 32  # positions of each batch's input_ids
FLOPS = 1e9  # per batch


class _FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _SteadyEngine:
    """A train step that takes STEP_S on `clock` (its first, compiling, COMPILE_S more)."""

    mesh = None

    def __init__(self, clock: _FakeClock) -> None:
        self.clock, self.calls = clock, 0

    def train_step(self, state, batch):
        self.calls += 1
        self.clock.now += STEP_S + (COMPILE_S if self.calls == 1 else 0.0)
        return state, {"loss": jnp.float32(1.0), "grad_norm": jnp.float32(1.0)}


def test_compilation_and_an_evaluation_do_not_count_as_training_time(tmp_path, capsys) -> None:
    settings = TrainingSettings(
        checkpoints=CheckpointSettings(
            checkpoint_every_steps=0, keep_checkpoints=1, async_checkpointing=False
        ),
        log_every_steps=5,
    )
    batch = {"input_ids": np.zeros((4, 32), np.int32)}
    clock = _FakeClock()

    def slow_evaluation(ctx):
        if ctx.step == 10:
            clock.now += EVALUATION_S

    with loop.TrainingRun(str(tmp_path), settings, total_steps=20, clock=clock) as run:
        run.logger = MetricsLogger(str(tmp_path), 20)
        state = SimpleNamespace(step=jnp.int32(0))
        run.steps(
            _SteadyEngine(clock),
            state,
            iter(lambda: batch, None),
            end=20,
            flops=lambda b: FLOPS,
            hooks=[*hooks.default_hooks(settings, total_steps=20), hooks.Hook(slow_evaluation)],
        )
    rows = {r["step"]: r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())}
    assert sorted(rows) == [5, 10, 15, 20]
    # Every window trains at one step per STEP_S: the first (steps 2-5) without step 1's
    # compilation, the one after the evaluation (11-15) without the evaluation.
    peak = loop.device_peak_flops() * jax.device_count()
    for step, row in rows.items():
        assert row["tokens_per_sec"] == TOKENS / STEP_S, (step, row)
        assert row["mfu"] == FLOPS / STEP_S / peak, (step, row)
    # The ETA: the steps left at STEP_S each.
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("step")]
    progress = [re.search(r"step +(\d+)/20 .* tok/s (\S+) .* eta (\S+)$", ln).groups() for ln in lines]
    assert progress == [
        ("5", "64", "0:00:30"),
        ("10", "64", "0:00:20"),
        ("15", "64", "0:00:10"),
        ("20", "64", "0:00:00"),
    ]
