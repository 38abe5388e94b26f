"""`plan --num_slices`: the step compiled ahead of time for several TPU slices joined over
the data-centre network (multislice), no TPU needed. The presets' mesh puts data
parallelism across the slices and fsdp inside each; the tiny model's step compiles on it
in seconds (the real presets' plans are `test_plan.py`'s)."""

import json
import subprocess
import sys

import pytest

from bert_jax.training import sharding
from configs import pretrain
from tests.conftest import ROOT

TINY = [
    "--config=configs/pretrain.py:tiny",
    "--config.model.attention_probs_dropout_prob=0",
]  # no warning line


def test_the_presets_mesh_puts_data_across_slices() -> None:
    pytest.importorskip("libtpu")
    from jax.experimental import topologies

    devices = list(
        topologies.get_topology_desc(platform="tpu", topology_name="v5e:4x4", num_slices=2).devices
    )
    for preset in ("base", "large", "modernbert-base"):
        mesh = sharding.make_mesh(pretrain.get_config(preset).mesh_shape, devices)
        assert dict(mesh.shape) == {"data": 2, "fsdp": 16, "tensor": 1}, preset
        assert [{d.slice_index for d in row.ravel()} for row in mesh.devices] == [{0}, {1}]


def test_a_plan_of_two_slices_compiles_with_data_across_them(tmp_path) -> None:
    pytest.importorskip("libtpu")
    out = tmp_path / "plan.json"
    args = [*TINY, "--config.mesh_shape=(1,-1,1)", "--topology=v5e:2x2"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax",
            "plan",
            *args,
            "--num_slices=2",
            "--nofind_fit",
            f"--output_json={out}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("compiling the step for v5e:2x2 x 2 slices: "), proc.stdout
    assert lines[2] == "topology                   v5e:2x2 x 2 slices (8 chips used, TPU v5 lite)", (
        proc.stdout
    )
    assert lines[3] == "mesh                       data=2 x fsdp=4 x tensor=1"
    report = json.loads(out.read_text())
    assert report["num_slices"] == 2 and report["num_chips"] == 8 and report["devices_used"] == 8
    assert report["mesh_shape"] == {"data": 2, "fsdp": 4, "tensor": 1} and report["fits"]


def test_a_mesh_that_does_not_fit_the_slices_is_one_line_naming_the_key() -> None:
    pytest.importorskip("libtpu")
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "plan", *TINY, "--config.mesh_shape=(1,8,1)", "--topology=v5e:2x2",
         "--num_slices=2", "--nofind_fit"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        "bert-jax plan: error: config.mesh_shape (1, 8, 1): the data axis (1) must be a multiple"
    )
