"""`bert-jax finetune --config=configs/glue.py:sst2 --workdir=DIR [--config.k=v] [--sweep]`.

Configs: configs/{glue,squad,ner,swag,bbc,classify,tag}.py (or configs/finetune.py:TASK for any
task; classify and tag: your own labelled files and CoNLL files, --config.data_dir=DIR).
A finished run in DIR is read back, not trained again; one of another config is refused
unless --overwrite, which trains anew in its place.
With --sweep, runs the grid of `config.sweep` (batch sizes x learning rates x epochs x
seeds) into DIR/bs<B>_lr<LR>_ep<E>_seed<S>/ and writes DIR/sweep_table.md.
With --evaluate, trains nothing: scores the head of `config.init_checkpoint` (a run's
best_model/, or a transformers folder of the task's class, e.g. BertForSequenceClassification
for GLUE) on the task's evaluation splits, its classes matched to the task's by name, and
writes DIR/evaluation.json and the prediction files under DIR/eval/.
"""

from __future__ import annotations

import os

from absl import flags, logging
from ml_collections import config_flags

from bert_jax.commands import run_settings
from bert_jax.finetuning import sweep
from bert_jax.storage import files

FLAGS = flags.FLAGS


def define_flags() -> None:
    config_flags.DEFINE_config_file(
        "config", None, "Fine-tuning config, e.g. configs/glue.py:sst2 or configs/bbc.py.", lock_config=True
    )
    flags.DEFINE_string("workdir", None, "Metrics, predictions and results.json go here.")
    flags.DEFINE_bool("sweep", False, "Run the config's hyper-parameter grid (several seeds per point).")
    flags.DEFINE_bool(
        "overwrite",
        False,
        "Train anew over a run in --workdir (its results, model, predictions and logs are replaced); "
        "without it a finished run is read back, and one of another config refused.",
    )
    flags.DEFINE_bool(
        "evaluate",
        False,
        "Train nothing: score config.init_checkpoint's own head (a best_model/, or a transformers "
        "folder of the task's class) on the task's evaluation splits.",
    )
    flags.mark_flags_as_required(["config", "workdir"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise SystemExit(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)

    if "://" in FLAGS.workdir:
        raise ValueError(
            f"--workdir {FLAGS.workdir}: fine-tuning writes to a local folder (its predictions and "
            "scorers use local files); fine-tune into a local --workdir and copy it to the bucket"
        )
    workdir = os.path.abspath(FLAGS.workdir)
    files.check_reachable(workdir, "--workdir", writable=True)
    if FLAGS.evaluate:
        if FLAGS.sweep:
            raise ValueError("--evaluate scores one checkpoint: drop --sweep")
        run_settings.evaluate(FLAGS.config, workdir, overwrite=FLAGS.overwrite)
        return
    if FLAGS.sweep:
        if FLAGS.overwrite:
            raise ValueError(
                "--overwrite applies to one run, not to --sweep (a sweep reuses its finished runs): "
                "give the sweep another --workdir"
            )
        best = sweep.sweep(run_settings.finetune_settings(FLAGS.config), workdir)
        if best is None:  # a run stopped early and said where
            return
        print(f"best run: {best['dir']}  dev {best['metric']} {best['score']:.4f}")
        return
    best = run_settings.finetune(FLAGS.config, workdir, overwrite=FLAGS.overwrite)
    if best.stopped:
        print(f"stopped at step {best.step}; rerun the same command to continue ({workdir})")
        return
    print(
        "best dev: "
        + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in best.metrics.items())
    )
    outputs = [("results", "results.json"), ("epochs", "epochs.json"), ("metrics", "metrics.jsonl")]
    outputs += [("best model", "best_model"), ("test predictions", "test")]
    for name, path in outputs:
        if os.path.exists(os.path.join(workdir, path)):
            print(f"{name}: {os.path.join(workdir, path)}")
    print(f"TensorBoard: tensorboard --logdir {os.path.join(workdir, 'tensorboard')}")
