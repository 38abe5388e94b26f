"""`plan`'s times are estimates at a named utilisation: assumed, given, or from a measured rate.

The arithmetic on its own, then the tiny model's two phases planned for v5e:2x2 (the TPU
compiler, no TPU; seconds a compile): the default's report says "assumed, not measured";
a phase-1 tokens/s given as measured makes phase 1's estimate that rate exactly and
carries its utilisation to phase 2.
"""

import pytest

from bert_jax.commands import run_settings
from bert_jax.pretraining import plan, plan_compile, plan_rate, plan_text
from configs import pretrain

V5E_PEAK = 197e12


def test_the_utilisation_a_measured_rate_implies() -> None:
    # 1e12 FLOPs a step of 1,000 tokens at 100,000 tokens/s: 1e14 FLOP/s of a 4e14 peak.
    rate = plan_rate.of_tokens_per_s(100_000, 1e12, 1_000, 4e14)
    assert rate.source == plan_rate.MEASURED and rate.utilization == pytest.approx(0.25)
    assert plan_rate.step_time(1e12, 4e14, rate) == pytest.approx(1_000 / 100_000)
    assert plan_rate.of_mfu(0.45, given=False) == plan_rate.Rate(0.45, plan_rate.ASSUMED)
    assert plan_rate.of_mfu(0.38, given=True).source == plan_rate.GIVEN


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: plan_rate.of_mfu(0.0, True), r"--mfu=0.0: must be a number in \(0, 1\]"),
        (lambda: plan_rate.of_mfu(1.5, True), r"--mfu=1.5: must be"),
        (lambda: plan_rate.of_tokens_per_s(-5, 1e12, 1_000, 4e14), "must be a positive number"),
        (lambda: plan_rate.of_tokens_per_s(1e6, 1e12, 1_000, 4e14), "250% of the chips' peak"),
    ],
)
def test_an_impossible_utilisation_is_one_line(make, message) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_the_basis_line_names_the_source() -> None:
    chips, peak = 4, V5E_PEAK
    assumed = plan_rate.basis(plan_rate.of_mfu(0.45, False), chips, peak)
    assert assumed.startswith("XLA's FLOPs / (4 chips x 197 TFLOP/s bf16 peak x 45.0%)")
    assert "45.0% assumed, not measured" in assumed and "--measured_tokens_per_s" in assumed
    assert plan_rate.basis(plan_rate.of_mfu(0.38, True), chips, peak).endswith("38.0% given (--mfu)")
    measured = plan_rate.of_tokens_per_s(250_000, 1e13, 32_768, chips * peak)
    assert "from --measured_tokens_per_s=250000 in phase 1" in plan_rate.basis(measured, chips, peak)


@pytest.fixture(scope="module")
def tiny_plans():
    """The tiny model, half its steps at 64 then half at 128, planned twice on v5e:2x2 (each
    step compiled once): at the default utilisation and at a measured rate of half the
    default's phase-1 estimate."""
    c = pretrain.get_config("tiny")
    c.data.source = "synthetic"
    c.model.hidden_dropout_prob = c.model.attention_probs_dropout_prob = 0.0
    c.phase2_fraction, c.phase2_max_seq_length, c.phase2_max_predictions_per_seq = 0.5, 128, 20
    measure, seen = plan_compile.measure, {}

    def remembered(run, where):
        key = (run.max_seq_length, run.max_predictions_per_seq)
        if key not in seen:
            seen[key] = measure(run, where)
        return seen[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plan_compile, "measure", remembered)
        assumed = plan.plan(run_settings.pretrain_settings(c), "v5e:2x2", find_fit=False)
        rate = assumed.phases[0].est_tokens_per_sec / 2
        measured = plan.plan(
            run_settings.pretrain_settings(c), "v5e:2x2", find_fit=False, measured_tokens_per_s=rate
        )
    return assumed, measured, rate


def test_the_default_plan_says_its_times_are_estimates_at_an_assumed_utilisation(tiny_plans) -> None:
    assumed, _, _ = tiny_plans
    assert assumed.mfu_source == plan_rate.ASSUMED and assumed.mfu_assumed == 0.45
    for p in assumed.phases:
        assert p.est_step_time_s == pytest.approx(p.flops_per_step / (4 * V5E_PEAK * 0.45))
    lines = plan_text.format_report(assumed).splitlines()
    (basis,) = [line for line in lines if line.startswith("times from ")]
    assert basis.endswith(assumed.step_time_basis) and "45.0% assumed, not measured" in basis
    steps = [line.split(None, 2)[2] for line in lines if line.startswith("  step time ")]
    assert len(steps) == 2  # each phase's
    assert all(s.startswith("~") and s.endswith("(estimate, 45.0% of peak, assumed)") for s in steps)
    (total,) = [line for line in lines if line.startswith("time for all steps ")]
    assert "~" in total and total.endswith("(20 steps; estimate)")
    assert assumed.to_json()["step_time_basis"] == assumed.step_time_basis


def test_a_measured_rate_sets_phase_1_and_carries_its_utilisation_to_phase_2(tiny_plans) -> None:
    assumed, measured, rate = tiny_plans
    first, second = measured.phases
    assert measured.mfu_source == plan_rate.MEASURED and measured.measured_tokens_per_s == rate
    assert first.est_tokens_per_sec == pytest.approx(rate)
    assert first.est_step_time_s == pytest.approx(measured.global_batch_size * first.max_seq_length / rate)
    assert measured.mfu_assumed == pytest.approx(0.45 / 2)
    # Phase 2: its own FLOPs at the measured utilisation, i.e. twice the assumed estimate.
    assert second.est_step_time_s == pytest.approx(second.flops_per_step / (4 * V5E_PEAK * 0.225))
    assert second.est_step_time_s == pytest.approx(2 * assumed.phases[1].est_step_time_s)
    assert measured.est_total_time_s == pytest.approx(2 * assumed.est_total_time_s)
    text = plan_text.format_report(measured)
    assert f"22.5% from --measured_tokens_per_s={rate:g} in phase 1" in text
    assert text.count("(estimate, 22.5% of peak, measured)") == 2
