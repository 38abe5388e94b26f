"""JAX's persistent compilation cache for a run: a restart compiles nothing it compiled before.

A preempted or crashed job on a slice is started again with the same program; compiling
its train step again costs minutes of every chip. So a run keeps its compiled programs in
``<workdir>/compilation_cache`` (a ``gs://`` workdir: in the bucket, where every host of
the slice reads them and process 0 writes them, as JAX does), or in the folder or bucket
``config.compilation_cache_dir`` names; ``none`` turns it off. The cache is on from the
moment the run is accepted (its state restored or initialised: a refused run writes
nothing), for every program compiled from there on, the train and evaluation steps among
them, however quickly it compiled (``jax_persistent_cache_min_compile_time_secs`` 0): a
restart reads them all back and compiles none of them again. A cache the user set for JAX
already (``JAX_COMPILATION_CACHE_DIR``, or a caller such as `ablate`) is kept. JAX's cache
key covers the program, the devices and the compiler version: another slice shape or
another jax compiles anew, into the same folder. What a run compiles before it is
accepted (`staged`: its phases' steps, checked against device memory) goes to the run's
folder where a restart finds it, or else to a temporary folder that `Staged.publish`
copies into the run's once it is accepted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator

import jax
from etils import epath
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from bert_jax.storage import files

FOLDER = "compilation_cache"  # in the workdir, by default
OFF = "none"
SETTING = "--config.compilation_cache_dir"


def folder(setting: str, workdir: str) -> str | None:
    """The cache folder of a run: `setting` ("" = the workdir's ``compilation_cache``), None when off."""
    if setting.strip().lower() == OFF:
        return None
    return setting or files.join(workdir, FOLDER)


# JAX's XLA-level caches (GPU autotuning) live in the cache folder, and their path goes into
# every program's cache key: with them on, a program compiled into one folder is not found
# in another (a staged compile, a moved or copied cache). The run's cache keeps them off.
NO_XLA_CACHES = "none"


def _set(path: str | None, min_compile_time_s: float, xla_caches: str | None = NO_XLA_CACHES) -> None:
    jax_cache.set_cache_dir(path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_time_s)
    jax.config.update("jax_persistent_cache_enable_xla_caches", xla_caches)
    jax_cache.reset_cache()  # initialised again, at `path`, by the next compile


def check(setting: str) -> None:
    """Refuses, in one line naming the key, a cache folder given in `setting` that cannot be
    written (the workdir's own is checked with the workdir). Before the run writes anything."""
    if setting and folder(setting, "") is not None:
        files.check_reachable(setting, SETTING, writable=True)


@contextlib.contextmanager
def use(setting: str, workdir: str) -> Iterator[str | None]:
    """Compiles inside the block are read from and written to the run's cache folder; the
    process's own settings come back after it. Yields the folder in use (None: none)."""
    path = folder(setting, workdir)
    own = jax.config.jax_compilation_cache_dir
    if path is None or own:
        yield own or None
        return
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    xla_caches = jax.config.jax_persistent_cache_enable_xla_caches
    _set(path, 0.0)
    try:
        yield path
    finally:
        _set(own, before, xla_caches)


@contextlib.contextmanager
def off() -> Iterator[None]:
    """No persistent cache inside the block, whoever set one (`plan`'s compiles for a TPU
    topology without its chips: JAX writes them, then cannot load them back and warns)."""
    own = jax.config.jax_compilation_cache_dir
    if not own:
        yield
        return
    jax_cache.set_cache_dir(None)
    jax_cache.reset_cache()
    try:
        yield
    finally:
        jax_cache.set_cache_dir(own)
        jax_cache.reset_cache()


class Staged:
    """Programs compiled before the run was accepted: in a temporary folder (`temp`), or
    written to the run's existing cache folder (`added`: their names there), or nowhere.
    `publish` keeps them once the run is accepted; `discard` (a refused run) removes them,
    so that a refused run leaves the workdir as it was."""

    def __init__(self, temp: str | None = None, path: str | None = None) -> None:
        self.temp, self.path, self.added = temp, path, []
        self.settled = False
        if temp:
            weakref.finalize(self, shutil.rmtree, temp, True)

    def publish(self) -> None:
        """Copies the programs into the run's cache folder (process 0, as JAX writes it)."""
        if self.settled:
            return
        self.settled = True
        if self.temp and self.path and jax.process_index() == 0:
            files.makedirs(self.path)
            for name in sorted(os.listdir(self.temp)):
                target = files.join(self.path, name)
                if not files.exists(target):
                    files.copy_file(os.path.join(self.temp, name), target)
        self._remove_temp()

    def discard(self) -> None:
        """Removes what was compiled before the run was refused (nothing once published)."""
        if self.settled:
            return
        self.settled = True
        for name in self.added:
            with contextlib.suppress(OSError):
                epath.Path(files.join(self.path, name)).unlink()
        self._remove_temp()

    def _remove_temp(self) -> None:
        if self.temp:
            shutil.rmtree(self.temp, ignore_errors=True)
            self.temp = None


def _names(path: str) -> set[str]:
    return {p.name for p in epath.Path(path).iterdir()}


@contextlib.contextmanager
def staged(setting: str, workdir: str) -> Iterator[Staged]:
    """Compiles inside the block, before the run is accepted: read from and written to the
    run's cache folder when it exists already (a restart: `Staged.added` names what was
    written), else written to a temporary folder (nothing to the workdir yet). An error
    inside the block discards them."""
    path = folder(setting, workdir)
    own = jax.config.jax_compilation_cache_dir
    if path is None or own:
        yield Staged()
        return
    if files.exists(path):
        stage, before = Staged(None, path), _names(path)
        try:
            with use(setting, workdir):
                yield stage
        except BaseException:
            stage.added = sorted(_names(path) - before)
            stage.discard()
            raise
        stage.added = sorted(_names(path) - before)
        return
    stage = Staged(tempfile.mkdtemp(prefix="bert_jax-compiled-"), path)
    min_time = jax.config.jax_persistent_cache_min_compile_time_secs
    xla_caches = jax.config.jax_persistent_cache_enable_xla_caches
    _set(stage.temp, 0.0)
    try:
        yield stage
    except BaseException:
        stage.discard()
        raise
    finally:
        _set(own, min_time, xla_caches)
