"""The end-of-run summary names the workdir as the user gave it: a relative workdir gives
relative paths (as the README shows them), though the run itself works with absolute ones."""

from bert_jax.commands import run_settings
from bert_jax.pretraining import evaluation
from tests.conftest import tiny_pretraining


def test_a_relative_workdir_is_shown_relative(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    config = tiny_pretraining(num_train_steps=2, eval_every_steps=2, checkpoint_every_steps=2)
    config.async_checkpointing = False
    run_settings.pretrain(config, "runs/rel/")
    lines = capsys.readouterr().out.splitlines()
    assert lines[-3:] == [
        "checkpoints: runs/rel/checkpoints (best: runs/rel/best)",
        "TensorBoard: tensorboard --logdir runs/rel/tensorboard",
        "metrics: runs/rel/metrics.jsonl",
    ]
    assert (tmp_path / "runs" / "rel" / "metrics.jsonl").exists()
    evaluation.report_without_held_out("runs/rel", 2)
    assert capsys.readouterr().out.splitlines()[1:] == [
        "checkpoints: runs/rel/checkpoints",
        "TensorBoard: tensorboard --logdir runs/rel/tensorboard",
        "metrics: runs/rel/metrics.jsonl",
    ]
