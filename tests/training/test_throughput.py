"""MFU's denominator on a CPU is measured, and a measurement taken while other work held
the cores is low: a window that trains above it measures again, keeps the higher, and
leaves the measurement out of the training time."""

from bert_jax.training import throughput
from bert_jax.training.throughput import Throughput
from tests.helpers.fake_clock import FakeClock


def test_a_window_above_a_measured_peak_measures_again() -> None:
    clock, measured = FakeClock(), []

    def remeasure() -> float:
        clock.now += 3.0  # the measurement takes time: not training time
        measured.append(400.0)
        return 400.0

    meter = Throughput(clock, 100.0, remeasure)
    meter.add(tokens=10, flops=100.0)
    clock.now += 2.0  # 50 FLOP/s: under the peak, nothing measured
    assert meter.read() == {"tokens_per_sec": 5.0, "mfu": 0.5} and not measured
    meter.add(tokens=10, flops=400.0)
    clock.now += 2.0  # 200 FLOP/s: above the peak of 100 (which would read 200% MFU)
    assert meter.read() == {"tokens_per_sec": 5.0, "mfu": 0.5} and measured == [400.0]
    assert meter.peak_flops == 400.0
    meter.add(tokens=10, flops=400.0)
    clock.now += 1.0  # the window after: one second, the measurement's three left out
    assert meter.read() == {"tokens_per_sec": 10.0, "mfu": 1.0}
    assert meter.seconds_per_step == 5.0 / 3


def test_a_table_peak_is_never_measured_again() -> None:
    clock = FakeClock()
    meter = Throughput(clock, 100.0)
    meter.add(tokens=1, flops=300.0)
    clock.now += 1.0
    assert meter.read()["mfu"] == 3.0  # a table's peak is the chip's: shown as it is


def test_the_cpu_peak_kept_is_the_highest_measured() -> None:
    first = throughput.measure_cpu_peak()
    throughput._CPU_PEAK[:] = [first * 10]  # as if measured on an idle machine before
    assert throughput.measure_cpu_peak() == first * 10 == throughput.device_peak_flops()
    throughput._CPU_PEAK[:] = []
    assert 0 < throughput.measure_cpu_peak() < first * 10
