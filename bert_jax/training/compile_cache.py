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
another jax compiles anew, into the same folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
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


def _set(path: str | None, min_compile_time_s: float) -> None:
    jax_cache.set_cache_dir(path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_time_s)
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
    _set(path, 0.0)
    try:
        yield path
    finally:
        _set(own, before)
