"""The job's status on a slice (or several) from every worker's line: the worst one wins.

Every worker prints ``NODE worker W: STATUS`` (`pod_commands.job_status_command`). A job
runs only while every worker's loop runs; one worker whose job failed, whose loop is gone
or that does not answer decides what the supervisor does, and is named in its lines. A
worker that finished (``exited 0``) while others still run is waited for.
"""

from __future__ import annotations

import dataclasses
import re

WORKER_LINE = re.compile(r"^(\S+ worker [^\s:]+): (.*)$")
UNREACHABLE = "unreachable"  # a worker that did not answer
# Worst first; a status not listed (or unreadable) counts as `lost`.
_ORDER = ("stopped", "lost", "none", UNREACHABLE, "running", "exited 0")


def rank(status: str) -> int:
    """0 is the worst: a failure (`failed N ...`, or a loop's other exit), then the rest."""
    if status.startswith("failed ") or (status.startswith("exited ") and status != "exited 0"):
        return 0
    return 1 + _ORDER.index(status if status in _ORDER else "lost")


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """The worst status and the worker that has it ('' when the answer names none), every
    answering worker's status, and how many workers did not answer."""

    status: str
    worker: str
    workers: dict[str, str]
    missing: int = 0

    def summary(self) -> str:
        """One line: the worst status and where, and how many workers say what."""
        counts: dict[str, int] = {UNREACHABLE: self.missing} if self.missing else {}
        for status in self.workers.values():
            counts[status] = counts.get(status, 0) + 1
        n = sum(counts.values())
        if len(counts) == 1:
            return f"{self.status} on {self.worker}" if n == 1 else f"{self.status} on all {n} workers"
        others = ", ".join(f"{s}: {k}" for s, k in sorted(counts.items(), key=lambda x: rank(x[0])))
        return f"{self.status} on {self.worker} (of {n} workers, {others})"

    def named(self) -> str:
        """The worst status with its worker, for a line that acts on it."""
        return f"{self.worker}: job {self.status}" if self.worker else f"job {self.status}"


def read(output: str, expected: int) -> JobStatus:
    """The workers' lines (`output`) read as one status; `expected` workers should answer.
    Output without worker lines (an older or a hand-made status command) is one worker's
    status: its last line."""
    workers = {}
    for line in output.splitlines():
        match = WORKER_LINE.match(line.strip())
        if match:
            workers[match.group(1)] = match.group(2).strip()
    if not workers:
        lines = [line.strip() for line in output.splitlines() if line.strip()]
        if lines:
            return JobStatus(lines[-1], "", {"": lines[-1]})
        return JobStatus(UNREACHABLE, f"all {expected} workers", {}, missing=expected)
    missing = max(0, expected - len(workers))
    worker = min(workers, key=lambda w: (rank(workers[w]), w))
    if missing and rank(UNREACHABLE) < rank(workers[worker]):
        return JobStatus(UNREACHABLE, f"{missing} of {expected} workers", workers, missing)
    return JobStatus(workers[worker], worker, workers, missing)
