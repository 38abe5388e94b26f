"""Orbax checkpoints that survive preemption and change of mesh.

Layout of a workdir::

    WORKDIR/checkpoints/<step>/   the last `keep_checkpoints` train states (async saves)
    WORKDIR/best/<step>/          the one with the best eval metric so far
    WORKDIR/checkpoints_damaged/  steps that failed to restore, set aside (never deleted)

A train state is params + optimizer state + step + RNG; the data position is the step
(the input pipeline resumes from it), so a restore reproduces an uninterrupted run.
Orbax writes each save to a temporary directory and renames it when complete, so a
process killed mid-save leaves the previous checkpoint as the latest one.

Restoring reads the saved shapes first and fails with the parameter path and both shapes
when they differ from the model being trained (another model size, another vocab;
`param_shapes.check`), and restores onto the *current* shardings, so a checkpoint written
on one mesh restores on another. A job may pass a `RestoreTransform` for shapes that differ
in a known, lossless way (BERT's vocabulary padding: `model.vocab_padding.RowResize`, given
by the pre-training job from its workdir's ``bert_config.json``); this module knows no model.

The workdir may be a bucket (``gs://``): the small files go through the path layer
(`storage.files`), written by process 0. On a slice, what leads to a collective is taken
alike on every host (`training.multihost`): process 0's list of steps and best value, and
every restore stage agreed, so a read that fails on one host fails that step on all.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from bert_jax.model import param_shapes
from bert_jax.storage import atomic_files, files
from bert_jax.training import failed_reads, multihost


class CheckpointMismatchError(ValueError):
    """The checkpoint does not belong to the model being restored."""


class RestoreTransform(Protocol):
    """How a job's model takes a checkpoint whose shapes differ in a known, lossless way
    (the vocabulary padding of a BERT checkpoint: `model.vocab_padding.RowResize`): the
    checkpoint layer itself knows no model."""

    def paths(self, saved: dict[str, tuple[int, ...]], wanted: dict[str, tuple[int, ...]]) -> set[str]:
        """The parameter paths restored as saved and then transformed."""

    def apply(self, x: jax.Array, target: Any) -> jax.Array:
        """One restored leaf → the model's (`target`: its shape and sharding)."""


class CheckpointDamagedError(ValueError):
    """Checkpoints exist but none of them restores (a user-facing error: one line in the CLI)."""


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
        restore_transform: RestoreTransform | None = None,
    ) -> None:
        self.workdir = workdir
        self.restore_transform = restore_transform
        # Folders are made at the first save, not here: a run refused after opening its
        # checkpoints leaves the workdir as it was.
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=False
        )
        # The handler is named up front so that a fresh process can read metadata (shapes)
        # of existing checkpoints before restoring.
        with files.on_bucket(workdir, "listing its checkpoints"):
            self.manager = ocp.CheckpointManager(
                files.join(workdir, "checkpoints"),
                options=options,
                item_handlers=ocp.StandardCheckpointHandler(),
            )
            self.best_manager = ocp.CheckpointManager(
                files.join(workdir, "best"),
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=1, enable_async_checkpointing=async_save, create=False
                ),
                item_handlers=ocp.StandardCheckpointHandler(),
            )
        self.best_metric, self.best_mode = best_metric, best_mode
        self._best = self._load_best()

    # ---------------------------------------------------------------- saving
    # On a bucket, a save (or the async one before it) that still fails when the retry
    # policy's bound runs out is a `files.BucketUnreachableError` naming the folder: the
    # run stops (exit 74); the step being saved has no commit file, so a restart resumes
    # from the last committed one.
    def save(self, step: int, state: Any, *, force: bool = False) -> bool:
        with files.on_bucket(str(self.manager.directory), f"saving step {step}"):
            _mkdir(self.manager.directory)
            # One async save at a time across both managers: on a slice, each save's finalize
            # enters a barrier of the same name, and two at once fail ("already ongoing").
            self.best_manager.wait_until_finished()
            return self.manager.save(step, args=ocp.args.StandardSave(state), force=force)

    def maybe_save_best(self, step: int, state: Any, metrics: dict[str, float]) -> bool:
        value = metrics.get(self.best_metric)
        if value is None or not all(math.isfinite(float(v)) for v in metrics.values() if _is_number(v)):
            return False  # a non-finite evaluation is never the best
        better = self._best is None or (value > self._best if self.best_mode == "max" else value < self._best)
        if not better:
            return False
        with files.on_bucket(str(self.best_manager.directory), f"saving step {step}"):
            _mkdir(self.best_manager.directory)
            self.manager.wait_until_finished()  # one async save at a time (see `save`)
            self.best_manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self._best = float(value)
        if jax.process_index() == 0:
            path = files.join(self.workdir, "best_metric.json")
            atomic_files.write_json(path, {"step": step, self.best_metric: self._best})
        return True

    def _load_best(self) -> float | None:
        """The best value so far, as process 0 reads it (every host decides alike whether
        to save `best/`, a collective)."""
        best = None
        if jax.process_index() == 0:
            saved = files.read_json_if_exists(files.join(self.workdir, "best_metric.json"))
            best = (saved or {}).get(self.best_metric)
        known, value = multihost.from_process_0(np.array([best is not None, best or 0.0], np.float64))
        return float(value) if known else None

    def wait(self) -> None:
        with files.on_bucket(str(self.manager.directory), "finishing a save"):
            self.manager.wait_until_finished()
            self.best_manager.wait_until_finished()

    def close(self) -> None:
        self.wait()
        with files.on_bucket(str(self.manager.directory), "finishing a save"):
            self.manager.close()
            self.best_manager.close()

    # ---------------------------------------------------------------- restoring
    def latest_step(self) -> int | None:
        return self.manager.latest_step()

    def restore_latest(self, abstract_state: Any) -> tuple[Any, int] | None:
        """The newest checkpoint that restores, and its step; None if there are none.

        A step that fails to restore (a truncated data file, a missing `_METADATA` or
        manifest) while an older one restores is damaged: it is moved, never deleted, to
        ``WORKDIR/checkpoints_damaged/`` and named in a warning. If none restores, the
        error names every step's reason (a model of another size first) and nothing moves.
        A read that failed because the bucket did not answer (on any host) damages nothing:
        every host stops with `files.BucketUnreachableError`, and nothing moves.
        """
        failures: list[tuple[int, Exception]] = []
        for step in self._steps_on_process_0():
            # Each stage agreed by every host before the next: a step that failed on any
            # host (a transient bucket read) is failed on all, so all resume from the same
            # step or all fail together, and no host enters orbax's restore (a collective)
            # alone.
            error, state = None, None
            with failed_reads.quiet_orbax_reads():
                try:
                    checked = self._check(abstract_state, step)
                except Exception as e:
                    error = e
                if multihost.all_true(error is None):
                    try:
                        state = self._load(step, checked, abstract_state)
                    except Exception as e:
                        error = e
                        failed_reads.quiet_restore_debris()
            self._stop_if_unreachable(step, error)
            if not multihost.all_true(error is None):
                failures.append((step, error or CheckpointDamagedError("failed to restore on another host")))
                continue
            for bad, error in failures:
                self._set_aside(bad, error)
            return state, step
        if not failures:
            return None
        for _, error in failures:
            if isinstance(error, CheckpointMismatchError) and "shape mismatch" in str(error):
                raise error  # the same mismatch everywhere: the config, not the files
        reasons = "; ".join(f"step {s}: {_first_line(e)}" for s, e in failures)
        raise CheckpointDamagedError(
            f"no checkpoint in {self.manager.directory} restores ({reasons}); nothing was moved or "
            "deleted: repair or move them away to start afresh"
        )

    def _stop_if_unreachable(self, step: int, error: Exception | None) -> None:
        """Raises `files.BucketUnreachableError` on every host if the bucket did not answer
        on any host while `step` was read (agreed: every host takes the same way)."""
        folder = str(self.manager.directory)
        failed = error is not None and files.is_remote(folder)
        unreachable = files.bucket_error(folder, f"restoring step {step}", error) if failed else None
        if not multihost.all_true(unreachable is None):
            raise unreachable or files.BucketUnreachableError(
                f"{folder} cannot be reached on another host (restoring step {step}); nothing was moved"
            )

    def _steps_on_process_0(self) -> list[int]:
        """The saved steps, newest first, as process 0 lists them."""
        steps = sorted(self.manager.all_steps(), reverse=True) if jax.process_index() == 0 else []
        count = int(multihost.from_process_0(np.int64(len(steps))))
        padded = np.full(max(count, 1), -1, np.int64)
        padded[: len(steps)] = steps
        return [int(s) for s in multihost.from_process_0(padded)[:count]]

    def _set_aside(self, step: int, error: Exception) -> None:
        src = files.join(str(self.manager.directory), str(step))
        dst = files.join(self.workdir, "checkpoints_damaged", f"{step}-{int(time.time())}")
        if jax.process_index() == 0:
            files.move_tree(src, dst)
            print(
                f"warning: checkpoint step {step} is damaged ({_first_line(error)}); moved to {dst}",
                flush=True,
            )
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"set aside checkpoint {step}")
        self.manager.reload()

    def restore(self, abstract_state: Any, step: int | None = None) -> Any:
        """The state at `step` (default: latest), placed with `abstract_state`'s shardings."""
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.workdir}/checkpoints")
        return self._load(step, self._check(abstract_state, step), abstract_state)

    def _check(self, abstract_state: Any, step: int) -> tuple[Any, set[str]]:
        """Reads `step`'s metadata (no collective) and checks its shapes against the model;
        returns the restore target and the paths the restore transform takes."""
        metadata = self.manager.item_metadata(step)
        metadata = getattr(metadata, "tree", metadata)
        saved = param_shapes.shapes(metadata)
        wanted = param_shapes.shapes(abstract_state)
        resized = self.restore_transform.paths(saved, wanted) if self.restore_transform else set()
        check_shapes(metadata, abstract_state, f"step {step}", skip=resized)
        # Paths the transform takes: restored as saved, then transformed (`_load`).
        target = jax.tree_util.tree_map_with_path(
            lambda p, x: (
                _as_saved(x, saved[param_shapes.path_str(p)]) if param_shapes.path_str(p) in resized else x
            ),
            abstract_state,
        )
        return target, resized

    def _load(self, step: int, checked: tuple[Any, set[str]], abstract_state: Any) -> Any:
        """Orbax's restore of `step` (a collective on a slice: every host enters it)."""
        target, resized = checked
        state = self.manager.restore(step, args=ocp.args.StandardRestore(target))
        if not resized:
            return state
        return jax.tree_util.tree_map_with_path(
            lambda p, x, t: self.restore_transform.apply(x, t) if param_shapes.path_str(p) in resized else x,
            state,
            abstract_state,
        )


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.floating, np.integer))


def _mkdir(path: Any) -> None:
    epath.Path(str(path)).mkdir(parents=True, exist_ok=True)


def _first_line(error: Exception) -> str:
    """The reason in a few words: the first line, without TensorStore's spec dump."""
    text = str(error).strip().splitlines()
    line = text[0].split(" See full TensorStore details")[0] if text else ""
    return f"{type(error).__name__}: {line[:200]}"


def check_shapes(metadata: Any, abstract_state: Any, where: str, skip: Any = ()) -> None:
    """Saved array shapes against the target's (`param_shapes.check`), naming the path."""
    param_shapes.check(
        abstract_state, metadata, f"checkpoint {where}", skip=skip, error=CheckpointMismatchError
    )


def _as_saved(target: Any, shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    """A restore target of the saved shape, its vocabulary axis unsharded (it may not divide)."""
    s = getattr(target, "sharding", None)
    if isinstance(s, NamedSharding):
        spec = tuple(s.spec) + (None,) * (len(shape) - len(s.spec))
        s = NamedSharding(s.mesh, PartitionSpec(None, *spec[1:]))
    return jax.ShapeDtypeStruct(shape, target.dtype, sharding=s)
