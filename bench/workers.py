"""The benchmarks' subprocess protocol: each contender runs in its own process (so one
library's threads and allocator do not slow another's) and prints one ``RESULT <json>``
line; the parent reads it back with `run`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "RESULT "


class WorkerFailed(RuntimeError):
    """A worker exited with an error or printed no result line."""


def report(result: Any) -> None:
    """Prints a worker's result as its one ``RESULT`` line."""
    print(PREFIX + json.dumps(result), flush=True)


def run(argv: list[str], *, env: dict[str, str] | None = None, what: str = "worker") -> Any:
    """Runs one worker process (from the repository's root) and returns its result;
    `WorkerFailed` carries the end of its error output."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(PREFIX)]
    if proc.returncode or not lines:
        raise WorkerFailed(f"{what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(lines[0][len(PREFIX) :])
