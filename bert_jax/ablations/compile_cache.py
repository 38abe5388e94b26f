"""JAX's persistent compilation cache for the runs of an ablation table.

A table fine-tunes the same model shapes again and again (every seed, grid point and row
of one architecture compiles the same programs: weights and data are inputs), and at the
`cpu` scale compiling is a large share of a run: measured 2026-11-25 on the 2-core
machine, a 1-epoch Rotten Tomatoes run of the L2 H128 model took 60 s with nothing
cached and 35 s with the programs of another seed's run on disk, the same figures to the
last digit (docs/ablations/README.md, "Cost"). The runner and its parallel workers
therefore share one cache folder, ``table.compilation_cache`` (default
``WORKDIR/xla_cache``; ``none``: off; a cache the user set for JAX already is kept),
used as a run uses its own (`training.compile_cache.use`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from bert_jax.ablations.spec import AblationTable
from bert_jax.training import compile_cache as run_cache

FOLDER = "xla_cache"  # in the table's workdir, by default


@contextlib.contextmanager
def use(table: AblationTable, workdir: str) -> Iterator[str | None]:
    """Compiles inside the block are cached in (and read from) the table's folder; the
    process's own setting comes back after it. Yields the folder in use (None: none)."""
    setting = table.compilation_cache or os.path.join(workdir, FOLDER)
    with run_cache.use(setting, workdir) as path:
        yield path
