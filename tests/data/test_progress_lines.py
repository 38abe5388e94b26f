"""Progress lines of the data jobs: whole lines, at most one per interval, and the last one
as the job ends; how far, how fast, how long so far, about how long left."""

from bert_jax.data.progress import ProgressLines, format_duration, human_bytes
from tests.helpers.fake_clock import FakeClock


def test_lines_at_most_every_interval_then_the_last_with_rates_and_eta() -> None:
    clock, lines = FakeClock(), []
    bar = ProgressLines("prepare-data", 4 * 1024**2, "B", every=10, clock=clock, write=lines.append)
    clock.now += 4
    bar.advance(1024**2, tokens=4_000)  # 4 s in: too soon for a line
    assert lines == []
    clock.now += 6
    bar.advance(1024**2, tokens=6_000)  # 10 s in: half done at 1,000 tokens/s
    assert lines == ["prepare-data: 2.0 MiB of 4.0 MiB (50%), 1,000 tokens/s, 0:00:10 so far, eta 0:00:10"]
    clock.now += 5
    bar.advance(1024**2, tokens=5_000)
    assert len(lines) == 1
    clock.now += 5
    bar.advance(1024**2, tokens=5_000)  # done: the last line waits for close
    assert len(lines) == 1
    bar.close()
    bar.close()  # once
    assert lines[1:] == ["prepare-data: 4.0 MiB of 4.0 MiB (100%), 1,000 tokens/s in 0:00:20"]


def test_counted_units_unknown_eta_and_disabled() -> None:
    clock, lines = FakeClock(), []
    bar = ProgressLines("features", 1_500, "examples", every=0, clock=clock, write=lines.append)
    bar.advance(0)  # no time gone, nothing done: no rate, no ETA yet
    clock.now += 3
    bar.advance(500)
    assert lines == [
        "features: 0 of 1,500 examples (0%), 0:00:00 so far, eta ?",
        "features: 500 of 1,500 examples (33%), 0:00:03 so far, eta 0:00:06",
    ]
    quiet = ProgressLines("features", 2, "examples", enabled=False, write=lines.append)
    quiet.advance(2)
    quiet.close()
    assert len(lines) == 2


def test_amounts_and_durations_as_read() -> None:
    sizes = [human_bytes(n) for n in (512, 3 * 1024**2 // 2, 47 * 1024**4)]
    assert sizes == ["512 bytes", "1.5 MiB", "47 TiB"]
    durations = [format_duration(s) for s in (0, 59.9, 3_725, float("nan"))]
    assert durations == ["0:00:00", "0:00:59", "1:02:05", "?"]


def test_only_if_long_keeps_a_short_job_silent_and_ends_a_long_one() -> None:
    """An evaluation shows lines only when it outlasts one interval: a short one prints
    nothing (its one ``predicting dev: N rows ...`` line is the caller's), a long one its
    lines and then the last."""
    clock, lines = FakeClock(), []
    short = ProgressLines("predicting dev", 8, "rows", clock=clock, write=lines.append, only_if_long=True)
    clock.now += 2
    short.advance(8)
    short.close()
    assert lines == []
    long = ProgressLines("predicting dev", 8, "rows", clock=clock, write=lines.append, only_if_long=True)
    clock.now += 12
    long.advance(4)
    clock.now += 12
    long.advance(4)
    long.close()
    assert lines == [
        "predicting dev: 4 of 8 rows (50%), 0:00:12 so far, eta 0:00:12",
        "predicting dev: 8 of 8 rows (100%) in 0:00:24",
    ]
