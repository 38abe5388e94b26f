"""Reading files ahead into the page cache, for files that are then read at random.

A prepared folder is read by `pread` at random offsets (`records.PreparedSet`). With a
cold page cache (a fresh VM, a restart) every such read waits for the disk, one page at a
time. `warm` asks the kernel to read whole files ahead (``posix_fadvise(WILLNEED)``: large
sequential reads) from a background thread, so opening returns at once and the random
reads find the pages in memory soon after. The pages are the kernel's cache, not the
process's memory: RSS does not grow, and the kernel may evict them under pressure. Files
larger than the budget (by default half the memory available now) are left alone, with
one warning line: reading everything ahead would only evict what was read first.
"""

from __future__ import annotations

import os
import threading


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), or None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_budget() -> int:
    """Half the memory available now (0, reading nothing ahead, where that is unknown)."""
    free = available_bytes()
    return 0 if free is None else free // 2


def warm(paths: list[str], *, budget_bytes: int, what: str) -> threading.Thread | None:
    """Starts reading `paths` ahead, in order, in a daemon thread (returned, or None when
    nothing is read ahead: no files, a budget of 0, no `posix_fadvise`, or over budget)."""
    if not paths or budget_bytes <= 0 or not hasattr(os, "posix_fadvise"):
        return None
    total = sum(os.path.getsize(p) for p in paths)
    if total > budget_bytes:
        print(
            f"warning: {what}: {total / 2**30:.2f} GiB, more than the read-ahead budget of "
            f"{budget_bytes / 2**30:.2f} GiB: read from disk as needed (slower while the page "
            "cache is cold)",
            flush=True,
        )
        return None
    thread = threading.Thread(target=_advise, args=(list(paths),), name="page-cache-warm", daemon=True)
    thread.start()
    return thread


def _advise(paths: list[str]) -> None:
    """``WILLNEED`` on each file in turn; best effort (a file that went away is skipped)."""
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)
