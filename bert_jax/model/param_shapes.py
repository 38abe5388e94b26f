"""The one check of parameter shapes: the tree a model expects against the one loaded.

Checkpoint restore (`training.checkpoints`), checkpoint conversion (`convert`) and fine-tuning's
encoder initialisation (`merge_params`) all go through `check`, which fails with one line
naming the source, the parameter path and both shapes (or the missing or unexpected
parameter), so that a checkpoint of another model size is refused the same way wherever
it is loaded.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import flax.linen as nn
import jax
import numpy as np

# Problems named in one message; the rest are counted.
_SHOWN = 8


def path_str(path: tuple[Any, ...]) -> str:
    """A `jax.tree_util` key path as ``a/b/c`` (dict keys, attribute names, indices)."""
    parts = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                parts.append(str(getattr(k, attr)))
                break
        else:
            parts.append(str(k))
    return "/".join(parts)


def _is_box(x: Any) -> bool:
    return isinstance(x, nn.meta.AxisMetadata)


def _shape(x: Any) -> tuple[int, ...]:
    if _is_box(x):
        x = x.unbox()
    shape = getattr(x, "shape", None)
    return tuple(int(d) for d in (np.shape(x) if shape is None else shape))


def shapes(tree: Any) -> dict[str, tuple[int, ...]]:
    """Path → shape of every leaf: arrays, `jax.ShapeDtypeStruct`s, orbax array metadata
    or flax boxes (`nn.Partitioned`, as `jax.eval_shape` of a model's init gives)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_box)[0]
    return {path_str(p): _shape(x) for p, x in leaves}


def check(
    expected: Any,
    loaded: Any,
    source: str,
    *,
    label: str = "checkpoint",
    allow_extra: bool = False,
    skip: Collection[str] = (),
    error: type[ValueError] = ValueError,
) -> None:
    """Raises `error` unless every parameter of `expected` is in `loaded` with its shape
    (and, unless `allow_extra`, `loaded` has nothing else); paths in `skip` may differ in
    shape. One line, e.g. ``SOURCE: shape mismatch at PATH: LABEL (a, b) vs model (c, d);
    ...``, then missing and unexpected parameters, in `expected`'s tree order (a train
    state's params before its optimizer state), the first few named."""
    want, got = shapes(expected), shapes(loaded)
    wrong = [k for k in want if k in got and want[k] != got[k] and k not in skip]
    missing = [k for k in want if k not in got]
    extra = [] if allow_extra else sorted(got.keys() - want.keys())
    if not (wrong or missing or extra):
        return
    groups = [
        ("shape mismatch at ", [f"{k}: {label} {got[k]} vs model {want[k]}" for k in wrong]),
        (f"missing from the {label}: ", [f"{k} (model {want[k]})" for k in missing]),
        ("not in the model: ", [f"{k} ({label} {got[k]})" for k in extra]),
    ]
    parts, shown = [], 0
    for title, items in groups:
        if items and shown < _SHOWN:
            parts.append(title + "; ".join(items[: _SHOWN - shown]))
            shown += len(items[: _SHOWN - shown])
    total = len(wrong) + len(missing) + len(extra)
    more = f" (and {total - shown} more)" if total > shown else ""
    raise error(f"{source}: " + " | ".join(parts) + more)


def merge_params(init: Any, loaded: Any, source: str) -> Any:
    """`init` (an unboxed parameter tree) with every leaf taken from `loaded`, which must
    hold it with the same shape, cast to `init`'s dtype (host numpy arrays). Leaves of
    `loaded` that `init` lacks are ignored (a pooler the task head does not use)."""
    check(init, loaded, source, allow_extra=True)
    flat = {path_str(p): x for p, x in jax.tree_util.tree_flatten_with_path(loaded)[0]}
    return jax.tree_util.tree_map_with_path(lambda p, x: np.asarray(flat[path_str(p)], x.dtype), init)
