"""A fine-tuning workdir that already holds a finished run (its ``results.json``).

Run again with the same config, a finished run is not trained again: its recorded results
are read back and reported (`check`, then `read_back`). With another config it is refused
in one line naming the keys that changed, before anything is written, unless
``overwrite``: then the earlier run's files (`earlier_outputs`, only the names a run
writes) are removed once the new run is accepted, and it trains anew.

The config compared is the run's as resolved (`FinetuneSettings.config`, the record
`multihost.check_same_run` compares across hosts), kept in ``results.json``; the keys
that only say how a run is carried out (logging, checkpoints, stopping) are not compared.
A ``results.json`` written before the config was kept there is compared on the fields it
holds (task, checkpoint, seed, learning rate, epochs, random init).
"""

from __future__ import annotations

import json
import os
from typing import Any

from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.training import run_config

RESULTS = "results.json"
# Every name a fine-tuning run writes in its workdir (`finetune.finetune`, `TrainingRun`,
# `outputs.save_model`, `baseline`); `checkpoints_damaged/` is set aside, never removed.
OUTPUTS = (
    RESULTS, "epochs.json", "metrics.jsonl", "tensorboard", "checkpoints", "best", "best_metric.json",
    "best_model", "best_model.tmp", "eval", "test", "baseline.json", "random_init",
)  # fmt: skip
# Keys that change how a run is carried out, not what it trains or reports.
NOT_COMPARED = (
    "log_every_steps", "checkpoint_every_steps", "keep_checkpoints", "async_checkpointing",
    "stop_after_step", "random_init_baseline", "sweep",
)  # fmt: skip
SHOWN = 4  # changed keys named in the refusal (then "and N more")


def changed_keys(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: recorded there, current now`` for every compared key whose value differs."""
    return run_config.changed_keys(recorded, current, NOT_COMPARED)


def legacy_fields(settings: FinetuneSettings, checkpoint: str) -> dict[str, Any]:
    """What a ``results.json`` without the config records of the run (its own names)."""
    return {
        "task": settings.task,
        "checkpoint": checkpoint,
        "random_init": settings.random_init,
        "seed": settings.seed,
        "learning_rate": settings.learning_rate,
        "num_epochs": settings.num_epochs,
    }


def read_results(workdir: str) -> dict[str, Any] | None:
    """The workdir's ``results.json`` (None when there is none)."""
    path = os.path.join(workdir, RESULTS)
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            results = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"{path} cannot be read ({e}): pass --overwrite to train the run anew, or another --workdir"
        ) from None
    if not isinstance(results, dict) or "best" not in results:
        raise ValueError(f"{path} is not a fine-tuning run's results: choose another --workdir")
    return results


def check(
    workdir: str, settings: FinetuneSettings, checkpoint: str, *, overwrite: bool = False
) -> dict[str, Any] | None:
    """The results of the finished run in `workdir` when it is this config's (read back,
    not trained again); None when there is none, or with `overwrite`. Refuses a finished
    run of another config in one line naming the changed keys. Only reads."""
    results = None if overwrite else read_results(workdir)
    if results is None:
        return None
    if "config" in results:
        changes = changed_keys(results["config"], settings.config)
    else:
        recorded = {k: results.get(k) for k in legacy_fields(settings, checkpoint)}
        changes = changed_keys(recorded, legacy_fields(settings, checkpoint))
    if changes:
        more = f"; and {len(changes) - SHOWN} more" if len(changes) > SHOWN else ""
        raise ValueError(
            f"--workdir {workdir} holds a finished run of another config ({'; '.join(changes[:SHOWN])}"
            f"{more}): pass --overwrite to train it anew, or another --workdir"
        )
    return results


def last_step(results: dict[str, Any]) -> int:
    """The finished run's last step (its last epoch's)."""
    epochs = results.get("epochs") or [{}]
    return int(epochs[-1].get("step", 0))


def earlier_outputs(workdir: str) -> list[str]:
    """The files and folders an earlier run left in `workdir` (what ``--overwrite`` removes)."""
    if not os.path.isdir(workdir):
        return []
    return [os.path.join(workdir, name) for name in sorted(os.listdir(workdir)) if name in OUTPUTS]
