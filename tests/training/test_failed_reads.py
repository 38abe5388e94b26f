"""What a failed checkpoint read leaves on asyncio's logger is dropped; other records are not."""

import asyncio
import gc
import logging
import sys

import pytest

from bert_jax.training import failed_reads


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def asyncio_records():
    logger, records, hook = logging.getLogger("asyncio"), _Records(), sys.unraisablehook
    logger.addHandler(records)
    yield records
    logger.removeHandler(records)
    logger.removeFilter(failed_reads._READ_ERRORS)
    sys.unraisablehook = hook


def _abandon_future_with(error: Exception) -> None:
    """A future whose exception nobody retrieves, garbage-collected: asyncio logs it."""
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        future.set_exception(error)
        del future
        gc.collect()
    finally:
        loop.close()


def test_an_abandoned_tensorstore_read_is_dropped_and_other_errors_are_kept(asyncio_records) -> None:
    # tensorstore's error, raised in C++: no orbax frame names it, only its status code.
    read = ValueError(
        'OUT_OF_RANGE: Error reading "opt_state.mu.kernel/0.0" in OCDBT database at local file '
        '"/w/checkpoints/4/default/": Requested byte range [17593747, 17836548) is not valid'
    )
    with failed_reads.quiet_orbax_reads():
        _abandon_future_with(read)
    _abandon_future_with(read)  # after the attempt too: the future may be collected later
    assert asyncio_records.messages == []
    _abandon_future_with(ValueError("a bug of the run's own"))
    assert len(asyncio_records.messages) == 1
    assert "Future exception was never retrieved" in asyncio_records.messages[0]
