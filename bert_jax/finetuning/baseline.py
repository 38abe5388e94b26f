"""The random-init baseline beside a fine-tuning run (``random_init_baseline=True``).

A pre-trained encoder's scores mean little alone on a small task: the same model shape,
fine-tuned the same way from freshly initialised weights, is what pre-training has to
beat (the ablation tables' ``random_init`` row). With ``random_init_baseline`` the run is
followed by that baseline, fine-tuned into ``<workdir>/random_init/`` (same task, data,
hyper-parameters and seed; `finetune.FinetuneSettings.random_init`), and both are
printed side by side with the official scorers' figures (SQuAD's EM/F1, accuracy, ...)
on every scored split; ``<workdir>/baseline.json`` keeps the table. A finished baseline
of the same checkpoint, seed, learning rate and epochs is read back, not re-run.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from typing import Any

from bert_jax.finetuning.outputs import write_json
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.training.results import JobResult

FOLDER = "random_init"
# Figures shown beside the task's main metric where a task reports them.
# (SQuAD v1.1's script says exact_match, v2.0's exact.)
_ALSO = ("exact_match", "exact", "best_exact", "f1", "accuracy")


def headline_keys(main_metric: str, metrics: dict[str, Any]) -> list[str]:
    """The figures of a result worth a column: SQuAD's EM beside its F1, the task's main
    metric, on dev and (``test/``) on test where scored."""
    names = [k for k in _ALSO if k in metrics and k != main_metric] + [main_metric]
    keys = [k for k in names if k in metrics]
    return keys + [f"test/{k}" for k in names if f"test/{k}" in metrics]


def _same_run(results: dict[str, Any], settings: FinetuneSettings, checkpoint: str) -> bool:
    return (
        results.get("random_init") is True
        and results.get("checkpoint") == checkpoint
        and results.get("seed") == settings.seed
        and results.get("learning_rate") == settings.learning_rate
        and results.get("num_epochs") == settings.num_epochs
    )


def run(
    settings: FinetuneSettings,
    workdir: str,
    trained: JobResult,
    inputs: Any,
    finetune: Callable[[FinetuneSettings, str], JobResult],
) -> dict[str, Any]:
    """Fine-tunes (or reads back) the random-init baseline of `settings` and prints it
    beside `trained` (the pre-trained run's result; `inputs` its `finetune.FinetuningInputs`:
    the checkpoint as resolved, the task); returns the table written to ``baseline.json``."""
    folder = os.path.join(workdir, FOLDER)
    done = os.path.join(folder, "results.json")
    baseline = dataclasses.replace(
        settings,
        random_init=True,
        random_init_baseline=False,
        keep_head=False,
        save_best_model=False,
        predict_test=False,
    )
    previous = None
    if os.path.exists(done):
        with open(done, encoding="utf-8") as f:
            previous = json.load(f)
    if previous is not None and _same_run(previous, baseline, inputs.checkpoint):
        print(f"random-init baseline: read back from {folder}", flush=True)
        metrics = dict(previous["best"])
    else:
        print(f"random-init baseline: the same model from fresh weights, into {folder}", flush=True)
        result = finetune(baseline, folder)
        if result.stopped:
            print(f"random-init baseline: stopped at step {result.step} ({folder})", flush=True)
            return {}
        metrics = result.metrics
    keys = headline_keys(inputs.task.main_metric, trained.metrics)
    table = {
        "checkpoint": inputs.checkpoint,
        "metrics": {k: {"pre_trained": trained.metrics.get(k), "random_init": metrics.get(k)} for k in keys},
    }
    write_json(os.path.join(workdir, "baseline.json"), table)
    print(format_table(table, settings.task))
    return table


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    return f"{value:.4f}" if isinstance(value, float) and abs(value) <= 1 else f"{value:.2f}"


def format_table(table: dict[str, Any], task: str) -> str:
    """Two rows (pre-trained, random init), one column per figure."""
    keys = list(table["metrics"])
    width = {k: max(len(k), 8) + 2 for k in keys}
    title = f"{task}: best epoch on dev (official scorers)"
    labels = (("pre_trained", "pre-trained"), ("random_init", "random init (same shape, fresh)"))
    first = max(len(title), *(len(label) for _, label in labels))
    rows = [title.ljust(first) + "".join(k.rjust(width[k]) for k in keys)]
    for row, label in labels:
        cells = (_cell(table["metrics"][k][row]).rjust(width[k]) for k in keys)
        rows.append(label.ljust(first) + "".join(cells))
    return "\n".join(rows)
