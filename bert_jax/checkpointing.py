"""Orbax checkpoints that survive preemption and change of mesh.

Layout of a workdir::

    WORKDIR/checkpoints/<step>/   the last `keep_checkpoints` train states (async saves)
    WORKDIR/best/<step>/          the one with the best eval metric so far
    WORKDIR/bert_config.json      the model shape, checked before any restore

A train state is params + optimizer state + step + RNG; the data position is the step
(the input pipeline resumes from it), so a restore reproduces an uninterrupted run.
Orbax writes each save to a temporary directory and renames it when complete, so a
process killed mid-save leaves the previous checkpoint as the latest one.

Restoring reads the saved shapes first and fails with the parameter path and both shapes
when they differ from the model being trained (another model size, another vocab), and
restores onto the *current* shardings, so a checkpoint written on one mesh restores on
another.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jax
import orbax.checkpoint as ocp

from bert_jax.config import SHAPE_KEYS, BertConfig


class CheckpointMismatchError(ValueError):
    """The checkpoint does not belong to the model being restored."""


def _path_str(path: tuple[Any, ...]) -> str:
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def check_model_config(workdir: str, config: BertConfig) -> None:
    """Writes `bert_config.json` on first use; afterwards requires the same model shape."""
    path = os.path.join(workdir, "bert_config.json")
    current = config.to_dict()
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        diffs = [
            f"{k}: checkpoint {saved.get(k)} vs config {current[k]}"
            for k in SHAPE_KEYS
            if saved.get(k) != current[k]
        ]
        if diffs:
            raise CheckpointMismatchError(
                f"workdir {workdir} holds a checkpoint of another model: " + "; ".join(diffs)
            )
        return
    os.makedirs(workdir, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(current, f, indent=2)
    os.replace(tmp, path)


class Checkpointer:
    """Keep-last-K async checkpoints plus the best by an eval metric."""

    def __init__(
        self,
        workdir: str,
        *,
        keep: int = 3,
        async_save: bool = True,
        best_metric: str = "mlm_accuracy",
        best_mode: str = "max",
    ) -> None:
        self.workdir = workdir
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=True
        )
        # The handler is named up front so that a fresh process can read metadata (shapes)
        # of existing checkpoints before restoring.
        self.manager = ocp.CheckpointManager(
            os.path.join(workdir, "checkpoints"),
            options=options,
            item_handlers=ocp.StandardCheckpointHandler(),
        )
        self.best_manager = ocp.CheckpointManager(
            os.path.join(workdir, "best"),
            options=ocp.CheckpointManagerOptions(
                max_to_keep=1, enable_async_checkpointing=async_save, create=True
            ),
            item_handlers=ocp.StandardCheckpointHandler(),
        )
        self.best_metric, self.best_mode = best_metric, best_mode
        self._best = self._load_best()

    # ---------------------------------------------------------------- saving
    def save(self, step: int, state: Any, *, force: bool = False) -> bool:
        return self.manager.save(step, args=ocp.args.StandardSave(state), force=force)

    def maybe_save_best(self, step: int, state: Any, metrics: dict[str, float]) -> bool:
        value = metrics.get(self.best_metric)
        if value is None:
            return False
        better = self._best is None or (value > self._best if self.best_mode == "max" else value < self._best)
        if not better:
            return False
        self.best_manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self._best = float(value)
        if jax.process_index() == 0:
            with open(os.path.join(self.workdir, "best_metric.json"), "w") as f:
                json.dump({"step": step, self.best_metric: self._best}, f)
        return True

    def _load_best(self) -> float | None:
        path = os.path.join(self.workdir, "best_metric.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f).get(self.best_metric)

    def wait(self) -> None:
        self.manager.wait_until_finished()
        self.best_manager.wait_until_finished()

    def close(self) -> None:
        self.wait()
        self.manager.close()
        self.best_manager.close()

    # ---------------------------------------------------------------- restoring
    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def restore(self, abstract_state: Any, step: int | None = None) -> Any:
        """The state at `step` (default: latest), placed with `abstract_state`'s shardings."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.workdir}/checkpoints")
        metadata = self.manager.item_metadata(step)
        check_shapes(getattr(metadata, "tree", metadata), abstract_state, f"step {step}")
        return self.manager.restore(step, args=ocp.args.StandardRestore(abstract_state))


def check_shapes(metadata: Any, abstract_state: Any, where: str) -> None:
    """Compares saved array shapes with the target's, naming every mismatching path."""
    saved = {
        _path_str(p): tuple(getattr(m, "shape", ()) or ())
        for p, m in jax.tree_util.tree_flatten_with_path(metadata)[0]
    }
    wanted = {
        _path_str(p): tuple(x.shape) for p, x in jax.tree_util.tree_flatten_with_path(abstract_state)[0]
    }
    missing = sorted(set(wanted) - set(saved))
    extra = sorted(set(saved) - set(wanted))
    diffs = [
        f"{k}: checkpoint {saved[k]} vs model {wanted[k]}"
        for k in sorted(set(saved) & set(wanted))
        if saved[k] != wanted[k]
    ]
    problems = []
    if diffs:
        problems.append("shape mismatch " + "; ".join(diffs[:8]) + (" ..." if len(diffs) > 8 else ""))
    if missing:
        problems.append("missing in checkpoint: " + ", ".join(missing[:8]))
    if extra:
        problems.append("not in model: " + ", ".join(extra[:8]))
    if problems:
        raise CheckpointMismatchError(
            f"checkpoint {where} does not match the model being restored — " + " | ".join(problems)
        )
