"""Hyper-parameters of a cell chosen on dev (the paper's §A.3 protocol, on a smaller grid).

A column with a ``grid`` (e.g. ``learning_rate=(5e-4, 1e-3), num_epochs=(2,)``) is
fine-tuned at every point of it with the first ``grid_seeds`` seeds, in
``<cell>/<point>/seed<k>/`` (``<point>`` e.g. ``lr0.0005_ep2``). The point whose mean dev
``metric`` is highest (the first of equals, in grid order) is chosen once every point has
its grid seeds; the chosen point then runs the other seeds up to ``finetune_seeds``, and
the cell's figures are those seeds' ``report_metric`` (for the offline suite: the test
split). Everything is read from the ``results.json`` files, so a rerun picks up where
the last one stopped and chooses the same point.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

from bert_jax.ablations.spec import Column

# Short names of grid keys in a point's folder name.
_SHORT = {"learning_rate": "lr", "num_epochs": "ep", "global_batch_size": "bs"}


def points(column: Column) -> list[dict[str, Any]]:
    """Every point of the column's grid, in grid order ([] for a column without one)."""
    if not column.grid:
        return []
    keys = [k for k, _ in column.grid]
    product = itertools.product(*(values for _, values in column.grid))
    return [dict(zip(keys, values, strict=True)) for values in product]


def point_name(point: dict[str, Any]) -> str:
    return "_".join(f"{_SHORT.get(k, k)}{v:g}" for k, v in point.items())


def read_results(seed_dir: str) -> dict[str, Any] | None:
    path = os.path.join(seed_dir, "results.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def metric_of(results: dict[str, Any], metric: str, path: str) -> float:
    if metric not in results["best"]:
        raise KeyError(f"{path}: no metric {metric!r} in results.json (has {sorted(results['best'])})")
    return float(results["best"][metric])


def selection(column: Column, cell_dir: str, grid_seeds: int) -> dict[str, Any]:
    """Each point's dev figures (its first `grid_seeds` seeds) and the chosen point (None
    until every point has them)."""
    table: dict[str, Any] = {}
    for point in points(column):
        name = point_name(point)
        table[name] = {"params": point, "dev": _finished(cell_dir, name, grid_seeds, column.metric)}
    complete = all(len(p["dev"]) == grid_seeds for p in table.values())
    chosen = None
    if complete and table:
        chosen = max(table, key=lambda n: (sum(table[n]["dev"]) / grid_seeds, -list(table).index(n)))
    return {"points": table, "chosen": chosen, "metric": column.metric, "grid_seeds": grid_seeds}


def pending(
    column: Column, cell_dir: str, grid_seeds: int, seeds: int
) -> list[tuple[int, str, dict[str, Any]]]:
    """The runs of a grid cell that can start now, as (seed, folder, config changes): the
    grid seeds of every point until one is chosen, then the chosen point's other seeds."""
    chosen = selection(column, cell_dir, grid_seeds)
    if chosen["chosen"] is None:
        wanted = [(p, k) for p in points(column) for k in range(grid_seeds)]
    else:
        wanted = [(chosen["points"][chosen["chosen"]]["params"], k) for k in range(seeds)]
    out = []
    for point, k in wanted:
        seed_dir = os.path.join(cell_dir, point_name(point), f"seed{k}")
        if not os.path.exists(os.path.join(seed_dir, "results.json")):
            out.append((k, seed_dir, dict(point)))
    return out


def chosen_values(column: Column, cell_dir: str, grid_seeds: int, seeds: int) -> list[float]:
    """The chosen point's ``report_metric`` per finished seed (raw, not scaled)."""
    chosen = selection(column, cell_dir, grid_seeds)["chosen"]
    if chosen is None:
        return []
    return _finished(cell_dir, chosen, seeds, column.report_metric)


def _finished(cell_dir: str, point: str, seeds: int, metric: str) -> list[float]:
    """`metric` of each of a point's first `seeds` seeds that has finished (raw)."""
    values = []
    for k in range(seeds):
        seed_dir = os.path.join(cell_dir, point, f"seed{k}")
        results = read_results(seed_dir)
        if results is not None:
            values.append(metric_of(results, metric, seed_dir))
    return values
