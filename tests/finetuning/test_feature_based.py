"""The feature-based BiLSTM (Table 7) trains through the loop every job runs: stopped
mid-epoch (``stop_after_step``) and run again, it resumes from its checkpoint to the same
per-step losses and dev scores as an uninterrupted run; its checkpoints go once
``results.json`` is written."""

import json
from pathlib import Path

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import feature_based
from bert_jax.finetuning.feature_based import FeatureBiLSTMSettings
from bert_jax.training import run_config
from bert_jax.training.results import JobResult
from configs import bbc as bbc_config

# BBC News topics on the tiny BERT's last layer: 3 steps of 8 rows an epoch, 2 epochs.
TINY_RUN = {
    "max_train_examples": 24, "max_eval_examples": 8, "max_seq_length": 32, "eval_batch_size": 8,
    "log_every_steps": 1, "checkpoint_every_steps": 0, "async_checkpointing": False,
}  # fmt: skip
BILSTM = FeatureBiLSTMSettings(
    lstm_size=8, lstm_layers=1, learning_rate=1e-2, num_epochs=2, global_batch_size=8
)


def _train(checkpoint: str, workdir: Path, **changes) -> JobResult:
    c = bbc_config.get_config()
    c.init_checkpoint, c.data.vocab_file = checkpoint, tokenization.default_vocab_file()
    run = run_settings.finetune_settings(run_config.set_keys(c, {**TINY_RUN, **changes}))
    return feature_based.train(run, BILSTM, "-1", "concat", str(workdir))


def _losses(workdir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r and "split" not in r}


def test_a_stopped_feature_run_resumes_to_the_uninterrupted_losses(tmp_path, tiny_checkpoint) -> None:
    full = tmp_path / "full"
    done = _train(tiny_checkpoint, full)
    assert done.step == 6 and not done.stopped
    parts = tmp_path / "parts"
    assert _train(tiny_checkpoint, parts, stop_after_step=4) == JobResult.stopped_at(4)
    assert (parts / "checkpoints" / "4").is_dir() and not (parts / "results.json").exists()
    resumed = _train(tiny_checkpoint, parts)
    assert resumed.step == 6 and resumed.metrics == done.metrics
    a, b = _losses(full), _losses(parts)
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    assert all(a[step] == b[step] for step in a), (a, b)  # bit-identical, step by step
    ours, theirs = (json.loads((w / "results.json").read_text()) for w in (full, parts))
    assert [e["accuracy"] for e in ours["epochs"]] == [e["accuracy"] for e in theirs["epochs"]]
    assert ours["best"] == theirs["best"] and ours["approach"] == "features" and ours["train_rows"] == 24
    assert not (full / "checkpoints").exists() and not (parts / "checkpoints").exists()
