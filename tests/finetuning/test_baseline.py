"""`random_init_baseline`: the same fine-tuning from fresh weights, printed beside the run."""

import json
import types

import pytest

from bert_jax.ablations import cells
from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import baseline
from bert_jax.tasks.registry import get_task
from bert_jax.training import run_config
from bert_jax.training.results import JobResult
from configs import ablations as ablations_config
from configs import finetune as any_config
from configs import glue as glue_config
from tests.helpers.task_data import write_sst2


def test_the_baseline_runs_beside_the_run_and_is_read_back(tmp_path, tiny_checkpoint, capsys) -> None:
    data = write_sst2(tmp_path / "glue")
    overrides = {
        "init_checkpoint": tiny_checkpoint, "data.vocab_file": tokenization.default_vocab_file(),
        "data_dir": str(data), "max_seq_length": 32, "global_batch_size": 8, "learning_rate": 2e-3,
        "num_epochs": 1, "max_train_examples": 32, "max_eval_examples": 16, "log_every_steps": 100,
        "random_init_baseline": True,
    }  # fmt: skip
    c = run_config.set_keys(glue_config.get_config("sst2"), overrides)
    result = run_settings.finetune(c, str(tmp_path / "run"))
    out = capsys.readouterr().out
    table = json.loads((tmp_path / "run" / "baseline.json").read_text())
    saved = json.loads((tmp_path / "run" / "random_init" / "results.json").read_text())
    assert saved["random_init"] is True and saved["checkpoint"] == tiny_checkpoint
    assert table["metrics"]["accuracy"] == {
        "pre_trained": result.metrics["accuracy"],
        "random_init": saved["best"]["accuracy"],
    }
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("sst2: best epoch on dev"))
    assert lines[head + 1].startswith("pre-trained") and lines[head + 2].startswith("random init")
    assert f"{result.metrics['accuracy']:.4f}" in lines[head + 1]
    assert not (tmp_path / "run" / "random_init" / "best_model").exists()
    # A finished baseline of the same run is read back, not fine-tuned again.
    settings = run_settings.finetune_settings(c)
    inputs = types.SimpleNamespace(checkpoint=tiny_checkpoint, task=get_task("sst2"))
    again = baseline.run(
        settings, str(tmp_path / "run"), result, inputs, lambda *a: pytest.fail("the baseline was re-run")
    )
    assert again == table
    # A baseline of another checkpoint is not taken for this one's.
    calls = []
    other = types.SimpleNamespace(checkpoint=str(tmp_path / "other"), task=get_task("sst2"))
    baseline.run(
        settings, str(tmp_path / "run"), result, other, lambda *a: calls.append(a) or JobResult.stopped_at(0)
    )
    assert len(calls) == 1


def test_the_suite_prints_a_baseline_and_the_ablation_tables_do_not() -> None:
    assert all(any_config.get_config(t).random_init_baseline for t in ("cpkc", "disfl_qa", "rotten_tomatoes"))
    assert not any_config.get_config("sst2").random_init_baseline
    table = run_settings.ablation_table(ablations_config.get_config("table5.tiny+cpkc"))
    assert cells.cell_plan(table, "bert_base", "cpkc")["config"].random_init_baseline is False


def test_headline_keys_put_em_beside_f1_on_each_split() -> None:
    metrics = {"exact_match": 50.0, "f1": 60.0, "test/exact_match": 40.0, "test/f1": 55.0, "total": 10}
    assert baseline.headline_keys("f1", metrics) == ["exact_match", "f1", "test/exact_match", "test/f1"]
    v2 = {"best_exact": 1.0, "best_f1": 2.0, "exact": 0.5, "f1": 0.7, "test/best_f1": 3.0}
    assert baseline.headline_keys("best_f1", v2) == ["exact", "best_exact", "f1", "best_f1", "test/best_f1"]
