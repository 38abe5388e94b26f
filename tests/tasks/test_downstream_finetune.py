"""`bert-jax finetune` end to end on the downstream suite's files (in miniature, as own
copies) with a tiny random BERT and a few steps: Disfl-QA through the command line
(official SQuAD 2.0 scores on dev, and on test at dev's no-answer threshold) and the
dialogue pairs through the Python API (accuracy and F1 on dev and test)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import finetune
from bert_jax.tasks import scorers, squad
from configs import finetune as any_config
from tests.conftest import ROOT


def test_disfl_qa_from_the_command_line(tmp_path, downstream_root, tiny_checkpoint) -> None:
    run = tmp_path / "run"
    flags = {"init_checkpoint": tiny_checkpoint, "data.vocab_file": tokenization.default_vocab_file(),
             "data_dir": downstream_root, "max_train_examples": 48, "max_eval_examples": 40, "num_epochs": 1,
             "global_batch_size": 8, "learning_rate": 1e-3, "log_every_steps": 100}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "finetune", "--config=configs/finetune.py:disfl_qa",
         f"--workdir={run}", *(f"--config.{k}={v}" for k, v in flags.items())],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "skipped: a duplicated id" in proc.stdout  # the conversion's warnings, once each
    assert proc.stdout.count("task.json is an own copy, not the pinned one") == 1
    assert proc.stdout.count("skipped: an empty context or text") == 1
    best = json.loads((run / "results.json").read_text())["best"]
    assert "best dev: epoch 1, exact " in proc.stdout
    for key in ("best_f1", "HasAns_f1", "NoAns_f1", "test/best_f1", "test/HasAns_total", "test/NoAns_total"):
        assert key in best, key
    assert best["total"] == best["test/total"] == 40
    # The test split is answered at the threshold tuned on dev, and scored officially.
    assert best["test/best_f1_thresh"] == best["best_f1_thresh"]
    out = run / "eval" / "epoch1" / "test"
    answers = json.loads((out / "predictions_dev_threshold.json").read_text())
    test_file = downstream_root / "disfl_qa" / "test-v2.0.json"
    data = squad.restrict(squad.load_json(str(test_file))["data"], set(answers))
    assert scorers.squad_v2(data, answers)["f1"] == pytest.approx(best["test/best_f1"])
    assert best["test/best_f1"] == best["test/f1"]


def _dialog_pairs(checkpoint: str, root) -> Any:
    c = any_config.get_config("dialog_pairs")
    c.init_checkpoint, c.data.vocab_file, c.data_dir = (
        checkpoint,
        tokenization.default_vocab_file(),
        str(root),
    )
    return c


def test_dialog_pairs_through_the_python_api(tmp_path, downstream_root, tiny_checkpoint) -> None:
    c = _dialog_pairs(tiny_checkpoint, downstream_root)
    c.max_train_examples, c.max_eval_examples, c.num_epochs, c.global_batch_size = 128, 64, 1, 16
    best = run_settings.finetune(c, str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["eval_rows"] == {"dev": 64, "test": 64}
    assert results["train_rows"] == 128 and results["main_metric"] == "accuracy"
    for key in ("accuracy", "f1", "test/accuracy", "test/f1"):
        assert 0.0 <= best.metrics[key] <= 1.0, key


def test_the_test_split_is_scored_only_for_an_epoch_that_is_the_best_so_far(
    tmp_path, downstream_root, tiny_checkpoint, monkeypatch
) -> None:
    c = _dialog_pairs(tiny_checkpoint, downstream_root)
    c.max_train_examples, c.max_eval_examples, c.num_epochs, c.global_batch_size = 64, 48, 4, 16
    c.learning_rate, c.random_init_baseline = 3e-3, False
    scored = []
    predict = finetune.Finetuning.predict
    monkeypatch.setattr(
        finetune.Finetuning,
        "predict",
        lambda self, p, split, b, *shown: scored.append(split.name) or predict(self, p, split, b, *shown),
    )
    best = run_settings.finetune(c, str(tmp_path))
    epochs = json.loads((tmp_path / "results.json").read_text())["epochs"]
    assert scored.count("dev") == len(epochs) == 4
    running, want = None, []
    for e in epochs:  # ties go to the later epoch, as the best epoch's choice does
        if running is None or e["accuracy"] >= running:
            running = e["accuracy"]
            want.append(e["epoch"])
    assert [e["epoch"] for e in epochs if "test/accuracy" in e] == want
    assert scored.count("test") == len(want) and "test/accuracy" in best.metrics
