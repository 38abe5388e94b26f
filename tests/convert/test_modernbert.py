"""Hugging Face ModernBERT ⇄ bert_jax: randomly initialised `transformers` ModernBERTs of a
few shapes (global-only; alternating with a window smaller than the sequence; tied and
untied decoder; with biases) give the same MLM, classification, token, span and
multiple-choice logits as bert_jax within 1e-5 on padded batches, in both directions; what
ModernBERT cannot hold is refused in one line; a one-segment embedding is folded exactly;
and `bert-jax finetune` runs from an HF ModernBERT folder."""

import json
import os
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from bert_jax import convert
from bert_jax.convert import layout, modernbert_format, tokenizer_files
from bert_jax.data import corpora, tokenizer_json, vocab_learning
from bert_jax.model.config import MODERNBERT, BertConfig
from bert_jax.model.heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from tests.conftest import ROOT

TINY = dict(
    vocab_size=96,
    hidden_size=32,
    num_attention_heads=4,
    intermediate_size=48,
    num_hidden_layers=4,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    cls_token_id=1,
    sep_token_id=2,
)
SHAPES = {
    "global_tied": dict(global_attn_every_n_layers=1),
    # layers 0 and 3 global, 1 and 2 within ±4 tokens of a 32-token sequence
    "alternating_untied": dict(global_attn_every_n_layers=3, local_attention=8, tie_word_embeddings=False),
    "alternating_biased": dict(
        global_attn_every_n_layers=2,
        local_attention=12,
        attention_bias=True,
        mlp_bias=True,
        classifier_bias=True,
        norm_bias=True,
        hidden_activation="gelu_pytorch_tanh",
        classifier_activation="gelu_pytorch_tanh",
    ),
}
ATOL = 1e-5


def _batch(vocab: int = 96, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[3, 32] ids; row 1 padded after 20 tokens, row 2 after 9."""
    ids = np.random.default_rng(seed).integers(3, vocab, (3, 32))
    mask = np.ones_like(ids)
    mask[1, 20:], mask[2, 9:] = 0, 0
    return ids, mask


def _hf(cls, folder, seed=0, **overrides):
    """A random `transformers` model (every tensor perturbed: LayerNorms and biases too),
    saved to `folder` and read back with eager attention."""
    torch.manual_seed(seed)
    model = cls(transformers.ModernBertConfig(**{**TINY, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    return cls.from_pretrained(folder, attn_implementation="eager").eval()


def _torch_logits(model, ids, mask) -> np.ndarray:
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()


def _mlm(params, config, ids, mask, segments=None) -> np.ndarray:
    seg = None if segments is None else jnp.asarray(segments)
    return np.asarray(
        BertForMaskedLM(config).apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask), seg)
    )


def _real_max_diff(a, b, mask) -> float:
    return float(np.abs(a - b)[mask > 0].max())


def _family(**overrides) -> BertConfig:
    values = {**MODERNBERT, **{k: v for k, v in TINY.items() if not k.endswith("token_id")}}
    return BertConfig(**{**values, "local_attention": 8, **overrides})


def _random_family_params(config: BertConfig, seed: int = 0) -> dict:
    model = BertForMaskedLM(config)
    params = jax.device_get(
        nn.meta.unbox(model.init(jax.random.key(seed), jnp.ones((1, 8), jnp.int32))["params"])
    )
    leaves, tree = jax.tree.flatten(params)
    rng = np.random.default_rng(seed)
    params = jax.tree.unflatten(
        tree, [np.asarray(x) + 0.1 * rng.normal(size=np.shape(x)).astype(np.float32) for x in leaves]
    )
    params["bert"]["pooler"] = {
        "dense": dict(params["mlm"]["transform"]),
        "LayerNorm": dict(params["mlm"]["transform_LayerNorm"]),
    }
    return params


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_masked_lm_round_trips_hf_bert_jax_hf(shape, tmp_path) -> None:
    reference = _hf(transformers.ModernBertForMaskedLM, tmp_path / "hf", **SHAPES[shape])
    ids, mask = _batch()
    want = _torch_logits(reference, ids, mask)
    params, config = convert.load_checkpoint(str(tmp_path / "hf"))
    assert config.switches_on() and config.type_vocab_size == 0
    got = _mlm(params, config, ids, mask)
    assert _real_max_diff(got, want, mask) <= ATOL
    assert float(np.abs(want).max()) > 0.5  # logits that say something
    # ... and back: the same tensors, the same logits from transformers.
    convert.save_checkpoint(str(tmp_path / "back"), params, config, "hf")
    again = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "back", attn_implementation="eager")
    a, b = reference.state_dict(), again.eval().state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert _real_max_diff(_torch_logits(again, ids, mask), want, mask) <= ATOL
    exported = json.loads((tmp_path / "back" / "config.json").read_text())
    assert exported["model_type"] == "modernbert" and exported["architectures"] == ["ModernBertForMaskedLM"]


def test_window_matters_in_the_alternating_model(tmp_path) -> None:
    """The alternating model is not the global one: the window is exercised (the parity
    test above could not pass by ignoring it)."""
    _hf(transformers.ModernBertForMaskedLM, tmp_path / "hf", **SHAPES["alternating_untied"])
    params, config = convert.load_checkpoint(str(tmp_path / "hf"))
    ids, mask = _batch()
    windowed = _mlm(params, config, ids, mask)
    unwindowed = _mlm(params, config.replace(global_attn_every_n_layers=1), ids, mask)
    assert _real_max_diff(windowed, unwindowed, mask) > 1e-2


def test_bert_jax_model_exports_to_hf_with_equal_logits(tmp_path) -> None:
    """bert_jax → HF: a model of the family initialised by bert_jax (then perturbed)."""
    config = _family(tie_word_embeddings=False)
    params = _random_family_params(config, seed=1)
    ids, mask = _batch()
    convert.save_checkpoint(str(tmp_path / "hf"), params, config, "hf")
    theirs = transformers.ModernBertForMaskedLM.from_pretrained(tmp_path / "hf", attn_implementation="eager")
    assert (
        _real_max_diff(_torch_logits(theirs.eval(), ids, mask), _mlm(params, config, ids, mask), mask) <= ATOL
    )


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classification_head_both_ways(pooling, tmp_path) -> None:
    cls = transformers.ModernBertForSequenceClassification
    reference = _hf(
        cls, tmp_path / "hf", num_labels=3, classifier_pooling=pooling, **SHAPES["alternating_untied"]
    )
    ids, mask = _batch()
    want = _torch_logits(reference, ids, mask)
    params, config = convert.load_checkpoint(str(tmp_path / "hf"))
    assert config.classifier_pooling == pooling and params["classifier"]["kernel"].shape == (32, 3)
    model = BertForSequenceClassification(config, num_labels=3)
    got = np.asarray(
        model.apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask), jnp.zeros_like(ids))
    )
    assert float(np.abs(got - want).max()) <= ATOL and float(np.abs(want).max()) > 0.1
    convert.save_checkpoint(str(tmp_path / "back"), params, config, "hf")
    again = cls.from_pretrained(tmp_path / "back", attn_implementation="eager").eval()
    assert float(np.abs(_torch_logits(again, ids, mask) - want).max()) <= ATOL


def _task_logits(kind, params, config, ids, mask) -> np.ndarray:
    """bert_jax's logits in the layout of the `transformers` class's: a token classifier's
    [B, S, labels]; a span head's start and end [B, S] each, stacked on the last axis; a
    multiple-choice scorer's [1, B] (the batch's rows as the choices of one example)."""
    params = {layout.head_module_name(k) if k in layout.TASK_HEADS else k: v for k, v in params.items()}
    x, m, seg = jnp.asarray(ids), jnp.asarray(mask), jnp.zeros_like(jnp.asarray(ids))
    if kind == "token":
        return np.asarray(BertForTokenClassification(config, 3).apply({"params": params}, x, m, seg))
    if kind == "span":
        start, end = BertForQuestionAnswering(config).apply({"params": params}, x, m, seg)
        return np.stack([np.asarray(start), np.asarray(end)], -1)
    return np.asarray(BertForMultipleChoice(config).apply({"params": params}, x[None], m[None], seg[None]))


TASK_CLASSES = {
    "token": (transformers.ModernBertForTokenClassification, "token_classifier", 3),
    "span": (transformers.ModernBertForQuestionAnswering, "qa_outputs", 2),
    "choice": (transformers.ModernBertForMultipleChoice, "choice_classifier", 1),
}


@pytest.mark.parametrize("kind", sorted(TASK_CLASSES))
def test_token_span_and_choice_heads_both_ways(kind, tmp_path) -> None:
    """ModernBERT's token, span and multiple-choice classes put their prediction head
    (``head.*``) before the classifier, at every token for the first two: bert_jax's heads
    of a ModernBERT compute the same logits from the folder, and write it back as the same
    class with the same logits."""
    cls, key, outputs = TASK_CLASSES[kind]
    labels = dict(num_labels=3) if kind == "token" else {}
    reference = _hf(cls, tmp_path / "hf", **labels, **SHAPES["alternating_biased"])
    ids, mask = _batch()
    with torch.no_grad():
        if kind == "choice":
            out = reference(input_ids=torch.tensor(ids)[None], attention_mask=torch.tensor(mask)[None])
            want = out.logits.numpy()
        elif kind == "span":
            out = reference(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))
            want = np.stack([out.start_logits.numpy(), out.end_logits.numpy()], -1)
        else:
            want = _torch_logits(reference, ids, mask)
    params, config = convert.load_checkpoint(str(tmp_path / "hf"))
    assert sorted(params) == ["bert", key] and params[key]["kernel"].shape == (32, outputs)
    got = _task_logits(kind, params, config, ids, mask)
    rows = mask > 0 if kind != "choice" else np.ones(want.shape, bool)
    assert float(np.abs(got - want)[rows].max()) <= ATOL and float(np.abs(want).max()) > 0.1
    # the prediction head counts: without it (the paper's token head) the logits differ
    if kind != "choice":
        plain = config.replace(classifier_pooling="bert")
        without = {"bert": {k: v for k, v in params["bert"].items() if k != "pooler"}, key: params[key]}
        assert float(np.abs(_task_logits(kind, without, plain, ids, mask) - want)[rows].max()) > 0.1
    convert.save_checkpoint(str(tmp_path / "back"), params, config, "hf")
    exported = json.loads((tmp_path / "back" / "config.json").read_text())
    assert exported["architectures"] == [cls.__name__]
    again = cls.from_pretrained(tmp_path / "back", attn_implementation="eager").eval()
    a, b = reference.state_dict(), again.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_masked_lm_head_is_the_pooler_as_transformers_loads_it(tmp_path) -> None:
    """`transformers` fills ModernBertForSequenceClassification's head from a masked-LM
    checkpoint's ``head.*``; bert_jax's pooler is loaded the same way, so a classifier
    taken from that model gives its logits."""
    _hf(transformers.ModernBertForMaskedLM, tmp_path / "hf", **SHAPES["global_tied"])
    theirs = transformers.ModernBertForSequenceClassification.from_pretrained(
        tmp_path / "hf", num_labels=2, attn_implementation="eager"
    ).eval()
    params, config = convert.load_checkpoint(str(tmp_path / "hf"))
    classifier = theirs.classifier.state_dict()
    params = {
        "bert": params["bert"],
        "classifier": {"kernel": classifier["weight"].numpy().T, "bias": classifier["bias"].numpy()},
    }
    ids, mask = _batch()
    got = BertForSequenceClassification(config, 2).apply(
        {"params": params}, jnp.asarray(ids), jnp.asarray(mask), jnp.zeros_like(ids)
    )
    assert float(np.abs(np.asarray(got) - _torch_logits(theirs, ids, mask)).max()) <= ATOL


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (dict(position_embedding_type="alibi"), "position_embedding_type=alibi"),
        (dict(position_embedding_type="sinusoidal"), "position_embedding_type=sinusoidal"),
        (dict(position_embedding_type="absolute"), "position_embedding_type=absolute"),
        (dict(type_vocab_size=2), "type_vocab_size=2"),
        (dict(pre_layer_norm=False, first_layer_attention_norm=True), "pre_layer_norm=False"),
        (dict(first_layer_attention_norm=True), "first_layer_attention_norm=True"),
        (dict(gated_ffn=False), "gated_ffn=False"),
        (dict(causal_attention=True), "causal_attention=True"),
    ],
)
def test_what_modernbert_cannot_hold_is_refused_in_one_line(overrides, named, tmp_path) -> None:
    config = _family(**overrides)
    model = BertForMaskedLM(config)
    params = jax.device_get(
        nn.meta.unbox(model.init(jax.random.key(0), jnp.ones((1, 8), jnp.int32))["params"])
    )
    with pytest.raises(ValueError) as e:
        convert.save_checkpoint(str(tmp_path / "hf"), params, config, "hf")
    line = str(e.value)
    assert "\n" not in line and f"ModernBERT cannot represent {named} (" in line
    assert line.endswith("export with --dst_format=bert_jax") and not (tmp_path / "hf").exists()


def test_another_model_type_is_refused_naming_it(tmp_path) -> None:
    folder = tmp_path / "roberta"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "roberta", "hidden_size": 32}))
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(ValueError) as e:
        convert.load_checkpoint(str(folder))
    assert "model_type 'roberta' does not load; the types that load are bert, modernbert" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("segments", [1, 2])
def test_segment_embedding_trained_on_one_segment_is_folded_exactly(segments, tmp_path) -> None:
    """Row 0 of the segment table added to every word embedding: bert_jax's own logits do
    not move by one bit, and the exported ModernBERT gives them (segment ids all 0). A
    two-row table folds only when asked (`fold_segment`: trained on segment 0 only)."""
    config = _family(type_vocab_size=segments)
    params = _random_family_params(config)
    ids, mask = _batch()
    ours = _mlm(params, config, ids, mask, np.zeros_like(ids))
    folded, held = modernbert_format.fold_segments(params, config)
    assert "token_type_embeddings" not in folded["bert"]["embeddings"]
    assert held == config.replace(type_vocab_size=0, tie_word_embeddings=False)  # the decoder keeps its table
    assert np.array_equal(_mlm(folded, held, ids, mask), ours)
    if segments == 2:
        refusal = r"type_vocab_size=2 \(a segment embedding; it has none: --fold_segment_embedding folds"
        with pytest.raises(ValueError, match=refusal):
            convert.save_checkpoint(str(tmp_path / "refused"), params, config, "hf")
    convert.save_checkpoint(str(tmp_path / "hf"), params, config, "hf", fold_segment=segments == 2)
    theirs = transformers.ModernBertForMaskedLM.from_pretrained(
        tmp_path / "hf", attn_implementation="eager"
    ).eval()
    assert _real_max_diff(_torch_logits(theirs, ids, mask), ours, mask) <= ATOL


def test_finetune_from_an_hf_modernbert_folder(tmp_path) -> None:
    """`bert-jax finetune --config.init_checkpoint=<HF ModernBERT folder>` on BBC News: the
    folder's tokenizer.json is found beside it and a few steps train."""
    docs = corpora.load_documents("wiki_excerpt")[:20]
    learned = vocab_learning.byte_level_bpe([s for d in docs for s in d], 600, do_lower_case=False)
    folder = tmp_path / "hf"
    tok = tokenizer_json.TokenizerJson(str(folder / "tokenizer.json"), learned)
    cfg = {**SHAPES["alternating_untied"], "vocab_size": tok.vocab_size, "pad_token_id": tok.special.pad}
    _hf(transformers.ModernBertForMaskedLM, folder, **cfg)
    tokenizer_files.write_tokenizer_json_files(tok, str(folder), model_max_length=64)
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "finetune", "--config=configs/bbc.py",
         f"--workdir={tmp_path / 'ft'}", f"--config.init_checkpoint={folder}",
         "--config.max_seq_length=32", "--config.global_batch_size=8",
         "--config.max_train_examples=32", "--config.max_eval_examples=16", "--config.num_epochs=1"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert results["checkpoint"] == str(folder)
    assert np.isfinite(results["epochs"][0]["train_loss"]) and 0.0 <= results["best"]["accuracy"] <= 1.0
