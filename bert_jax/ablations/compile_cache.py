"""JAX's persistent compilation cache for the runs of an ablation table.

A table fine-tunes the same model shapes again and again (every seed, grid point and row
of one architecture compiles the same programs: weights and data are inputs), and at the
`cpu` scale compiling is a large share of a run: measured 2026-11-25 on the 2-core
machine, a 1-epoch Rotten Tomatoes run of the L2 H128 model took 60 s with nothing
cached and 35 s with the programs of another seed's run on disk, the same figures to the
last digit (docs/ablations/README.md, "Cost"). The runner and its parallel workers
therefore share one cache folder, ``table.compilation_cache`` (default
``WORKDIR/xla_cache``; ``none``: off; a cache the user set for JAX already is kept).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from bert_jax.ablations.spec import AblationTable


def folder(table: AblationTable, workdir: str) -> str | None:
    """The table's cache folder, None when off."""
    where = table.compilation_cache
    if where == "none":
        return None
    return where or os.path.join(workdir, "xla_cache")


@contextlib.contextmanager
def use(table: AblationTable, workdir: str) -> Iterator[str | None]:
    """Compiles inside the block are cached in (and read from) the table's folder; the
    process's own setting comes back after it. Yields the folder in use."""
    path = folder(table, workdir)
    own = jax.config.jax_compilation_cache_dir
    if path is None or own:
        yield own
        return
    jax_cache.set_cache_dir(path)
    jax_cache.reset_cache()  # initialised again, at `path`, by the next compile
    try:
        yield path
    finally:
        jax.config.update("jax_compilation_cache_dir", own)
        jax_cache.reset_cache()
