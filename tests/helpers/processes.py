"""Catching a child process at a chosen moment without timing assumptions: poll until a
condition holds, SIGSTOP it there and check the condition again on the stopped process
(nothing it does can change the condition before the next signal). The deadlines only end
a hang: minutes above any wait the work needs, however loaded the machine."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

HANG_S = 300


class Missed(Exception):
    """The moment passed before the process could be stopped in it (the caller retries)."""


def wait_for(predicate: Callable[[], bool], proc: subprocess.Popen, missed: Callable[[], bool] | None = None):
    """Polls until `predicate()`; `Missed` when `missed()` holds or the process ended."""
    deadline = time.time() + HANG_S
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None or (missed is not None and missed()):
            if missed is None:
                raise AssertionError(proc.stdout.read() if proc.stdout else f"exited {proc.returncode}")
            raise Missed
        time.sleep(0.002)
    raise AssertionError("timed out")


def is_stopped(proc: subprocess.Popen) -> bool:
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def stop_when(
    predicate: Callable[[], bool], proc: subprocess.Popen, missed: Callable[[], bool] | None = None
) -> None:
    """SIGSTOPs `proc` at a moment `predicate()` holds, seen again once stopped. With
    `missed` (the moment can no longer come): `Missed` once it holds, the process killed."""
    while True:
        try:
            wait_for(predicate, proc, missed)
        except Missed:
            proc.kill()
            proc.wait()
            raise
        proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: is_stopped(proc), proc)
        if predicate():
            return
        proc.send_signal(signal.SIGCONT)
