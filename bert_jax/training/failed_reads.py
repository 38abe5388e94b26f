"""A failed checkpoint restore, kept quiet at its source.

When a damaged step is tried and the run falls back to an older one, the fallback is
reported in one warning line (`checkpoints.Checkpointer.restore_latest`); what orbax and
tensorstore print on their way down is not: the error records orbax logs on its read path
(dropped while a restore is tried), asyncio's records of the reading tasks it abandoned,
and the "Event loop is closed" debris its threads leave (dropped from the first attempt
on). Every other record and unraisable error is reported as before.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any


class _FailedReadRecords(logging.Filter):
    """Drops the error records orbax and tensorstore log while a restore attempt fails
    (the attempt's outcome is reported once, in one warning line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR:
            return True
        text = f"{record.pathname} {record.getMessage()}"
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        if any(mark in text for mark in ("/orbax/", "tensorstore", "TensorStore")):
            return False
        # asyncio's record of a reading future abandoned with tensorstore's error: its
        # message holds only the error (an absl status code, then what failed to read),
        # raised in C++ with no Python frame to name orbax.
        return not ("exception was never retrieved" in text and _TENSORSTORE_STATUS.search(text))


# How tensorstore words a failed read: an absl status code, then the error.
_TENSORSTORE_STATUS = re.compile(
    r"\b(OUT_OF_RANGE|DATA_LOSS|NOT_FOUND|FAILED_PRECONDITION|INVALID_ARGUMENT|UNKNOWN|INTERNAL|"
    r"UNAVAILABLE|ABORTED|CANCELLED|DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED|PERMISSION_DENIED): "
)

_READ_ERRORS = _FailedReadRecords()


@contextlib.contextmanager
def quiet_orbax_reads() -> Iterator[None]:
    """Orbax's read-path error records (absl's logger) dropped for the block; asyncio's
    records of its abandoned reading tasks, and its debris (`_drop_restore_debris`),
    dropped from then on."""
    _drop_restore_debris()
    absl_logger = logging.getLogger("absl")
    absl_logger.addFilter(_READ_ERRORS)
    logging.getLogger("asyncio").addFilter(_READ_ERRORS)  # idempotent: the same filter
    try:
        yield
    finally:
        absl_logger.removeFilter(_READ_ERRORS)


def _is_restore_debris(unraisable: Any) -> bool:
    """What a failed orbax restore leaves behind: its reading coroutines, garbage-collected
    with their error unretrieved, and callbacks scheduled on its closed event loop."""
    value, obj = unraisable.exc_value, repr(unraisable.object)
    closed_loop = isinstance(value, RuntimeError) and "Event loop is closed" in str(value)
    return closed_loop or ("coroutine" in obj and "orbax" in repr(getattr(unraisable.object, "cr_code", "")))


def _drop_restore_debris() -> None:
    """From now on, the debris of a failed restore (reported in one warning line) is
    dropped instead of printed as tracebacks; every other unraisable error is reported as
    before. Installed before a restore is tried: tensorstore's reading threads may report
    their closed event loop while the failure is still being raised."""
    previous = sys.unraisablehook
    if getattr(previous, "_bert_jax_quiet", False):
        return

    def hook(unraisable: Any) -> None:
        if not _is_restore_debris(unraisable):
            previous(unraisable)

    hook._bert_jax_quiet = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook


def quiet_restore_debris() -> None:
    """After a restore failed: its coroutines are finalised now, quietly."""
    _drop_restore_debris()
    gc.collect()
