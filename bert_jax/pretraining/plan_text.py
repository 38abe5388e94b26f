"""`plan`'s report as text: the run, then each phase, then whether and how long it all runs.

Memory and FLOPs are the compiler's; every time is an estimate (``~``, "estimate") at a
utilisation the report names with its source (`plan_rate`: assumed, given or measured).
"""

from __future__ import annotations

from bert_jax.pretraining.plan import GIB, PhasePlan, PlanReport
from bert_jax.pretraining.plan_fit import Trial
from bert_jax.pretraining.settings import step_words


def _bytes(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _setting(t: Trial) -> str:
    return " ".join(f"--config.{k}={v}" for k, v in t.keys.items())


def fit_line(p: PhasePlan) -> str:
    """One line: what makes a phase that does not fit fit (compiled), or that nothing tried did."""
    if p.fix is not None:
        return (
            f"{_setting(p.fix)} fits: {_bytes(p.fix.hbm_per_chip_bytes)} per chip as compiled, "
            f"~{p.fix.est_step_time_s * 1e3:.1f} ms a step (estimate)"
        )
    if not p.searched:
        return "not searched (--nofind_fit)"
    if not p.tried:
        return "nothing to try: the state alone fills the chip; shard it over more chips (mesh_shape)"
    tried = ", ".join(f"{_setting(t)} {_bytes(t.hbm_per_chip_bytes)}" for t in p.tried)
    return f"nothing tried fits ({tried}): use more chips or a smaller global_batch_size"


def _utilization(r: PlanReport) -> str:
    return f"{r.mfu_assumed:.1%} of peak, {r.mfu_source}"


def _phase_rows(p: PhasePlan, r: PlanReport) -> list[tuple[str, str]]:
    step = step_words(
        r.global_batch_size, p.max_seq_length, p.max_predictions_per_seq, p.remat_policy, p.grad_accum_steps
    )
    rows = [
        (f"phase {p.phase}", f"{p.num_steps:,} steps of {step}"),
        ("  activations+temp / chip", _bytes(p.temp_bytes)),
        (
            "  total HBM / chip",
            f"{_bytes(p.hbm_per_chip_bytes)} of {_bytes(r.hbm_capacity_bytes)}: "
            + ("fits" if p.fits else "does NOT fit"),
        ),
    ]
    if not p.fits:
        rows.append(("  to fit", fit_line(p)))
    rows += [
        ("  FLOPs / step", f"{p.flops_per_step:.3e} (all chips)"),
        ("  step time", f"~{p.est_step_time_s * 1e3:.1f} ms (estimate, {_utilization(r)})"),
        ("  tokens / s", f"~{p.est_tokens_per_sec:,.0f} (estimate)"),
        ("  phase time", f"~{_duration(p.est_time_s)} (estimate)"),
    ]
    return rows


def format_report(r: PlanReport) -> str:
    unfit = [str(p.phase) for p in r.phases if not p.fits]
    slices = f" x {r.num_slices} slices" if r.num_slices > 1 else ""
    rows = [
        ("topology", f"{r.topology}{slices} ({r.num_chips} chips used, {r.device_kind})"),
        ("mesh", " x ".join(f"{k}={v}" for k, v in r.mesh_shape.items())),
        ("layers", "scanned (one compiled layer body)" if r.layer_loop == "scan" else "unrolled"),
        ("parameters / chip", _bytes(r.param_bytes)),
        ("optimizer state / chip", _bytes(r.opt_state_bytes)),
    ]
    for p in r.phases:
        rows += _phase_rows(p, r)
    rows += [
        ("fits", "yes, every phase" if r.fits else f"NO (phase {', '.join(unfit)})"),
        ("time for all steps", f"~{_duration(r.est_total_time_s)} ({r.num_train_steps:,} steps; estimate)"),
        ("times from", r.step_time_basis),
        ("FLOPs from", r.flops_source),
        ("compile time", f"{r.compile_time_s:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
