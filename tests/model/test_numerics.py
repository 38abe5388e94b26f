"""How a run computes (`Numerics`) is the run's, never the model's: `bert_config.json`
describes the model alone, a checkpoint written on CPU gets a TPU's choices when its next run
is on a TPU, and `features` computes in float32 unless asked."""

import json

import jax
import numpy as np
import pytest

from bert_jax.commands import run_settings
from bert_jax.model import features
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.numerics import LEGACY_MODEL_KEYS, Numerics
from bert_jax.pretraining import plan_compile, pretrain
from bert_jax.training import sharding
from tests.conftest import tiny_pretraining


def _tiny_run(**overrides):
    return tiny_pretraining(
        global_batch_size=8,
        num_train_steps=2,
        eval_every_steps=0,
        checkpoint_every_steps=0,
        async_checkpointing=False,
        **overrides,
    )


def test_platform_decides_auto_and_nothing_else() -> None:
    auto = Numerics(compute_dtype="bfloat16")
    assert auto.for_platform("cpu").weight_grad_matmul == "transposed_copy_wide"
    assert auto.for_platform("tpu").weight_grad_matmul == "direct"
    assert auto.for_platform("gpu") == auto.replace(
        weight_grad_matmul="direct", bias_grad="sum", layer_loop="unroll"
    )
    # Bias gradients: a reduction XLA:GPU fuses; a mat-vec elsewhere (and before a decision).
    assert [auto.for_platform(p).bias_grad_form for p in ("tpu", "gpu", "cpu")] == ["matvec", "sum", "matvec"]
    assert auto.bias_grad_form == "matvec"
    # Layers: scanned on a TPU (compile time on a pod), unrolled elsewhere (the faster step).
    assert [auto.for_platform(p).scanned for p in ("tpu", "gpu", "cpu")] == [True, False, False]
    assert not auto.scanned  # undecided: unrolled, as inference and conversion build models
    chosen = Numerics(weight_grad_matmul="transposed_copy", bias_grad="sum", layer_loop="unroll")
    assert chosen.for_platform("tpu") is chosen
    # Narrow layers keep the direct form under "transposed_copy_wide".
    wide = Numerics(weight_grad_matmul="transposed_copy_wide")
    assert (wide.weight_grad(128, 512), wide.weight_grad(512, 2048, "copy_g")) == ("direct", "copy_g")
    with pytest.raises(ValueError, match="compute_dtype='fp8'"):
        Numerics(compute_dtype="fp8")


def test_old_model_files_with_run_numerics_still_load() -> None:
    saved = {**BertConfig(hidden_size=128, num_attention_heads=2).to_dict()}
    assert not set(saved) & set(LEGACY_MODEL_KEYS)
    saved.update(
        dtype="bfloat16",
        remat_policy="full",
        weight_grad_matmul="transposed_copy_wide",
        dropout_rng="hash",
        scan_layers=True,  # a field of the model before it became `Numerics.layer_loop`
    )
    assert BertConfig.from_dict(saved) == BertConfig(hidden_size=128, num_attention_heads=2)


def test_a_cpu_checkpoint_gets_the_tpus_numerics(tmp_path) -> None:
    cpu = _tiny_run(compute_dtype="float32")
    run_settings.pretrain(cpu, str(tmp_path))
    saved = json.loads((tmp_path / "bert_config.json").read_text())
    # The model alone reaches disk, and the layer loop its checkpoints hold.
    assert set(saved) & set(LEGACY_MODEL_KEYS) == {"scan_layers"}, saved
    cpu_run = pretrain.Pretraining(
        run_settings.pretrain_settings(cpu), sharding.make_mesh((1, 1, 1), jax.devices("cpu")[:1])
    )
    assert cpu_run.numerics.weight_grad_matmul == "transposed_copy_wide"

    # The next run is on a TPU slice in bfloat16 with remat: the model from the workdir, the
    # numerics from the run and the platform.
    tpu = _tiny_run(compute_dtype="bfloat16", remat_policy="full")
    tpu.model.update({k: v for k, v in saved.items() if k in tpu.model})
    tpu.mesh_shape = (4, 1, 1)
    mesh = sharding.make_mesh((4, 1, 1), plan_compile.topology_devices("v5e:2x2"))
    run = pretrain.Pretraining(run_settings.pretrain_settings(tpu), mesh)
    assert run.model_config == cpu_run.model_config
    # (The layers scanned, the TPU's choice: a resumed run would keep the workdir's
    # unrolled ones, `test_pretrain`'s layer-loop test.)
    assert run.numerics == Numerics(
        compute_dtype="bfloat16",
        remat_policy="full",
        weight_grad_matmul="direct",
        bias_grad="matvec",
        layer_loop="scan",
    )
    with jax.set_mesh(mesh):
        compiled = run.train_step.lower(run.abstract_state, run.abstract_batch(8, 32, 5)).compile()
    hlo = compiled.as_text()
    assert "bf16" in hlo and compiled.memory_analysis() is not None


def test_features_compute_in_float32_unless_asked() -> None:
    config = BertConfig(
        vocab_size=99, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128
    )
    ids = np.random.default_rng(0).integers(1, 99, size=(2, 16)).astype(np.int32)
    batch = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
    params = BertModel(config).init(jax.random.key(0), ids)["params"]
    params = jax.tree.map(np.asarray, params)
    default = features.extract(params, config, batch, [-1])
    as_float32 = features.extract(params, config, batch, [-1], numerics=Numerics(compute_dtype="float32"))
    in_bf16 = features.extract(params, config, batch, [-1], numerics=Numerics(compute_dtype="bfloat16"))
    np.testing.assert_array_equal(default, as_float32)
    assert default.dtype == in_bf16.dtype == np.float32
    assert 1e-4 < np.abs(default - in_bf16).max() < 0.5  # bf16 was computed, and is close


def test_embedding_gradient_is_scattered_in_the_parameter_dtype() -> None:
    """A bfloat16 run gathers rows of the float32 tables and casts them: the lookup's
    gradient is a float32 scatter-add (a bfloat16 one took half a BERT-Base step on a GPU)."""
    from bert_jax.model.embeddings import BertEmbeddings
    from tests.helpers.task_data import TINY

    module = BertEmbeddings(TINY, Numerics(compute_dtype="bfloat16"))
    ids = np.arange(8, dtype=np.int32).reshape(1, 8)
    zeros, positions = np.zeros_like(ids), ids
    params = module.init(jax.random.key(0), ids, zeros, positions, True)
    assert module.apply(params, ids, zeros, positions, True).dtype == np.dtype("bfloat16")

    def loss(p):
        return module.apply(p, ids, zeros, positions, True).astype(np.float32).sum()

    jaxpr = str(jax.make_jaxpr(jax.grad(loss))(params))
    scatters = [line for line in jaxpr.splitlines() if "scatter-add" in line or "scatter_add" in line]
    assert len(scatters) >= 3, jaxpr
    assert all("f32[" in line and "bf16[" not in line.split("=")[0] for line in scatters), scatters
