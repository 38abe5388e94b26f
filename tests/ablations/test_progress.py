"""A table's progress line: jobs done of each kind (read from disk) and what is left,
estimated from this invocation's own jobs, over the processes running at once."""

from __future__ import annotations

import pytest

from bert_jax.ablations import progress
from tests.helpers.fake_clock import FakeClock


def test_the_estimate_is_each_kinds_mean_times_what_is_left_over_the_processes() -> None:
    clock, lines = FakeClock(), []
    work = {"now": progress.Work(0, 2, 0, 6)}
    tracker = progress.TableProgress("table6", lambda: work["now"], clock=clock, say=lines.append)
    with tracker.job(progress.PRETRAINING):
        clock.now += 600.0
    work["now"] = progress.Work(1, 2, 0, 6)
    # A kind that is left but has no finished job here: no estimate yet.
    assert tracker.line() == (
        "== table6: 1 of 2 pre-trainings, 0 of 6 fine-tuning runs done; 0:10:00 so far, about ? left"
    )
    with tracker.job(progress.RUN):
        clock.now += 30.0
    with tracker.job(progress.RUN):
        clock.now += 90.0
    work["now"] = progress.Work(1, 2, 2, 6)
    # 1 pre-training x 600 s + 4 runs x 60 s.
    assert tracker.line().endswith("2 of 6 fine-tuning runs done; 0:12:00 so far, about 0:14:00 left")
    assert lines[0] == (
        "== table6: 0 of 2 pre-trainings, 0 of 6 fine-tuning runs done; 0:00:00 so far, about ? left"
    )
    assert len(lines) == 3  # one as each job started
    # Two processes at once: half the time, but no sooner than the longest job left.
    two = progress.TableProgress("t", lambda: work["now"], processes=2, clock=clock, say=lines.append)
    two.seconds = tracker.seconds
    assert two.line().endswith("about 0:10:00 left")  # the pre-training alone; the runs beside it
    work["now"] = progress.Work(2, 2, 2, 6)
    assert two.line().endswith("about 0:02:00 left")  # 4 runs x 60 s over two
    work["now"] = progress.Work(2, 2, 5, 6)  # one run left
    assert two.line().endswith("about 0:01:00 left") and tracker.line().endswith("about 0:01:00 left")
    # Nothing left: nothing to estimate.
    work["now"] = progress.Work(2, 2, 6, 6)
    assert tracker.line().endswith("about 0:00:00 left")


def test_a_job_that_fails_or_stops_does_not_count_toward_the_estimate() -> None:
    clock = FakeClock()
    tracker = progress.TableProgress("t", lambda: progress.Work(0, 1, 0, 1), clock=clock, say=lambda _: None)
    with pytest.raises(RuntimeError), tracker.job(progress.RUN):
        clock.now += 5.0
        raise RuntimeError("boom")
    tracker.started("pretrain--a", progress.PRETRAINING)
    tracker.ended("pretrain--a", finished=False)
    assert tracker.seconds == {progress.PRETRAINING: [], progress.RUN: []}
    assert tracker.line().endswith("about ? left")
