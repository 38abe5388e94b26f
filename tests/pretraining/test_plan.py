"""`plan`: the real pre-training step compiled ahead of time for TPU topologies (no TPU).

Compile-only; each compile takes about a minute on the 2-core CI machine, so the three
scenarios are three compiles and nothing more.
"""

import json
import subprocess
import sys

import pytest

from bert_jax.model import flops
from bert_jax.model.config import MODEL_PRESETS
from bert_jax.pretraining import plan
from configs import pretrain
from tests.conftest import ROOT

GIB = 1024**3


def _config(preset: str, **overrides):
    config = pretrain.get_config(preset)
    config.data.source = "synthetic"
    for key, value in overrides.items():
        config[key] = value
    return config


def test_base_seq128_batch256_fits_on_v5e_2x2_and_shards_as_the_rules_say() -> None:
    report = plan.plan(_config("base"), "v5e:2x2")
    assert report.num_chips == 4 and report.device_kind == "TPU v5 lite"
    assert report.fits and 0 < report.hbm_per_chip_bytes <= 16 * GIB
    assert report.hbm_capacity_bytes == 16 * GIB
    # BERT-Base's ~110M float32 parameters are split over fsdp=4: ~0.1 GiB per chip, and
    # AdamW's two moments are twice that.
    assert 0.09 * GIB < report.param_bytes < 0.13 * GIB
    assert 1.9 < report.opt_state_bytes / report.param_bytes < 2.1
    # 6 x ~110M params x 32k tokens is ~2e13 FLOPs; the step time follows from the peak.
    assert 1.5e13 < report.flops_per_step < 3e13
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


def test_large_seq512_needs_fsdp(tmp_path) -> None:
    large = dict(max_seq_length=512, max_predictions_per_seq=80, global_batch_size=64, mesh_shape=(1, 1, 1))
    one_chip = plan.plan(_config("large", **large), "v5e:2x2")
    assert one_chip.num_chips == 1
    assert not one_chip.fits and one_chip.hbm_per_chip_bytes > 16 * GIB

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
            "--config.mesh_shape=(1,-1,1)",
            "--topology=v5e:4x4",
            f"--output_json={out}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "fits                      yes" in proc.stdout
    report = json.loads(out.read_text())
    for key in (
        "topology",
        "num_chips",
        "hbm_per_chip_bytes",
        "hbm_capacity_bytes",
        "fits",
        "flops_per_step",
        "est_step_time_s",
        "mfu_assumed",
    ):
        assert key in report
    assert report["topology"] == "v5e:4x4" and report["num_chips"] == 16
    assert report["fits"] and report["hbm_per_chip_bytes"] < one_chip.hbm_per_chip_bytes
