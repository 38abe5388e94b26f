"""Fine-tuning on the shared engine: exact gradient accumulation, bf16 compute, length
buckets that change no logit, and resume after SIGTERM / SIGKILL with the losses of an
uninterrupted run."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import batches, finetune
from bert_jax.tasks.ner import IGNORE
from bert_jax.tasks.registry import get_task
from bert_jax.training import engine, loop, resolver, run_config, sharding
from bert_jax.training.settings import TrainingSettings
from configs import glue as glue_config
from tests.conftest import ROOT
from tests.helpers import processes
from tests.helpers.task_data import TINY, write_sst2, write_tiny_checkpoint


def _token_batch(rows: int = 8, seq: int = 16, seed: int = 0, longest: int = 0) -> dict[str, np.ndarray]:
    """Rows of different lengths whose labelled-token counts differ, so that a mean over
    each micro-batch would weight tokens unequally."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, (longest or seq) + 1, rows)
    mask = (np.arange(seq)[None] < lengths[:, None]).astype(np.int32)
    labels = rng.integers(0, 9, (rows, seq)).astype(np.int32)
    labels[(rng.random((rows, seq)) < 0.5) | (mask == 0)] = IGNORE
    return {
        "input_ids": (rng.integers(1000, 5000, (rows, seq)) * mask).astype(np.int32),
        "input_mask": mask,
        "segment_ids": np.zeros((rows, seq), np.int32),
        "labels": labels,
    }


def _ner_step(accum: int, compute_dtype: str = "float32") -> tuple[dict, dict]:
    task = get_task("conll2003")
    c = glue_config.get_config("sst2")
    c.grad_accum_steps, c.compute_dtype = accum, compute_dtype
    c.warmup_proportion = 0.0  # a full learning rate from the first step
    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    bert = TINY.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    settings = resolver.resolve(TrainingSettings, c, partial=True)
    model = task.model(bert).clone(numerics=settings.numerics.for_platform(engine.platform(mesh)))
    batch = _token_batch()
    sample = [batch[k][:1] for k in ("input_ids", "input_mask", "segment_ids")]
    tx, schedule = settings.optimization.build(10)
    eng = engine.Engine(
        objective=finetune.FinetuningObjective(model, task),
        init_params=lambda rng: model.init(rng, *sample)["params"],
        tx=tx,
        schedule=schedule,
        mesh=mesh,
        rules=sharding.LOGICAL_AXIS_RULES,
        grad_accum_steps=accum,
    )
    state, metrics = eng.train_step(eng.init_state(0), eng.place(batch, process_local=False))
    return jax.device_get(state.params), jax.device_get(metrics)


def test_gradient_accumulation_is_exact_for_a_token_weighted_loss() -> None:
    params_1, metrics_1 = _ner_step(1)
    params_4, metrics_4 = _ner_step(4)
    assert metrics_4["loss"] == pytest.approx(metrics_1["loss"], rel=1e-6)
    assert metrics_4["grad_norm"] == pytest.approx(metrics_1["grad_norm"], rel=1e-5)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.max(np.abs(a - b))), params_1, params_4))
    assert max(diffs) < 1e-6
    # bf16 matmuls, float32 parameters: the same step within bf16's precision.
    params_bf16, metrics_bf16 = _ner_step(1, "bfloat16")
    assert metrics_bf16["loss"] == pytest.approx(metrics_1["loss"], rel=2e-2)
    assert {x.dtype for x in jax.tree.leaves(params_bf16)} == {np.dtype("float32")}


def test_length_buckets_change_no_logit() -> None:
    batch = _token_batch(seq=64, longest=30)
    longest = int(batch["input_mask"].sum(-1).max())
    length = batches.bucket_length(batch["input_mask"], (16, 32, 64, 128), 64)
    assert length == min(b for b in (16, 32, 64) if b >= longest) and length < 64
    assert batches.bucket_length(batch["input_mask"], (), 64) == 64
    cut = batches.cut_to_length(batch, length)
    assert cut["input_ids"].shape == (8, length) and cut["labels"].shape == (8, length)
    for name in ("conll2003", "sst2"):
        model = get_task(name).model(TINY)
        inputs = [batch[k] for k in ("input_ids", "input_mask", "segment_ids")]
        params = model.init(jax.random.key(0), *inputs)["params"]
        full = np.asarray(model.apply({"params": params}, *inputs))
        short = np.asarray(
            model.apply({"params": params}, *[cut[k] for k in ("input_ids", "input_mask", "segment_ids")])
        )
        if name == "conll2003":  # per token: the kept positions
            full = full[:, :length]
        np.testing.assert_allclose(short, full, rtol=1e-5, atol=1e-5)


def _losses(metrics_file: Path) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for line in metrics_file.read_text().splitlines():
        row = json.loads(line)
        if "loss" in row and "split" not in row:
            out.setdefault(row["step"], []).append(row["loss"])
    return out


def _steps(ckpts: Path) -> list[int]:
    """Steps of the checkpoints in `ckpts`, complete or being written (``20.orbax-...-tmp``)."""
    names = [p.name for p in ckpts.glob("*")] if ckpts.is_dir() else []
    return [int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit()]


def _interrupt(run, workdir: Path) -> int:
    """SIGTERM mid-epoch 1 (stopped while its checkpoints are at 5..15, so it saves before
    step 25), then SIGKILL once the resumed run has a checkpoint past the epoch boundary (30);
    returns the step the SIGTERM saved. Each moment is caught with the process stopped, so
    load cannot move it; a moment passed before the process was caught (a very slow poller)
    starts the sequence again rather than failing."""
    ckpts = workdir / "checkpoints"
    for _ in range(3):
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            proc = run()
            processes.stop_when(lambda: any(s >= 5 for s in _steps(ckpts)), proc,
                                missed=lambda: any(s >= 20 for s in _steps(ckpts)))  # fmt: skip
            proc.send_signal(signal.SIGTERM)
            proc.send_signal(signal.SIGCONT)
            out = proc.communicate(timeout=processes.HANG_S)[0]
            assert proc.returncode == loop.PREEMPTED_EXIT_CODE, out
            saved = int(out.split("preempted: saved step ")[1].split()[0])
            proc = run()
            past_epoch = lambda: any(s >= 30 and (ckpts / str(s)).is_dir() for s in _steps(ckpts))
            processes.stop_when(past_epoch, proc, missed=lambda: False)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return saved
        except processes.Missed:
            continue
    raise AssertionError("the process ran past each moment 3 times: is the test machine starved?")


def test_sigterm_saves_and_sigkill_resumes_with_the_losses_of_an_uninterrupted_run(tmp_path) -> None:
    checkpoint = write_tiny_checkpoint(tmp_path / "tiny_bert")
    data = write_sst2(tmp_path / "glue")
    overrides = {"init_checkpoint": checkpoint, "data.vocab_file": tokenization.default_vocab_file(),
                 "data_dir": str(data), "max_seq_length": 48, "global_batch_size": 4, "learning_rate": 2e-3,
                 "num_epochs": 2, "max_train_examples": 100, "log_every_steps": 1,
                 "checkpoint_every_steps": 5,
                 # One compiled shape per process (packing and buckets are tested apart).
                 "pack_examples": False, "length_buckets": ()}  # fmt: skip
    c = run_config.set_keys(glue_config.get_config("sst2"), overrides)
    best = run_settings.finetune(c, str(tmp_path / "whole"))
    assert best.step == 50 and not best.stopped
    want = _losses(tmp_path / "whole" / "metrics.jsonl")
    assert sorted(want) == list(range(1, 51))  # 100 rows / 4 = 25 steps x 2 epochs
    assert not (tmp_path / "whole" / "checkpoints").exists()  # removed once the run is complete

    workdir = tmp_path / "parts"
    args = [sys.executable, "-m", "bert_jax", "finetune", "--config=configs/glue.py:sst2",
            f"--workdir={workdir}", *(f"--config.{k}={v}" for k, v in overrides.items())]  # fmt: skip

    def run() -> subprocess.Popen:
        return subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    # 1. SIGTERM mid-epoch: a checkpoint at the step it stopped, exit 143.
    # 2. SIGKILL after the resumed run passed the epoch boundary.
    assert _interrupt(run, workdir) < 25  # mid-epoch
    # 3. The rerun completes; every logged step's loss is the uninterrupted run's.
    proc = run()
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0 and f"resumed from {workdir}/checkpoints/" in out, out
    assert f"results: {workdir}/results.json" in out and f"metrics: {workdir}/metrics.jsonl" in out, out
    got = _losses(workdir / "metrics.jsonl")
    assert sorted(got) == sorted(want)
    for step, losses in got.items():
        assert losses == pytest.approx([want[step][0]] * len(losses), rel=1e-6), step
    results = json.loads((workdir / "results.json").read_text())
    assert results["best"]["accuracy"] == pytest.approx(best.metrics["accuracy"])
    assert [e["epoch"] for e in results["epochs"]] == [1, 2]
