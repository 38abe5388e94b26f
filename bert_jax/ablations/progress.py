"""A table's progress: what is done, what is left, and about how long the rest takes.

A table runs for an hour or more, as many jobs (a row's pre-training, one seed of one
cell's fine-tuning), each showing its own progress. As each job starts the runner prints
the table's line:

    == table6: 1 of 3 pre-trainings, 14 of 48 fine-tuning runs done; 0:21:30 so far, about 0:45:10 left

The counts are read from disk, as the runner decides what to run, so what an earlier
invocation finished counts as done. What is left is estimated from this invocation's own
jobs: each kind's mean time, times how many of that kind are left, over the processes
running at once but no less than the longest job left (`?` while a kind that is left has
not finished a job here yet). Jobs of one kind differ (a table's model sizes, its tasks),
so the estimate is a guide that improves as the table goes on, as a progress bar's does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator

from bert_jax.ablations import cells, grid
from bert_jax.ablations.spec import AblationTable
from bert_jax.data.progress import format_duration

PRETRAINING, RUN = "pretrain", "run"  # the kinds of job (as `parallel` names them)


@dataclasses.dataclass(frozen=True)
class Work:
    """Jobs done and in all, by kind."""

    pretrainings_done: int
    pretrainings: int
    runs_done: int
    runs: int

    def left(self, kind: str) -> int:
        if kind == PRETRAINING:
            return self.pretrainings - self.pretrainings_done
        return self.runs - self.runs_done


def cell_runs(table: AblationTable, row: str, column: str, cell_dir: str) -> tuple[int, int]:
    """(finished, in all) fine-tuning runs of one cell: one per seed; a grid cell's grid
    seeds at every point and the chosen point's other seeds (`grid`)."""
    plan = cells.cell_plan(table, row, column)
    if plan["approach"] in ("lm_ppl", "n/a"):
        return 0, 0
    seeds = table.finetune_seeds
    if "grid" not in plan:
        return seeds - len(cells.pending_runs(table, row, column, cell_dir)), seeds
    col, grid_seeds = table.columns[column], table.grid_seeds  # 1 <= grid_seeds <= seeds
    total = len(grid.points(col)) * grid_seeds + seeds - grid_seeds
    selection = grid.selection(col, cell_dir, grid_seeds)
    finished = sum(len(p["dev"]) for p in selection["points"].values())
    if selection["chosen"] is not None:  # and the chosen point's other seeds
        finished += len(grid.chosen_values(col, cell_dir, grid_seeds, seeds)) - grid_seeds
    return finished, total


def table_work(table: AblationTable, workdir: str, names: list[str], cols: list[str]) -> Work:
    """The jobs of the chosen rows and columns of a table (not `figure5`), from disk."""
    sources = list(dict.fromkeys(table.row_settings[r].model_from for r in names))
    pretrained = sum(cells.pretrained(table, workdir, source) for source in sources)
    finished = total = 0
    for row in names:
        for column in cols:
            f, t = cell_runs(table, row, column, os.path.join(workdir, row, column))
            finished, total = finished + f, total + t
    return Work(pretrained, len(sources), finished, total)


class TableProgress:
    """The table's line (`report`: printed by `say`) as jobs start. `count` reads the
    table's `Work` from disk; `processes` run jobs at once; `pretrainings` names that kind
    of job in the line."""

    def __init__(
        self,
        table: str,
        count: Callable[[], Work],
        processes: int = 1,
        pretrainings: str = "pre-trainings",
        clock: Callable[[], float] = time.monotonic,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.table, self.count, self.processes, self.clock = table, count, max(1, processes), clock
        self.pretrainings = pretrainings
        self.say = say or (lambda line: print(line, flush=True))
        self.began = clock()
        self.seconds: dict[str, list[float]] = {PRETRAINING: [], RUN: []}
        self._started: dict[str, tuple[str, float]] = {}  # key -> (kind, start)

    def line(self) -> str:
        work = self.count()
        kinds_left = [(work.left(kind), times) for kind, times in self.seconds.items() if work.left(kind) > 0]
        if any(not times for _, times in kinds_left):
            left = float("nan")  # printed "?"
        else:
            means = [(n, sum(times) / len(times)) for n, times in kinds_left]
            # Shared among the processes, but no sooner than the longest of the jobs left.
            left = max([sum(n * m for n, m in means) / self.processes, *(m for _, m in means)], default=0.0)
        so_far = format_duration(self.clock() - self.began)
        return (
            f"== {self.table}: {work.pretrainings_done} of {work.pretrainings} {self.pretrainings}, "
            f"{work.runs_done} of {work.runs} fine-tuning runs done; {so_far} so far, "
            f"about {format_duration(left)} left"
        )

    def report(self) -> None:
        self.say(self.line())

    def started(self, key: str, kind: str) -> None:
        """A job (`PRETRAINING` or `RUN`) begins."""
        self._started[key] = (kind, self.clock())

    def ended(self, key: str, finished: bool = True) -> None:
        """A job ends; its time counts toward its kind's estimate when it `finished`."""
        kind, start = self._started.pop(key)
        if finished:
            self.seconds[kind].append(self.clock() - start)

    @contextlib.contextmanager
    def job(self, kind: str) -> Iterator[None]:
        """One job run in this process, timed; the line first."""
        self.report()
        key = f"{kind}-{len(self._started)}"
        self.started(key, kind)
        finished = False
        try:
            yield
            finished = True
        finally:
            self.ended(key, finished)
