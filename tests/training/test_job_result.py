"""What both training jobs return (`training/results.py`): a `JobResult` whose step is the
stop's when ``stop_after_step`` ends the run, and whose metrics are those the finished run
wrote (pre-training: the final held-out figures; fine-tuning: ``results.json``'s best)."""

from __future__ import annotations

import json

import pytest

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import sweep
from bert_jax.training import run_config
from bert_jax.training.results import JobResult
from configs import glue as glue_config
from tests.conftest import tiny_pretraining
from tests.helpers.task_data import write_sst2


def test_pretraining_returns_the_stop_then_the_final_metrics(tmp_path) -> None:
    config = dict(num_train_steps=4, eval_every_steps=4, checkpoint_every_steps=2)
    stopped = run_settings.pretrain(tiny_pretraining(**config, stop_after_step=2), str(tmp_path))
    assert stopped == JobResult(step=2, metrics={}, stopped=True, held_out=True)
    final = run_settings.pretrain(tiny_pretraining(**config), str(tmp_path))  # resumes
    assert isinstance(final, JobResult) and final.step == 4 and not final.stopped and final.held_out
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if r.get("split") == "eval" and r["step"] == 4][-1]
    for key in ("mlm_accuracy", "mlm_loss"):
        assert final.metrics[key] == pytest.approx(logged[key]), key


def test_finetuning_returns_the_stop_then_the_best_epoch(tmp_path, tiny_checkpoint) -> None:
    data = write_sst2(tmp_path / "glue")
    overrides = {"init_checkpoint": tiny_checkpoint, "data.vocab_file": tokenization.default_vocab_file(),
                 "data_dir": str(data), "max_seq_length": 32, "global_batch_size": 8, "num_epochs": 1,
                 "max_train_examples": 32, "max_eval_examples": 16, "checkpoint_every_steps": 2,
                 "pack_examples": False, "length_buckets": ()}  # fmt: skip
    config = run_config.set_keys(glue_config.get_config("sst2"), overrides)
    stopping = run_config.set_keys(glue_config.get_config("sst2"), {**overrides, "stop_after_step": 2})
    assert run_settings.finetune(stopping, str(tmp_path / "run")) == JobResult.stopped_at(2)
    assert not (tmp_path / "run" / "results.json").exists()
    best = run_settings.finetune(config, str(tmp_path / "run"))  # resumes
    assert isinstance(best, JobResult) and best.step == 4 and not best.stopped  # 32 rows / 8, one epoch
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert best.metrics == results["best"] and best.metrics["epoch"] == 1
    assert 0.0 <= best.metrics["accuracy"] <= 1.0

    # A sweep whose run stops says so and returns no best run (a rerun continues it).
    grid = {"sweep.global_batch_sizes": (8,), "sweep.learning_rates": (1e-4,), "sweep.epochs": (1,),
            "sweep.seeds": (0,)}  # fmt: skip
    swept = run_config.set_keys(glue_config.get_config("sst2"), {**overrides, **grid, "stop_after_step": 2})
    assert sweep.sweep(run_settings.finetune_settings(swept), str(tmp_path / "sweep")) is None
    assert not (tmp_path / "sweep" / "sweep_best.json").exists()
