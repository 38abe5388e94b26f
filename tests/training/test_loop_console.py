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

from bert_jax.training import hooks, loop, throughput
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
    """A train step that takes STEP_S on `clock`, and COMPILE_S more at the first batch of
    each shape (as a jitted step compiles, in the call)."""

    mesh = None

    def __init__(self, clock: _FakeClock) -> None:
        self.clock, self.shapes = clock, set()

    def train_step(self, state, batch):
        shape = batch["input_ids"].shape
        self.clock.now += STEP_S + (COMPILE_S if shape not in self.shapes else 0.0)
        self.shapes.add(shape)
        return state, {"loss": jnp.float32(1.0), "grad_norm": jnp.float32(1.0)}


def _settings(log_every: int) -> TrainingSettings:
    return TrainingSettings(
        checkpoints=CheckpointSettings(
            checkpoint_every_steps=0, keep_checkpoints=1, async_checkpointing=False
        ),
        log_every_steps=log_every,
    )


def _rows(workdir) -> dict[int, dict]:
    return {r["step"]: r for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines())}


def _progress(out: str) -> list[tuple[str, ...]]:
    """(step, tok/s or None, eta) of each progress line."""
    found = [re.search(r"^step +(\d+)/\d+ .*?(?:tok/s (\S+) .*)?eta (\S+)$", ln) for ln in out.splitlines()]
    return [m.groups() for m in found if m]


def test_compilation_and_an_evaluation_do_not_count_as_training_time(tmp_path, capsys) -> None:
    settings = _settings(5)
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
    rows = _rows(tmp_path)
    assert sorted(rows) == [5, 10, 15, 20]
    # Every window trains at one step per STEP_S: the first (steps 2-5) without step 1's
    # compilation, the one after the evaluation (11-15) without the evaluation.
    peak = throughput.device_peak_flops() * jax.device_count()
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


def test_a_new_batch_shape_compiles_outside_training_time_and_says_so(tmp_path, capsys) -> None:
    """Fine-tuning's length buckets: the first batch of each shape compiles its program
    (COMPILE_S here) in the middle of the run; neither it nor the run's first step counts
    as training time, a line is read before any step is timed (no rate, no ETA yet), and
    the job's words for the shape are printed around each compile."""
    settings = _settings(1)
    short, long = np.zeros((4, 32), np.int32), np.zeros((4, 64), np.int32)
    lengths = [short, short, short, long, long, short, long, long]
    clock = _FakeClock()
    with loop.TrainingRun(str(tmp_path), settings, total_steps=8, clock=clock) as run:
        run.logger = MetricsLogger(str(tmp_path), 8)
        run.steps(
            _SteadyEngine(clock),
            SimpleNamespace(step=jnp.int32(0)),
            iter({"input_ids": x} for x in lengths),
            end=8,
            flops=lambda b: FLOPS,
            hooks=hooks.default_hooks(settings, total_steps=8),
            announce=lambda b: f"{b['input_ids'].shape[1]} tokens",
        )
    rows = _rows(tmp_path)
    assert sorted(rows) == list(range(1, 9))
    compiling = {1, 4}
    for step, row in rows.items():
        if step in compiling:  # a window of the compiling step alone: nothing timed
            assert "tokens_per_sec" not in row, (step, row)
        else:
            assert row["tokens_per_sec"] == lengths[step - 1].size / STEP_S, (step, row)
    out = capsys.readouterr().out
    # Step 1: no rate and no ETA yet; step 4's compile leaves the rate of the steps before.
    assert _progress(out) == [
        ("1", None, "?"),
        ("2", "64", "0:00:12"),
        ("3", "64", "0:00:10"),
        ("4", None, "0:00:08"),
        ("5", "128", "0:00:06"),
        ("6", "64", "0:00:04"),
        ("7", "128", "0:00:02"),
        ("8", "128", "0:00:00"),
    ]
    said = [ln for ln in out.splitlines() if "compil" in ln]
    assert said == [
        "compiling the train step for 32 tokens ...",
        f"  compiled and ran step 1 in {COMPILE_S + STEP_S:.1f} s",
        "compiling the train step for 64 tokens ...",
        f"  compiled and ran step 4 in {COMPILE_S + STEP_S:.1f} s",
    ]


class _Queued:
    """A step's value that the device computes later (JAX dispatches asynchronously): the
    steps queued before it take their time on the clock when something waits for it."""

    def __init__(self, engine: "_QueueingEngine") -> None:
        self.engine = engine

    def block_until_ready(self):
        self.engine.settle()
        return self

    def __array__(self, dtype=None, copy=None):
        self.engine.settle()
        return np.asarray(1.0, dtype or np.float32)

    def __float__(self) -> float:
        self.engine.settle()
        return 1.0


class _QueueingEngine:
    """A train step that returns at once and queues STEP_S of device time (a compile's
    COMPILE_S at a new shape), spent on the clock when a value is waited for."""

    mesh = None

    def __init__(self, clock: _FakeClock) -> None:
        self.clock, self.shapes, self.queued = clock, set(), 0.0

    def settle(self) -> None:
        self.clock.now += self.queued
        self.queued = 0.0

    def train_step(self, state, batch):
        shape = batch["input_ids"].shape
        if shape not in self.shapes:  # compiling happens in the call, on the host
            self.clock.now += COMPILE_S
            self.shapes.add(shape)
        self.queued += STEP_S
        value = _Queued(self)
        return state, {"loss": value, "grad_norm": value}


def test_steps_still_queued_when_an_evaluation_waits_for_them_count_as_training(tmp_path) -> None:
    """An epoch's evaluation at step 8 (not a logging step) reads the state, so it waits for
    the steps queued before it: their time is training time, not the evaluation's (a
    fine-tuning run read 19,114 tokens/s and an MFU of 1125% where it trained at ~900). A
    hook that only keeps the step's arrays (the epoch's losses) does not wait for them."""
    settings = _settings(5)
    batch = {"input_ids": np.zeros((4, 32), np.int32)}
    clock = _FakeClock()
    engine = _QueueingEngine(clock)
    kept, queued_at_record = [], []

    def evaluation(ctx):
        if ctx.step == 8:
            jax.block_until_ready(ctx.metrics)  # the state's values
            clock.now += EVALUATION_S

    def record(ctx):
        kept.append(ctx.metrics["loss"])
        queued_at_record.append(engine.queued)

    with loop.TrainingRun(str(tmp_path), settings, total_steps=10, clock=clock) as run:
        run.logger = MetricsLogger(str(tmp_path), 10)
        run.steps(
            engine,
            SimpleNamespace(step=jnp.int32(0)),
            iter(lambda: batch, None),
            end=10,
            flops=lambda b: FLOPS,
            hooks=[
                *hooks.default_hooks(settings, total_steps=10),
                hooks.Hook(record, reads_values=False),
                hooks.Hook(evaluation, every=4),
            ],
        )
    rows = _rows(tmp_path)
    assert sorted(rows) == [5, 10]
    assert rows[10]["tokens_per_sec"] == TOKENS / STEP_S  # steps 6-10, the evaluation left out
    assert rows[5]["tokens_per_sec"] == TOKENS / STEP_S
    assert len(kept) == 10 and max(queued_at_record) > STEP_S  # steps queued past `record`
