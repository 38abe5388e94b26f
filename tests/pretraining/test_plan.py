"""`plan`: every phase's pre-training step compiled ahead of time for TPU topologies (no TPU).

Compile-only. A compile that fits takes one to two minutes on the 2-core CI machine (one
the TPU compiler refuses for memory a few seconds), so the module compiles each distinct
step once: BERT-Base's two phases on v5e:2x2 (shared by the tests through a module
fixture and a cache of identical step programs), and BERT-Large at sequence 512.
"""

import dataclasses
import json
import subprocess
import sys

import pytest

from bert_jax.commands import run_settings
from bert_jax.model import flops
from bert_jax.model.config import MODEL_PRESETS
from bert_jax.pretraining import plan, plan_compile, plan_text
from configs import pretrain
from tests.conftest import ROOT

GIB = 1024**3


def _config(preset: str, **overrides):
    config = pretrain.get_config(preset)
    config.data.source = "synthetic"
    for key, value in overrides.items():
        config[key] = value
    return config


def _program_key(run, where) -> str:
    """What the compiled step depends on: the typed run without the phase fields and the
    config as written (`Pretraining` reads neither; the planner has already set the step's
    shapes and settings)."""
    c = dataclasses.asdict(run)
    for key in [k for k in c if k.startswith("phase2_") or k == "config"]:
        del c[key]
    return json.dumps([c, where.topology_name], sort_keys=True, default=str)


@pytest.fixture(scope="module")
def compiles():
    """`plan_compile.measure` remembered per program for this module's plans: two plans of
    the same steps compile them once. Counts the real compiles."""
    measure, seen, count = plan_compile.measure, {}, {"compiled": 0}

    def remembered(run, where):
        key = _program_key(run, where)
        if key not in seen:
            count["compiled"] += 1
            seen[key] = measure(run, where)
        return seen[key]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plan_compile, "measure", remembered)
        yield count


@pytest.fixture(scope="module")
def base(compiles):
    """The `base` preset on v5e:2x2 as it is (phase 2 in its preset's micro-batches)."""
    return plan.plan(run_settings.pretrain_settings(_config("base")), "v5e:2x2")


@pytest.fixture(scope="module")
def base_phase2_whole(base, compiles):
    """`base` with phase 2's batch in one piece: it does not fit; the search finds what does."""
    return plan.plan(run_settings.pretrain_settings(_config("base", phase2_grad_accum_steps=1)), "v5e:2x2")


def test_base_phase1_fits_on_v5e_2x2_and_shards_as_the_rules_say(base) -> None:
    report = base
    assert report.num_chips == 4 and report.device_kind == "TPU v5 lite"
    assert report.hbm_capacity_bytes == 16 * GIB
    first = report.phases[0]
    assert (first.max_seq_length, first.num_steps, first.grad_accum_steps) == (128, 900_000, 1)
    assert first.fits and 0 < first.hbm_per_chip_bytes <= 16 * GIB
    # BERT-Base's ~110M float32 parameters are split over fsdp=4: ~0.1 GiB per chip, and
    # AdamW's two moments are twice that.
    assert 0.09 * GIB < report.param_bytes < 0.13 * GIB
    assert 1.9 < report.opt_state_bytes / report.param_bytes < 2.1
    # 6 x ~110M params x 32k tokens is ~2e13 FLOPs; the step time follows from the peak.
    assert 1.5e13 < report.flops_per_step < 3e13 and report.flops_per_step == first.flops_per_step
    # XLA's count agrees with the analytic matmul count of the same step (within 5%).
    analytic = flops.model_flops_per_step(MODEL_PRESETS["base"], 256, 128, 20)
    assert report.flops_per_step == pytest.approx(analytic, rel=0.05)
    expected_time = report.flops_per_step / (4 * 197e12 * report.mfu_assumed)
    assert report.est_step_time_s == pytest.approx(expected_time)
    # Compiled shardings follow the logical-axis rules: embed -> fsdp, heads -> tensor.
    specs = report.param_shardings
    assert specs["bert/embeddings/word_embeddings/embedding"] == ["tensor", "fsdp"]
    query = specs["bert/encoder/layers/layer/attention/query/kernel"]
    assert query == [None, "fsdp", "tensor", None]  # [layers, embed, heads, kv]


def test_base_phase2_at_512_fits_on_v5e_2x2_in_the_presets_micro_batches(base) -> None:
    assert [p.phase for p in base.phases] == [1, 2]
    second = base.phases[1]
    assert (second.first_step, second.num_steps) == (900_000, 100_000)
    assert (second.max_seq_length, second.max_predictions_per_seq) == (512, 80)
    assert (second.remat_policy, second.grad_accum_steps) == ("none", 4)
    assert second.fits and second.hbm_per_chip_bytes <= 16 * GIB and not second.tried
    assert second.hbm_per_chip_bytes > base.phases[0].hbm_per_chip_bytes  # 4x the length
    # The micro-batches change memory, not work: the whole batch's FLOPs (within 5% of the
    # analytic count at sequence 512), so the step takes ~4.3x phase 1's.
    analytic = flops.model_flops_per_step(MODEL_PRESETS["base"], 256, 512, 80)
    assert second.flops_per_step == pytest.approx(analytic, rel=0.05)
    assert second.est_step_time_s == pytest.approx(second.flops_per_step / (4 * 197e12 * 0.45))
    # The whole run: fits because both phases do; the time is the phases' sum.
    assert base.fits
    assert base.hbm_per_chip_bytes == second.hbm_per_chip_bytes  # the larger phase's
    for p in base.phases:
        assert p.est_time_s == pytest.approx(p.est_step_time_s * p.num_steps)
    assert base.est_total_time_s == pytest.approx(sum(p.est_time_s for p in base.phases))
    assert sum(p.num_steps for p in base.phases) == base.num_train_steps


def test_a_phase_that_does_not_fit_fails_the_run_and_gets_a_compiled_fix(
    base, base_phase2_whole, compiles
) -> None:
    report = base_phase2_whole
    first, second = report.phases
    assert first.fits and not second.fits and not report.fits
    assert second.grad_accum_steps == 1 and second.hbm_per_chip_bytes > 16 * GIB
    assert report.hbm_per_chip_bytes == second.hbm_per_chip_bytes
    assert report.est_total_time_s == pytest.approx(first.est_time_s + second.est_time_s)
    # The search's first candidate is the smallest accumulation the compiler's figure
    # suggests; compiled, it fits, and it is the preset's own phase-2 setting.
    assert second.searched and second.fix is not None and second.fix is second.tried[-1] and second.fix.fits
    assert second.fix.keys == {"phase2_grad_accum_steps": pretrain.get_config("base").phase2_grad_accum_steps}
    assert second.fix.hbm_per_chip_bytes == base.phases[1].hbm_per_chip_bytes <= 16 * GIB
    assert second.fix.est_step_time_s == pytest.approx(second.est_step_time_s)
    # Both plans together compiled three programs: phase 1, phase 2 whole (refused) and
    # phase 2 in four micro-batches.
    assert compiles["compiled"] == 3
    text = plan_text.format_report(report)
    assert "does NOT fit" in text and "NO (phase 2)" in text
    assert report.layer_loop == "scan" and "\nlayers " in text and "scanned" in text  # `auto` on a TPU
    assert "to fit  " in text and "--config.phase2_grad_accum_steps=4 fits: " in text
    as_json = json.loads(json.dumps(report.to_json()))
    assert as_json["phases"][1]["fix"]["keys"] == second.fix.keys and as_json["fits"] is False


def test_large_seq512_needs_fsdp(tmp_path) -> None:
    large = dict(
        max_seq_length=512,
        max_predictions_per_seq=80,
        global_batch_size=64,
        mesh_shape=(1, 1, 1),
        phase2_fraction=0.0,
    )
    one_chip = plan.plan(run_settings.pretrain_settings(_config("large", **large)), "v5e:2x2", find_fit=False)
    assert one_chip.num_chips == 1 and len(one_chip.phases) == 1
    assert not one_chip.fits and one_chip.hbm_per_chip_bytes > 16 * GIB
    assert not one_chip.phases[0].searched and not one_chip.phases[0].tried  # none asked for
    text = plan_text.format_report(one_chip)
    assert "does NOT fit" in text and "not searched (--nofind_fit)" in text

    out = tmp_path / "plan.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax",
            "plan",
            "--config=configs/pretrain.py:large",
            "--config.data.source=synthetic",
            "--config.max_seq_length=512",
            "--config.max_predictions_per_seq=80",
            "--config.global_batch_size=64",
            "--config.phase2_fraction=0",
            "--config.mesh_shape=(1,-1,1)",
            "--topology=v5e:4x4",
            f"--output_json={out}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fits                       yes, every phase" in proc.stdout
    report = json.loads(out.read_text())
    for key in (
        "topology",
        "num_chips",
        "hbm_per_chip_bytes",
        "hbm_capacity_bytes",
        "fits",
        "flops_per_step",
        "est_step_time_s",
        "est_total_time_s",
        "mfu_assumed",
        "phases",
    ):
        assert key in report
    assert report["topology"] == "v5e:4x4" and report["num_chips"] == 16
    assert report["fits"] and report["hbm_per_chip_bytes"] < one_chip.hbm_per_chip_bytes
    (phase,) = report["phases"]
    assert phase["fits"] and phase["max_seq_length"] == 512 and phase["num_steps"] == 1_000_000
    assert report["est_total_time_s"] == pytest.approx(phase["est_time_s"])


def test_plan_refuses_a_bad_phase2_setting_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"config\.phase2_grad_accum_steps=3 must split"):
        plan.plan(run_settings.pretrain_settings(_config("base", phase2_grad_accum_steps=3)), "v5e:2x2")
