"""Where `plan`'s step times come from: an estimate, at a utilisation assumed or measured.

A step's time is XLA's FLOPs of the step over the chips' peak bf16 FLOP/s times a
utilisation (the share of the peak the step reaches; FLOPs as XLA counts them, remat's
recomputation included). Nothing here runs on a TPU, so the utilisation is one of:

- assumed: ``--mfu``'s default (45%), a figure for a well-fed TPU step of BERT, not
  measured for this config or slice;
- given: ``--mfu=0.38``, the user's figure;
- measured: ``--measured_tokens_per_s``, the tokens/s a run of this config reached on
  this slice in phase 1 (its log's ``tok/s``). Phase 1's step then takes exactly
  batch x sequence / that rate, and the utilisation it implies on XLA's FLOPs carries
  over to the other phases (phase 2's longer sequence costs what its FLOPs say).

The report names which, so a figure is never read as a prediction it is not.
"""

from __future__ import annotations

import dataclasses
import math

ASSUMED, GIVEN, MEASURED = "assumed", "given", "measured"


@dataclasses.dataclass(frozen=True)
class Rate:
    """The utilisation step times are estimated at, and where it comes from."""

    utilization: float  # of the chips' peak bf16 FLOP/s, on XLA's FLOPs of the step
    source: str  # ASSUMED | GIVEN | MEASURED
    measured_tokens_per_s: float = 0.0  # MEASURED: the rate given


def of_mfu(mfu: float, given: bool) -> Rate:
    """`mfu` as the utilisation: the default (`given` False) or the user's figure."""
    if not (math.isfinite(mfu) and 0.0 < mfu <= 1.0):
        raise ValueError(f"--mfu={mfu}: must be a number in (0, 1], the share of the chips' peak")
    return Rate(mfu, GIVEN if given else ASSUMED)


def of_tokens_per_s(tokens_per_s: float, flops_per_step: float, tokens_per_step: int, peak: float) -> Rate:
    """The utilisation a measured phase-1 rate implies: `flops_per_step` (XLA's, all chips)
    done every `tokens_per_step` / `tokens_per_s` seconds on chips of `peak` FLOP/s in all."""
    if not (math.isfinite(tokens_per_s) and tokens_per_s > 0):
        raise ValueError(f"--measured_tokens_per_s={tokens_per_s}: must be a positive number")
    utilization = flops_per_step * tokens_per_s / tokens_per_step / peak
    if utilization > 1.0:
        raise ValueError(
            f"--measured_tokens_per_s={tokens_per_s:g} means {utilization:.0%} of the chips' peak on "
            "this step's FLOPs, more than they have: was it measured with another config or slice?"
        )
    return Rate(utilization, MEASURED, tokens_per_s)


def step_time(flops: float, peak: float, rate: Rate) -> float:
    """Seconds a step of `flops` takes on chips of `peak` FLOP/s in all, at `rate`."""
    return flops / (peak * rate.utilization)


def basis(rate: Rate, chips: int, chip_peak: float) -> str:
    """One line: how the report's times are estimated, and from what."""
    share = f"{rate.utilization:.1%}"
    how = f"XLA's FLOPs / ({chips} chips x {chip_peak / 1e12:g} TFLOP/s bf16 peak x {share})"
    if rate.source == MEASURED:
        return f"{how}; {share} from --measured_tokens_per_s={rate.measured_tokens_per_s:g} in phase 1"
    if rate.source == GIVEN:
        return f"{how}; {share} given (--mfu)"
    return (
        f"{how}; {share} assumed, not measured: give a run's tok/s on this slice "
        "(--measured_tokens_per_s) or its utilisation (--mfu)"
    )
