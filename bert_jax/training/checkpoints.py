"""Orbax checkpoints that survive preemption and change of mesh.

Layout of a workdir::

    WORKDIR/checkpoints/<step>/   the last `keep_checkpoints` train states (async saves)
    WORKDIR/best/<step>/          the one with the best eval metric so far
    WORKDIR/bert_config.json      the model shape, checked before any restore
    WORKDIR/checkpoints_damaged/  steps that failed to restore, set aside (never deleted)

A train state is params + optimizer state + step + RNG; the data position is the step
(the input pipeline resumes from it), so a restore reproduces an uninterrupted run.
Orbax writes each save to a temporary directory and renames it when complete, so a
process killed mid-save leaves the previous checkpoint as the latest one.

Restoring reads the saved shapes first and fails with the parameter path and both shapes
when they differ from the model being trained (another model size, another vocab;
`param_shapes.check`), and restores onto the *current* shardings, so a checkpoint written
on one mesh restores on another. Vocabulary padding (`BertConfig.vocab_pad_multiple`) may
differ: a checkpoint saved unpadded restores into a padded model (padding rows zero) and
back, the real rows unchanged.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

from bert_jax.model import param_shapes, vocab_padding
from bert_jax.model.config import ARCHITECTURE_KEYS, SHAPE_KEYS, BertConfig
from bert_jax.storage import atomic_files


class CheckpointMismatchError(ValueError):
    """The checkpoint does not belong to the model being restored."""


def check_model_config(workdir: str, config: BertConfig) -> None:
    """Requires the model shape of the workdir's `bert_config.json`, if there is one.

    Only reads: a refused run leaves the workdir as it was (`write_model_config` follows
    once the run is accepted)."""
    path = os.path.join(workdir, "bert_config.json")
    if not os.path.exists(path):
        return
    current = config.to_dict()
    with open(path) as f:
        saved = json.load(f)
    # A config written before the recipe switches existed is the paper's architecture.
    defaults = BertConfig().to_dict()
    saved = {**{k: defaults[k] for k in ARCHITECTURE_KEYS}, **saved}
    diffs = [
        f"{k}: checkpoint {saved.get(k)} vs config {current[k]}"
        for k in SHAPE_KEYS + ARCHITECTURE_KEYS
        if saved.get(k) != current[k]
    ]
    if diffs:
        raise CheckpointMismatchError(
            f"workdir {workdir} holds a checkpoint of another model: " + "; ".join(diffs)
        )


def write_model_config(workdir: str, config: BertConfig) -> None:
    """Writes `bert_config.json` (atomically) unless the workdir has one."""
    path = os.path.join(workdir, "bert_config.json")
    if os.path.exists(path):
        return
    atomic_files.write_json(path, config.to_dict(), indent=2)


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
    ) -> None:
        self.workdir = workdir
        # Folders are made at the first save, not here: a run refused after opening its
        # checkpoints leaves the workdir as it was.
        options = ocp.CheckpointManagerOptions(
            max_to_keep=keep, enable_async_checkpointing=async_save, create=False
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
                max_to_keep=1, enable_async_checkpointing=async_save, create=False
            ),
            item_handlers=ocp.StandardCheckpointHandler(),
        )
        self.best_metric, self.best_mode = best_metric, best_mode
        self._best = self._load_best()

    # ---------------------------------------------------------------- saving
    def save(self, step: int, state: Any, *, force: bool = False) -> bool:
        _mkdir(self.manager.directory)
        return self.manager.save(step, args=ocp.args.StandardSave(state), force=force)

    def maybe_save_best(self, step: int, state: Any, metrics: dict[str, float]) -> bool:
        value = metrics.get(self.best_metric)
        if value is None:
            return False
        better = self._best is None or (value > self._best if self.best_mode == "max" else value < self._best)
        if not better:
            return False
        _mkdir(self.best_manager.directory)
        self.best_manager.save(step, args=ocp.args.StandardSave(state), force=True)
        self._best = float(value)
        if jax.process_index() == 0:
            path = os.path.join(self.workdir, "best_metric.json")
            atomic_files.write_json(path, {"step": step, self.best_metric: self._best})
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

    def restore_latest(self, abstract_state: Any) -> tuple[Any, int] | None:
        """The newest checkpoint that restores, and its step; None if there are none.

        A step that fails to restore (a truncated data file, a missing `_METADATA` or
        manifest) while an older one restores is damaged: it is moved, never deleted, to
        ``WORKDIR/checkpoints_damaged/`` and named in a warning. If none restores, the
        error names every step's reason (a model of another size first) and nothing moves.
        """
        failures: list[tuple[int, Exception]] = []
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                state = self.restore(abstract_state, step)
            except Exception as e:
                failures.append((step, e))
                _quiet_restore_debris()
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

    def _set_aside(self, step: int, error: Exception) -> None:
        src = os.path.join(str(self.manager.directory), str(step))
        dst_dir = os.path.join(self.workdir, "checkpoints_damaged")
        dst = os.path.join(dst_dir, f"{step}-{int(time.time())}")
        if jax.process_index() == 0:
            _mkdir(dst_dir)
            epath.Path(src).rename(epath.Path(dst))
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
        metadata = self.manager.item_metadata(step)
        metadata = getattr(metadata, "tree", metadata)
        vocab_size = _saved_vocab_size(self.workdir)
        saved = param_shapes.shapes(metadata)
        resized = _vocab_resizes(saved, param_shapes.shapes(abstract_state), vocab_size)
        check_shapes(metadata, abstract_state, f"step {step}", skip=resized)
        if not resized:
            return self.manager.restore(step, args=ocp.args.StandardRestore(abstract_state))
        # A checkpoint with other vocabulary padding (one saved before the model padded
        # its vocabulary, say): restored as saved, then resized to the model's rows.
        is_resized = lambda path: param_shapes.path_str(path) in resized
        target = jax.tree_util.tree_map_with_path(
            lambda p, x: _as_saved(x, saved[param_shapes.path_str(p)]) if is_resized(p) else x,
            abstract_state,
        )
        state = self.manager.restore(step, args=ocp.args.StandardRestore(target))
        return jax.tree_util.tree_map_with_path(
            lambda p, x, t: _resize_rows(x, t, vocab_size) if is_resized(p) else x, state, abstract_state
        )


def _mkdir(path: Any) -> None:
    epath.Path(str(path)).mkdir(parents=True, exist_ok=True)


def _first_line(error: Exception) -> str:
    """The reason in a few words: the first line, without TensorStore's spec dump."""
    text = str(error).strip().splitlines()
    line = text[0].split(" See full TensorStore details")[0] if text else ""
    return f"{type(error).__name__}: {line[:200]}"


def _is_restore_debris(unraisable: Any) -> bool:
    """What a failed orbax restore leaves behind: its reading coroutines, garbage-collected
    with their error unretrieved, and callbacks scheduled on its closed event loop."""
    value, obj = unraisable.exc_value, repr(unraisable.object)
    closed_loop = isinstance(value, RuntimeError) and "Event loop is closed" in str(value)
    return closed_loop or ("coroutine" in obj and "orbax" in repr(getattr(unraisable.object, "cr_code", "")))


def _quiet_restore_debris() -> None:
    """After a restore failed (a damaged step, already reported in one warning line): its
    debris is dropped instead of printed as tracebacks; every other unraisable error is
    reported as before."""
    previous = sys.unraisablehook
    if getattr(previous, "_bert_jax_quiet", False):
        return

    def hook(unraisable: Any) -> None:
        if not _is_restore_debris(unraisable):
            previous(unraisable)

    hook._bert_jax_quiet = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook
    gc.collect()  # the failed restore's coroutines are finalised now, quietly


def check_shapes(metadata: Any, abstract_state: Any, where: str, skip: Any = ()) -> None:
    """Saved array shapes against the target's (`param_shapes.check`), naming the path."""
    param_shapes.check(
        abstract_state, metadata, f"checkpoint {where}", skip=skip, error=CheckpointMismatchError
    )


def _saved_vocab_size(workdir: str) -> int | None:
    path = os.path.join(workdir, "bert_config.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f).get("vocab_size")


def _vocab_resizes(saved: dict[str, tuple], wanted: dict[str, tuple], vocab_size: int | None) -> set[str]:
    """Paths whose saved and wanted shapes differ only in vocabulary padding rows: the
    same real rows (`vocab_size`, from the workdir's `bert_config.json`), padded to
    another multiple (`BertConfig.vocab_pad_multiple`) or not at all."""
    if vocab_size is None:
        return set()
    return {
        k
        for k in saved.keys() & wanted.keys()
        if vocab_padding.is_vocab_param(k)
        and len(saved[k]) == len(wanted[k]) > 0
        and saved[k] != wanted[k]
        and saved[k][1:] == wanted[k][1:]
        and min(saved[k][0], wanted[k][0]) >= vocab_size
    }


def _as_saved(target: Any, shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    """A restore target of the saved shape, its vocabulary axis unsharded (it may not divide)."""
    s = getattr(target, "sharding", None)
    if isinstance(s, NamedSharding):
        spec = tuple(s.spec) + (None,) * (len(shape) - len(s.spec))
        s = NamedSharding(s.mesh, PartitionSpec(None, *spec[1:]))
    return jax.ShapeDtypeStruct(shape, target.dtype, sharding=s)


def _resize_rows(x: jax.Array, target: Any, vocab_size: int) -> jax.Array:
    """The first `vocab_size` rows of `x`, zero-filled to `target`'s rows, in its sharding."""
    pad = [(0, target.shape[0] - vocab_size)] + [(0, 0)] * (x.ndim - 1)
    fn = lambda a: jnp.pad(a[:vocab_size], pad)
    s = getattr(target, "sharding", None)
    return (jax.jit(fn, out_shardings=s) if s is not None else jax.jit(fn))(x)
