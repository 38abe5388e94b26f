"""Fine-tuning a pre-training checkpoint of a model with ModernBERT's pooling starts the
pooling head from the masked-LM transform, as `transformers` starts a ModernBERT task
class from the same model's export; the paper's pooler and fine-tuned models are left as
they are."""

import jax
import numpy as np
import transformers

from bert_jax import convert
from bert_jax.finetuning.finetune import pooler_from_mlm
from tests.convert.test_modernbert import _family, _random_family_params


def _untrained_pooler(params: dict, seed: int = 7) -> dict:
    """`params` with a pooler unlike the MLM transform (a run without NSP never trains it)."""
    rng = np.random.default_rng(seed)
    pooler = jax.tree.map(lambda x: rng.normal(size=np.shape(x)).astype(np.float32), params["bert"]["pooler"])
    return {**params, "bert": {**params["bert"], "pooler": pooler}}


def test_the_pooler_starts_as_transformers_starts_the_export(tmp_path, capsys) -> None:
    config = _family(tie_word_embeddings=False)
    params = _untrained_pooler(_random_family_params(config, seed=2))
    convert.save_checkpoint(str(tmp_path / "hf"), params, config, "hf")
    capsys.readouterr()
    started = pooler_from_mlm(params, config, "runs/x")
    assert "the pooling head starts from runs/x's masked-LM transform" in capsys.readouterr().out
    theirs = transformers.ModernBertForSequenceClassification.from_pretrained(tmp_path / "hf", num_labels=2)
    head = {k: v.detach().numpy() for k, v in theirs.head.state_dict().items()}
    pooler = started["bert"]["pooler"]
    np.testing.assert_array_equal(np.asarray(pooler["dense"]["kernel"]).T, head["dense.weight"])
    np.testing.assert_array_equal(np.asarray(pooler["LayerNorm"]["scale"]), head["norm.weight"])
    assert not np.allclose(params["bert"]["pooler"]["dense"]["kernel"], pooler["dense"]["kernel"])
    assert started["bert"]["encoder"] is params["bert"]["encoder"] and started["mlm"] is params["mlm"]


def test_the_papers_pooler_and_a_fine_tuned_model_keep_theirs(capsys) -> None:
    config = _family()
    params = _untrained_pooler(_random_family_params(config))
    assert pooler_from_mlm(params, config.replace(classifier_pooling="bert"), "x") is params
    fine_tuned = {"bert": params["bert"], "classifier": {"kernel": np.zeros((32, 2)), "bias": np.zeros(2)}}
    assert pooler_from_mlm(fine_tuned, config, "x") is fine_tuned
    assert capsys.readouterr().out == ""
