"""Model shapes and parameter counts against the published BERT sizes."""

import json
import math
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.model import heads, param_shapes
from bert_jax.model.config import MODEL_PRESETS, BertConfig
from bert_jax.model.encoder import BertModel
from tests.conftest import ROOT


def _count(tree) -> int:
    return sum(x.size for x in jax.tree.leaves(tree))


@pytest.mark.parametrize(("preset", "expected"), [("base", 109_482_240), ("large", 335_141_888)])
def test_parameter_counts_match_reference(preset: str, expected: int) -> None:
    config = MODEL_PRESETS[preset]
    shapes = jax.eval_shape(lambda: BertModel(config).init(jax.random.key(0), jnp.ones((1, 8), jnp.int32)))
    assert _count(nn.meta.unbox(shapes["params"])) == expected


def test_every_parameter_has_logical_axes() -> None:
    config = MODEL_PRESETS["tiny"]
    ids = jnp.ones((2, 8), jnp.int32)
    variables = jax.eval_shape(
        lambda: heads.BertForPreTraining(config).init(
            jax.random.key(0), ids, ids, ids, jnp.zeros((2, 2), jnp.int32)
        )
    )
    specs = nn.get_partition_spec(variables["params"])
    leaves = jax.tree.leaves(variables["params"], is_leaf=lambda x: isinstance(x, nn.Partitioned))
    assert all(isinstance(x, nn.Partitioned) for x in leaves)
    for spec, leaf in zip(jax.tree.leaves(specs), leaves, strict=True):
        assert len(spec) == leaf.value.ndim


def test_heads_output_shapes() -> None:
    config = MODEL_PRESETS["tiny"]
    key = jax.random.key(0)
    ids = jnp.ones((2, 16), jnp.int32)
    mask, seg = jnp.ones_like(ids), jnp.zeros_like(ids)
    pos = jnp.array([[1, 2, 3], [4, 5, 0]])
    m = heads.BertForPreTraining(config)
    mlm, nsp = m.apply(m.init(key, ids, mask, seg, pos), ids, mask, seg, pos)
    assert mlm.shape == (2, 3, config.vocab_size) and nsp.shape == (2, 2)
    for model, shape in [
        (heads.BertForSequenceClassification(config, num_labels=3), (2, 3)),
        (heads.BertForTokenClassification(config, num_labels=5), (2, 16, 5)),
    ]:
        assert model.apply(model.init(key, ids, mask, seg), ids, mask, seg).shape == shape
    qa = heads.BertForQuestionAnswering(config)
    start, end = qa.apply(qa.init(key, ids, mask, seg), ids, mask, seg)
    assert start.shape == end.shape == (2, 16)
    mc = heads.BertForMultipleChoice(config)
    ids3 = jnp.ones((2, 4, 16), jnp.int32)
    out = mc.apply(mc.init(key, ids3, ids3, ids3 * 0), ids3, ids3, ids3 * 0)
    assert out.shape == (2, 4)


def test_padding_does_not_change_unpadded_outputs() -> None:
    config = MODEL_PRESETS["tiny"]
    model = BertModel(config)
    ids = jnp.array([[5, 6, 7, 8]])
    params = model.init(jax.random.key(1), ids)
    short, _, _ = model.apply(params, ids)
    padded_ids = jnp.array([[5, 6, 7, 8, 0, 0]])
    long, _, _ = model.apply(params, padded_ids, jnp.array([[1, 1, 1, 1, 0, 0]]))
    assert jnp.max(jnp.abs(short - long[:, :4])) < 1e-5


def test_bad_config_names_the_key() -> None:
    with pytest.raises(ValueError, match="hidden_sise"):
        BertConfig.from_dict({"hidden_sise": 10})
    with pytest.raises(ValueError, match="divisible"):
        BertConfig(hidden_size=100, num_attention_heads=3)


def test_causal_attention_ignores_later_tokens() -> None:
    config = MODEL_PRESETS["tiny"].replace(causal_attention=True)
    model = BertModel(config)
    a = jnp.array([[5, 6, 7, 8, 9]])
    b = jnp.array([[5, 6, 7, 20, 30]])
    params = model.init(jax.random.key(0), a)
    out_a, _, _ = model.apply(params, a)
    out_b, _, _ = model.apply(params, b)
    assert jnp.max(jnp.abs(out_a[:, :3] - out_b[:, :3])) < 1e-6  # prefix unaffected
    assert jnp.max(jnp.abs(out_a[:, 3:] - out_b[:, 3:])) > 1e-3
    bidirectional, _, _ = BertModel(MODEL_PRESETS["tiny"]).apply(params, b)
    assert jnp.max(jnp.abs(bidirectional[:, :3] - out_a[:, :3])) > 1e-3


def test_ltr_data_needs_a_causal_model() -> None:
    from bert_jax.commands import run_settings
    from bert_jax.pretraining import pretrain
    from configs import pretrain as pretrain_config

    c = pretrain_config.get_config("tiny")
    c.data.objective = "ltr"
    with pytest.raises(ValueError, match="causal_attention=True"):
        pretrain.check_run(run_settings.pretrain_settings(c))


GOLDEN = ROOT / "tests" / "testdata" / "bert_base_param_shapes.json"


def _pretraining_params(config: BertConfig) -> dict[str, dict[str, list]]:
    """Path → shape and logical axis names of `BertForPreTraining(config)`'s parameters, from
    `jax.eval_shape` (nothing allocated)."""
    ids = jnp.zeros((1, 8), jnp.int32)
    init = lambda: heads.BertForPreTraining(config).init(jax.random.key(0), ids, ids, ids, ids[:, :2])
    boxed = jax.eval_shape(init)["params"]
    shapes = param_shapes.shapes(nn.meta.unbox(boxed))
    is_spec = lambda x: isinstance(x, jax.sharding.PartitionSpec)
    specs = jax.tree_util.tree_flatten_with_path(nn.get_partition_spec(boxed), is_leaf=is_spec)[0]
    axes = {param_shapes.path_str(p): list(spec) for p, spec in specs}  # logical names
    return {k: {"shape": list(v), "axes": axes[k]} for k, v in shapes.items()}


def _golden_text(params: dict[str, dict[str, list]]) -> str:
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(params.items())]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def test_bert_base_parameters_match_the_golden_file() -> None:
    """Every parameter name, shape and logical axis name of BERT-Base pre-training, as
    checkpoints, conversion and sharding rely on them. After an intended change:
    BERT_JAX_WRITE_GOLDEN=1 pytest -k golden."""
    params = _pretraining_params(MODEL_PRESETS["base"])
    if os.environ.get("BERT_JAX_WRITE_GOLDEN"):
        GOLDEN.write_text(_golden_text(params))
    golden = json.loads(GOLDEN.read_text())
    diff = [f"- {k} {golden[k]}" for k in sorted(golden.keys() - params.keys())]
    diff += [f"+ {k} {params[k]}" for k in sorted(params.keys() - golden.keys())]
    same = sorted(golden.keys() & params.keys())
    diff += [f"~ {k} {golden[k]} -> {params[k]}" for k in same if golden[k] != params[k]]
    assert not diff, f"BERT-Base parameters differ from {GOLDEN.name}:\n" + "\n".join(diff)
    sizes = [math.prod(p["shape"]) for p in golden.values()]
    assert len(golden) == 206 and sum(sizes) == 110_106_428
    assert all(len(p["axes"]) == len(p["shape"]) for p in golden.values())


def test_vocabulary_padding_changes_only_the_vocabulary_rows() -> None:
    config = MODEL_PRESETS["base"]
    padded = {k: p["shape"] for k, p in _pretraining_params(config.replace(vocab_pad_multiple=128)).items()}
    plain = {k: p["shape"] for k, p in _pretraining_params(config).items()}
    changed = {k: (plain[k], padded[k]) for k in plain if plain[k] != padded[k]}
    assert changed == {
        "bert/embeddings/word_embeddings/embedding": ([30522, 768], [30592, 768]),
        "mlm/bias": ([30522], [30592]),
    }
    assert config.replace(vocab_pad_multiple=128).padded_vocab_size == 30592 == 239 * 128
    assert config.padded_vocab_size == 30522  # the default pads nothing
    with pytest.raises(ValueError, match="vocab_pad_multiple=0"):
        config.replace(vocab_pad_multiple=0)


def test_padded_vocabulary_gives_the_same_logits_and_loss() -> None:
    """The same weights with 212 padding rows: equal logits on the real ids, padding logits
    never predicted, equal MLM loss and gradients of the real rows."""
    from bert_jax.model import ops, vocab_padding

    config = MODEL_PRESETS["tiny"].replace(vocab_size=300)
    padded_config = config.replace(vocab_pad_multiple=512)
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(5, 300, (2, 16)), jnp.int32)
    mask, seg = jnp.ones_like(ids), jnp.zeros_like(ids)
    pos = jnp.array([[1, 2, 3], [4, 5, 9]])
    labels = jnp.asarray(rng.integers(0, 300, (2, 3)), jnp.int32)
    params = heads.BertForPreTraining(config).init(jax.random.key(3), ids, mask, seg, pos)["params"]
    params = nn.meta.unbox(params)
    padded = vocab_padding.resize_vocab(jax.device_get(params), 300, 512)
    # Nonzero padding rows: even then nothing changes.
    word = padded["bert"]["embeddings"]["word_embeddings"]["embedding"]
    word[300:] = rng.normal(size=word[300:].shape)
    padded["mlm"]["bias"][300:] = 5.0

    def loss(p, c):
        mlm, _ = heads.BertForPreTraining(c).apply({"params": p}, ids, mask, seg, pos)
        return jnp.mean(ops.softmax_cross_entropy(mlm, labels)[0]), mlm

    (loss_a, mlm_a), grads_a = jax.value_and_grad(loss, has_aux=True)(params, config)
    (loss_b, mlm_b), grads_b = jax.value_and_grad(loss, has_aux=True)(padded, padded_config)
    assert mlm_b.shape == (2, 3, 512)
    np.testing.assert_allclose(mlm_b[..., :300], mlm_a, rtol=1e-6, atol=1e-6)
    assert bool(jnp.all(mlm_b[..., 300:] == jnp.finfo(jnp.float32).min))
    assert bool(jnp.all(jnp.argmax(mlm_b, -1) < 300))
    np.testing.assert_allclose(loss_b, loss_a, rtol=1e-6)
    real = vocab_padding.resize_vocab(jax.device_get(grads_b), 300, 300)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(grads_a), jax.tree.leaves(real), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7, err_msg=jax.tree_util.keystr(path))
    assert not np.any(grads_b["mlm"]["bias"][300:])
