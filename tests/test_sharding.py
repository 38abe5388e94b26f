"""Same losses on every mesh; parameters sharded as the rules say; restore onto other meshes.

Runs in a subprocess with 8 virtual CPU devices (this pytest process keeps one).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bert_jax import sharding

HELPER = Path(__file__).parent / "helpers" / "sharded_run.py"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ckpt")
    proc = subprocess.run(
        [sys.executable, str(HELPER), str(workdir)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_same_losses_on_every_mesh(result) -> None:
    losses = result["losses"]
    reference = losses["1x1x1"]
    assert len(reference) == 3 and all(x > 0 for x in reference)
    for mesh in ("8x1x1", "2x4x1", "2x2x2"):
        assert losses[mesh] == pytest.approx(reference, rel=1e-5), mesh


def test_parameters_are_sharded_by_the_rules(result) -> None:
    specs = result["specs"]
    assert specs["word_embeddings"] == ["tensor", "fsdp"]  # (vocab, embed)
    assert specs["query_kernel"] == ["fsdp", "tensor", None]  # (embed, heads, kv)
    assert specs["intermediate_kernel"] == ["fsdp", "tensor"]  # (embed, mlp)
    assert specs["layer_norm_scale"] in ([None], [])  # replicated
    # tiny: hidden 128, 2 heads of 64: each device holds 128/2 x 2/2 x 64.
    assert specs["query_shard_shape"] == [64, 1, 64]


def test_checkpoint_restores_onto_another_mesh(result) -> None:
    for mesh, n in (("8x1x1", 8), ("1x1x1", 1)):
        got = result["restored"][mesh]
        assert got["equal"] and got["step"] == 3 and got["num_devices"] == n


def test_mesh_shape_errors_name_the_problem() -> None:
    import jax

    with pytest.raises(ValueError, match="needs 4 devices"):
        sharding.make_mesh((2, 2, 1), jax.devices()[:1])
    with pytest.raises(ValueError, match="3 entries"):
        sharding.make_mesh((1, 1), jax.devices()[:1])
