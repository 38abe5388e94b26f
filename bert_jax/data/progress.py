"""A long job's progress as whole lines on stdout: how far, how fast, about how long left.

    prepare-data: 1.2 GiB of 4.0 GiB (30%), 412,118 tokens/s, 0:01:40 so far, eta 0:03:53

One line at most every `every` seconds, and the last as the job ends: the same text in a
terminal and in a log file, and a warning printed meanwhile (by this process or by a
worker process) stands on its own line. A redrawn bar (tqdm's) writes its frames with
carriage returns, which a log keeps as one long line, and a warning printed while it is
drawn lands in the middle of it. The training loop's progress lines are of the same kind.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


def human_bytes(n: float) -> str:
    """``805306368`` → ``768 MiB``; binary units up to PiB."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "bytes" or n >= 10 else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:,.0f} PiB"


def format_duration(seconds: float) -> str:
    """``H:MM:SS``; ``?`` for an unknown (NaN) duration."""
    if seconds != seconds:  # NaN
        return "?"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


class ProgressLines:
    """Progress of `total` units of work (``"B"``: bytes, shown in KiB, MiB, ...; otherwise a
    count named by `unit`). `advance(n, tokens=k)` records n more units done (and any
    counts, shown as rates a second); `close()` prints the last line, if any work was
    done since the last one (with `only_if_long`, only for a job that showed a line
    before: a job done within the first interval stays silent). `enabled=False` prints
    nothing."""

    def __init__(
        self,
        what: str,
        total: float,
        unit: str,
        *,
        every: float = 10.0,
        enabled: bool = True,
        only_if_long: bool = False,
        clock: Callable[[], float] = time.monotonic,
        write: Callable[[str], None] | None = None,
    ) -> None:
        self.what, self.total, self.unit, self.every, self.enabled = what, total, unit, every, enabled
        self.only_if_long, self._shown = only_if_long, False
        self._clock = clock
        self._write = write or (lambda line: print(line, flush=True))
        self._start = self._last = clock()
        self.done = 0.0
        self.counts: dict[str, int] = {}
        self._unprinted = False

    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.unit == "B" else f"{n:,.0f}"

    def line(self) -> str:
        elapsed = self._clock() - self._start
        share = f" ({self.done / self.total:.0%})" if self.total else ""
        unit = "" if self.unit == "B" else f" {self.unit}"
        parts = [f"{self.what}: {self._amount(self.done)} of {self._amount(self.total)}{unit}{share}"]
        if elapsed > 0:
            parts += [f"{n / elapsed:,.0f} {name}/s" for name, n in self.counts.items()]
        if self.done >= self.total:
            return ", ".join(parts) + f" in {format_duration(elapsed)}"
        rate = self.done / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else math.nan
        return ", ".join([*parts, f"{format_duration(elapsed)} so far", f"eta {format_duration(left)}"])

    def advance(self, n: float = 1, **counts: int) -> None:
        self.done += n
        for name, k in counts.items():
            self.counts[name] = self.counts.get(name, 0) + k
        self._unprinted = True
        now = self._clock()
        if self.enabled and now - self._last >= self.every and self.done < self.total:
            self._last = now
            self._unprinted, self._shown = False, True
            self._write(self.line())

    def close(self) -> None:
        if self.enabled and self._unprinted and (self._shown or not self.only_if_long):
            self._unprinted = False
            self._write(self.line())
