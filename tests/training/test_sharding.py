"""Same losses on every mesh; parameters sharded as the rules say; restore onto other meshes.

Runs in a subprocess with 8 virtual CPU devices (this pytest process keeps one).
"""

import subprocess
import sys

import pytest

from bert_jax.training import sharding
from tests.conftest import ROOT
from tests.helpers import results

HELPER = ROOT / "tests" / "helpers" / "sharded_run.py"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ckpt")
    proc = subprocess.run(
        [sys.executable, str(HELPER), str(workdir)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results.parse(proc.stdout)


def test_same_losses_on_every_mesh(result) -> None:
    losses = result["losses"]
    reference = losses["1x1x1"]
    assert len(reference) == 3 and all(x > 0 for x in reference)
    for mesh in ("8x1x1", "2x4x1", "2x2x2", "1x1x8"):
        assert losses[mesh] == pytest.approx(reference, rel=1e-5), mesh
    # BERT's 30522-row vocabulary, padded to 30592, splits 8 ways over the tensor axis.
    assert result["tensor8_word_shard"] == [30592 // 8, 128]


def test_parameters_are_sharded_by_the_rules(result) -> None:
    specs = result["specs"]
    assert specs["word_embeddings"] == ["tensor", "fsdp"]  # (vocab, embed)
    assert specs["query_kernel"] == ["fsdp", "tensor", None]  # (embed, heads, kv)
    assert specs["intermediate_kernel"] == ["fsdp", "tensor"]  # (embed, mlp)
    assert specs["layer_norm_scale"] in ([None], [])  # replicated
    # hidden 128, 8 heads of 16: each device holds 128/2 x 8/2 x 16.
    assert specs["query_shard_shape"] == [64, 4, 16]
    # Rules overridden from the config: ("embed", None) leaves the hidden axis whole.
    assert result["override_spec"][0] == "tensor" and result["override_spec"][1] in ("None", "")


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


VOCAB_HELPER = ROOT / "tests" / "helpers" / "vocab_tensor_parallel.py"


@pytest.fixture(scope="module")
def vocab_result(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("vocab_ckpt")
    proc = subprocess.run(
        [sys.executable, str(VOCAB_HELPER), str(workdir)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return results.parse(proc.stdout)


def test_padded_vocabulary_shards_over_tensor_4_and_8(vocab_result) -> None:
    """vocab_size=30522 padded to 30592: initialised in its shards on (2,1,4) and (1,1,8),
    with the same initial values, loss and gradients as the data-parallel (8,1,1) mesh."""
    got = vocab_result["pretraining"]
    reference = got["8x1x1"]
    for mesh, tensor in (("2x1x4", 4), ("1x1x8", 8)):
        res = got[mesh]
        assert res["word_spec"] == ["tensor", "fsdp"], mesh
        assert res["word_local"] == [30592 // tensor, 64] and res["bias_local"] == [30592 // tensor], mesh
        assert res["init_max_diff"] == 0.0, mesh
        assert res["loss"] == pytest.approx(reference["loss"], rel=1e-5), mesh
        assert res["grad_max_diff"] < 1e-5 and res["padding_grad"] == 0.0, mesh
    error = got["unpadded_error"]
    assert error.startswith("parameter bert/embeddings/word_embeddings/embedding (30522, 64): dimension 0")
    assert "(logical axis 'vocab', size 30522) does not divide over mesh axes tensor" in error


def test_unpadded_checkpoint_restores_onto_a_padded_tensor_4_mesh(vocab_result) -> None:
    got = vocab_result["pretraining"]["restore"]
    assert got["shape"] == [30592, 64] and got["word_spec"] == ["tensor", "fsdp"]
    assert got["real_rows_equal"] and got["padding_zero"] and got["others_equal"]


def test_minilm_fine_tunes_on_a_tensor_4_mesh(vocab_result) -> None:
    """The bundled checkpoint loaded with vocab_pad_multiple=128: a classifier step on
    (2,1,4) equals the one on (8,1,1)."""
    got = vocab_result["minilm"]
    assert got["padded_vocab"] == 30592 and got["2x1x4"]["word_local"] == [30592 // 4, 384]
    assert got["2x1x4"]["loss"] == pytest.approx(got["8x1x1"]["loss"], rel=1e-5)
    assert got["2x1x4"]["grad_max_diff"] < 1e-5


def test_rules_with_overrides_replace_or_add() -> None:
    rules = sharding.rules_with_overrides({"embed": None, "vocab": ("fsdp", "tensor"), "new_axis": "data"})
    table = dict(rules)
    assert table["embed"] is None and table["vocab"] == ("fsdp", "tensor") and table["new_axis"] == "data"
    assert [name for name, _ in rules][: len(sharding.LOGICAL_AXIS_RULES)] == [
        name for name, _ in sharding.LOGICAL_AXIS_RULES
    ]  # replaced in place, new ones at the end
    assert table["heads"] == "tensor"  # untouched
    # The form a run config holds (pairs), with "none" and comma-separated names.
    pairs = sharding.rules_with_overrides((("embed", "none"), ("activation_batch", "data,fsdp")))
    assert dict(pairs)["embed"] is None and dict(pairs)["activation_batch"] == ("data", "fsdp")
    assert (
        sharding.rules_with_overrides(())
        == sharding.rules_with_overrides(None)
        == sharding.LOGICAL_AXIS_RULES
    )
    with pytest.raises(ValueError, match=r"sharding rule 'vocab': unknown mesh axis 'model', 'x'"):
        sharding.rules_with_overrides({"vocab": ("model", "tensor", "x")})
    with pytest.raises(ValueError, match=r"not a \(logical name, mesh axes\) pair"):
        sharding.rules_with_overrides((("vocab",),))


def _abstract_pretraining(config):
    import jax
    import jax.numpy as jnp

    from bert_jax.model.heads import BertForPreTraining

    ids = jnp.zeros((1, 8), jnp.int32)
    init = lambda: BertForPreTraining(config).init(jax.random.key(0), ids, ids, ids, ids[:, :2])
    return jax.eval_shape(init)["params"]


def test_check_param_sharding_names_the_parameter() -> None:
    """On abstract meshes (no devices needed): BERT-Base fits tensor=4 once its vocabulary
    is padded; tensor=8 fails on its 12 heads unless the rules shard head_dim instead."""
    from jax.sharding import AbstractMesh

    from bert_jax.model.config import MODEL_PRESETS

    base = MODEL_PRESETS["base"]
    tensor4 = AbstractMesh((2, 1, 4), sharding.MESH_AXES)
    tensor8 = AbstractMesh((1, 1, 8), sharding.MESH_AXES)
    with pytest.raises(
        ValueError,
        match=r"^parameter bert/embeddings/word_embeddings/embedding \(30522, 768\): dimension 0 "
        r"\(logical axis 'vocab', size 30522\) does not divide over mesh axes tensor \(4 devices; "
        r"mesh data=2, fsdp=1, tensor=4\); see vocab_pad_multiple",
    ):
        sharding.check_param_sharding(_abstract_pretraining(base), tensor4)
    padded = _abstract_pretraining(base.replace(vocab_pad_multiple=128))
    sharding.check_param_sharding(padded, tensor4)
    with pytest.raises(
        ValueError,
        match=r"layer_0/attention/key/bias \(12, 64\): dimension 0 \(logical axis 'heads', size 12\)",
    ):
        sharding.check_param_sharding(padded, tensor8)
    sharding.check_param_sharding(
        padded, tensor8, sharding.rules_with_overrides({"heads": None, "kv": "tensor"})
    )
    no_kv = [rule for rule in sharding.LOGICAL_AXIS_RULES if rule[0] != "kv"]
    with pytest.raises(
        ValueError, match=r"key/bias \(12, 64\): logical axis 'kv' \(dimension 1, size 64\) matches no"
    ):
        sharding.check_param_sharding(padded, tensor4, no_kv)
