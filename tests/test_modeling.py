"""Model shapes and parameter counts against the published BERT sizes."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from bert_jax import heads
from bert_jax.config import MODEL_PRESETS, BertConfig
from bert_jax.modeling import BertModel


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
    from bert_jax import trainer
    from configs import pretrain

    c = pretrain.get_config("tiny")
    c.data.objective = "ltr"
    with pytest.raises(ValueError, match="causal_attention=True"):
        trainer.check_vocab(c)
