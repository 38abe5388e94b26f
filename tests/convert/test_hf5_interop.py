"""Hugging Face folders as `transformers` 5 writes and reads them, both ways: BERT and
ModernBERT, masked-LM and sequence-classification heads, tied and untied decoders, rotary
bases and attention patterns of the 5.x schema (``rope_parameters``, ``layer_types``),
windows odd and even, padded rows; folders of the 4.x schema (saved in tests/testdata/hf_4x
by tests/testdata/make_hf_4x.py with transformers 4.57); tokenizers that
`AutoTokenizer` loads; and the refusals and warnings of keys bert_jax does not compute."""

import json
import os
import shutil
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from bert_jax import convert
from bert_jax.model.heads import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from tests.conftest import ROOT

ATOL = 1e-4
TESTDATA = os.path.join(ROOT, "tests", "testdata", "hf_4x")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *[f"w{i}" for i in range(91)]]
BERT = dict(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
MODERN = dict(
    vocab_size=96, hidden_size=32, num_hidden_layers=5, num_attention_heads=4, intermediate_size=48,
    pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3,
)  # fmt: skip
ROPE = {
    "full_attention": {"rope_type": "default", "rope_theta": 50_000.0},
    "sliding_attention": {"rope_type": "default", "rope_theta": 500.0},
}
# Attention patterns: the every-n-th rule; one no rule gives; odd and even windows.
PATTERNS = {
    "every_2nd_window_8": dict(layer_types=["full_attention", "sliding_attention"] * 2 + ["full_attention"],
                               local_attention=8),
    "irregular_window_7": dict(layer_types=["full_attention", "sliding_attention", "full_attention",
                                            "full_attention", "sliding_attention"], local_attention=7),
    "all_sliding_window_5": dict(layer_types=["sliding_attention"] * 5, local_attention=5),
}  # fmt: skip


def _batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[3, 32] ids; row 1 padded after 20 tokens, row 2 after 9."""
    ids = np.random.default_rng(seed).integers(5, 96, (3, 32))
    mask = np.ones_like(ids)
    mask[1, 20:], mask[2, 9:] = 0, 0
    return ids, mask


def _saved(model, folder, seed=0):
    """`model` with every tensor perturbed, saved with a vocab.txt, read back (eager attention)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    return type(model).from_pretrained(folder, attn_implementation="eager").eval()


def _logits(model, ids, mask) -> np.ndarray:
    if isinstance(model, transformers.BertForMultipleChoice):  # the 3 rows as 3 choices of one
        ids, mask = ids[None], mask[None]
    with torch.no_grad():
        out = model(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask))
    if hasattr(out, "start_logits"):
        return np.stack([out.start_logits.numpy(), out.end_logits.numpy()], -1)
    return out.logits.numpy()


def _ours(params, config, ids, mask) -> np.ndarray:
    ids, mask = jnp.asarray(ids), jnp.asarray(mask)
    segments = jnp.zeros_like(ids)
    if "classifier" in params:
        labels = params["classifier"]["bias"].shape[0]
        model = BertForSequenceClassification(config, num_labels=labels)
        return np.asarray(model.apply({"params": params}, ids, mask, segments))
    if "token_classifier" in params:
        labels = params["token_classifier"]["bias"].shape[0]
        model = BertForTokenClassification(config, num_labels=labels)
        tagged = {**params, "classifier": params["token_classifier"]}  # the module's own name
        return np.asarray(model.apply({"params": tagged}, ids, mask, segments))
    if "qa_outputs" in params:
        start, end = BertForQuestionAnswering(config).apply({"params": params}, ids, mask, segments)
        return np.stack([np.asarray(start), np.asarray(end)], -1)
    if "choice_classifier" in params:
        scorer = {**params, "classifier": params["choice_classifier"]}
        return np.asarray(
            BertForMultipleChoice(config).apply({"params": scorer}, ids[None], mask[None], segments[None])
        )
    segments = jnp.zeros_like(ids) if config.type_vocab_size else None
    return np.asarray(BertForMaskedLM(config).apply({"params": params}, ids, mask, segments))


def _diff(a, b, mask) -> float:
    return float(np.abs(a - b)[mask > 0].max() if a.ndim == 3 else np.abs(a - b).max())


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_jax", *map(str, args)], capture_output=True, text=True, cwd=ROOT,
        timeout=300, env=dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3"),
    )  # fmt: skip


def _round_trip(reference, tmp_path, auto_class) -> None:
    """HF folder → bert_jax (`convert`) → HF (`convert`): logits equal transformers' at each
    end; the exported folder loads with `auto_class` and `AutoTokenizer`."""
    ids, mask = _batch()
    want = _logits(reference, ids, mask)
    params, config = convert.load_checkpoint(str(tmp_path / "hf"))
    assert _diff(_ours(params, config, ids, mask), want, mask) <= ATOL
    assert float(np.abs(want).max()) > 0.1  # logits that say something
    for src, dst, fmt in (("hf", "bj", "bert_jax"), ("bj", "back", "hf")):
        proc = _cli("convert", f"--src={tmp_path / src}", f"--dst={tmp_path / dst}", f"--dst_format={fmt}")
        assert proc.returncode == 0, proc.stderr[-2000:]
    again = auto_class.from_pretrained(tmp_path / "back", attn_implementation="eager").eval()
    assert type(again) is type(reference)
    assert _diff(_logits(again, ids, mask), want, mask) <= ATOL
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "back"))
    assert tokenizer("w1 w2 w90")["input_ids"] == [2, 6, 7, 95, 3]
    assert {"tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(tmp_path / "back"))
    umask = os.umask(0)
    os.umask(umask)
    modes = {f: os.stat(tmp_path / "back" / f).st_mode & 0o777 for f in os.listdir(tmp_path / "back")}
    assert set(modes.values()) == {0o666 & ~umask}, modes  # model.safetensors as the others


@pytest.mark.parametrize("tied", [True, False])
def test_bert_masked_lm_of_transformers_5_round_trips(tied, tmp_path) -> None:
    config = transformers.BertConfig(**BERT, tie_word_embeddings=tied)
    reference = _saved(transformers.BertForMaskedLM(config), tmp_path / "hf")
    saved = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert "bos_token_id" in saved and saved["transformers_version"].startswith("5.")
    if not tied:  # the decoder is its own matrix
        assert not torch.equal(
            reference.cls.predictions.decoder.weight, reference.bert.embeddings.word_embeddings.weight
        )
    _round_trip(reference, tmp_path, transformers.AutoModelForMaskedLM)


def test_bert_sequence_classifier_round_trips(tmp_path) -> None:
    config = transformers.BertConfig(**BERT, num_labels=3)
    reference = _saved(transformers.BertForSequenceClassification(config), tmp_path / "hf")
    params, _ = convert.load_checkpoint(str(tmp_path / "hf"))
    assert params["classifier"]["kernel"].shape == (32, 3)
    _round_trip(reference, tmp_path, transformers.AutoModelForSequenceClassification)


# Every fine-tuned head of `transformers`' BERT classes: its key in bert_jax's params and
# that key's [H, outputs] kernel.
TASK_CLASSES = {
    "token": (transformers.BertForTokenClassification, transformers.AutoModelForTokenClassification,
              "token_classifier", (32, 3)),
    "span": (transformers.BertForQuestionAnswering, transformers.AutoModelForQuestionAnswering,
             "qa_outputs", (32, 2)),
    "choice": (transformers.BertForMultipleChoice, transformers.AutoModelForMultipleChoice,
               "choice_classifier", (32, 1)),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(TASK_CLASSES))
def test_bert_task_heads_round_trip_as_their_own_class(kind, tmp_path) -> None:
    """A token classifier, a span head and a multiple-choice scorer cross as themselves
    (before, the first read as a sequence classifier and the other two were refused); a
    token classifier's label names come back as they went."""
    cls, auto_class, key, shape = TASK_CLASSES[kind]
    tags = {0: "O", 1: "B-PER", 2: "I-PER"}
    labels = dict(id2label=tags, label2id={v: k for k, v in tags.items()}) if kind == "token" else {}
    config = transformers.BertConfig(**BERT, **labels)
    reference = _saved(cls(config), tmp_path / "hf")
    params, _ = convert.load_checkpoint(str(tmp_path / "hf"))
    assert params[key]["kernel"].shape == shape and "classifier" not in params
    _round_trip(reference, tmp_path, auto_class)
    if kind == "token":
        assert reference.config.id2label == tags
        assert auto_class.from_pretrained(tmp_path / "back").config.id2label == tags


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_modernbert_rotary_bases_and_attention_patterns_round_trip(pattern, tmp_path) -> None:
    config = transformers.ModernBertConfig(**MODERN, **PATTERNS[pattern], rope_parameters=ROPE)
    reference = _saved(transformers.ModernBertForMaskedLM(config), tmp_path / "hf")
    saved = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert saved["rope_parameters"]["sliding_attention"]["rope_theta"] == 500.0 and saved["layer_types"]
    _, ours = convert.load_checkpoint(str(tmp_path / "hf"))
    assert (ours.rotary_base, ours.local_rotary_base) == (50_000.0, 500.0)
    windows = [ours.layer_window(i) if ours.has_local_layers else None for i in range(5)]
    assert windows == [PATTERNS[pattern]["local_attention"] if t == "sliding_attention" else None
                       for t in PATTERNS[pattern]["layer_types"]]  # fmt: skip
    _round_trip(reference, tmp_path, transformers.AutoModelForMaskedLM)


def test_rotary_bases_change_the_logits(tmp_path) -> None:
    """The bases are exercised: the same weights with 4.x's default bases give other logits."""
    config = transformers.ModernBertConfig(**MODERN, **PATTERNS["irregular_window_7"], rope_parameters=ROPE)
    _saved(transformers.ModernBertForMaskedLM(config), tmp_path / "hf")
    params, ours = convert.load_checkpoint(str(tmp_path / "hf"))
    ids, mask = _batch()
    default = ours.replace(rotary_base=160_000.0, local_rotary_base=10_000.0)
    assert _diff(_ours(params, ours, ids, mask), _ours(params, default, ids, mask), mask) > 1e-2


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_modernbert_sequence_classifier_round_trips(pooling, tmp_path) -> None:
    config = transformers.ModernBertConfig(
        **MODERN, **PATTERNS["every_2nd_window_8"], rope_parameters=ROPE, num_labels=3,
        classifier_pooling=pooling, tie_word_embeddings=False,
    )  # fmt: skip
    reference = _saved(transformers.ModernBertForSequenceClassification(config), tmp_path / "hf")
    _round_trip(reference, tmp_path, transformers.AutoModelForSequenceClassification)


@pytest.mark.parametrize("name", ["bert_mlm", "modernbert_mlm"])
def test_folders_of_the_4x_schema_still_load(name, tmp_path) -> None:
    """Folders saved by transformers 4.57 (``global_rope_theta``, ``global_attn_every_n_layers``)
    give the logits 4.57 computed, and transformers 5 reads their bert_jax export alike."""
    folder = os.path.join(TESTDATA, name)
    expected = np.load(os.path.join(folder, "expected.npz"))
    ids, mask = expected["input_ids"], expected["attention_mask"]
    params, config = convert.load_checkpoint(folder)
    assert _diff(_ours(params, config, ids, mask), expected["logits"], mask) <= ATOL
    if name == "modernbert_mlm":
        assert (config.rotary_base, config.local_rotary_base, config.local_attention) == (50_000.0, 500.0, 6)
    convert.save_checkpoint(str(tmp_path / "hf"), params, config, "hf")
    theirs = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "hf", attn_implementation="eager")
    assert _diff(_logits(theirs.eval(), ids, mask), expected["logits"], mask) <= ATOL


@pytest.mark.parametrize(
    ("rope", "named"),
    [
        ({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}, "rope_type='linear' is not supported"),
        ({"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5},
         "sets partial_rotary_factor=0.5: not supported"),
    ],
)  # fmt: skip
def test_a_rope_bert_jax_cannot_compute_is_refused_in_one_line(rope, named, tmp_path) -> None:
    config = transformers.ModernBertConfig(**MODERN, rope_parameters=ROPE)
    _saved(transformers.ModernBertForMaskedLM(config), tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    values = json.loads(path.read_text())
    values["rope_parameters"]["full_attention"] = rope
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError) as e:
        convert.load_checkpoint(str(tmp_path / "hf"))
    assert named in str(e.value) and "rope_parameters.full_attention" in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_keys_warn_and_computing_keys_refuse(tmp_path, capsys) -> None:
    config = transformers.BertConfig(**BERT)
    _saved(transformers.BertForMaskedLM(config), tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    values = json.loads(path.read_text())
    path.write_text(json.dumps({**values, "my_new_switch": 3, "another": None}))
    convert.checkpoint_config(str(tmp_path / "hf"))  # as a run from it reads it: then its weights
    convert.load_checkpoint(str(tmp_path / "hf"))
    lines = [line for line in capsys.readouterr().out.splitlines() if "not read" in line]
    assert lines == [f"warning: {path}: not read (unknown to bert_jax): another, my_new_switch"]
    for key, value in (
        ("add_cross_attention", True),
        ("is_decoder", True),
        ("position_embedding_type", "relative_key"),
    ):
        path.write_text(json.dumps({**values, key: value}))
        with pytest.raises(ValueError, match=rf"{key}={value!r} is not supported"):
            convert.load_checkpoint(str(tmp_path / "hf"))


def test_a_tokenizer_larger_than_the_model_is_refused(tmp_path) -> None:
    _saved(transformers.BertForMaskedLM(transformers.BertConfig(**BERT)), tmp_path / "hf")
    big = tmp_path / "big.txt"
    big.write_text("\n".join([*VOCAB, *(f"x{i}" for i in range(20))]) + "\n")
    proc = _cli("convert", f"--src={tmp_path / 'hf'}", f"--dst={tmp_path / 'out'}", f"--vocab_file={big}")
    assert proc.returncode == 1 and not (tmp_path / "out").exists()
    assert f"{big} has 116 tokens but the model's vocabulary has 96 rows" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_head_the_checkpoint_lacks_is_one_line(tmp_path) -> None:
    config = transformers.ModernBertConfig(**MODERN)
    _saved(transformers.ModernBertForMaskedLM(config), tmp_path / "hf")
    params, _ = convert.load_checkpoint(str(tmp_path / "hf"), heads=("mlm",))
    assert "mlm" in params
    with pytest.raises(ValueError) as e:
        convert.load_checkpoint(str(tmp_path / "hf"), heads=("mlm", "nsp"))
    assert str(e.value) == (
        f"{tmp_path / 'hf'} has no next-sentence head (nsp): it holds the encoder with masked-LM head; "
        "load it into a model without that head"
    )
    shutil.rmtree(tmp_path / "hf")


def test_features_refuse_a_vocabulary_other_than_the_checkpoints(tmp_path) -> None:
    """`features --vocab_file=OTHER` for a folder that ships its own vocabulary: one line
    naming both files, nothing written; the shipped file itself (or a copy) is taken."""
    _saved(transformers.BertForMaskedLM(transformers.BertConfig(**BERT)), tmp_path / "hf")
    other = tmp_path / "other.txt"
    other.write_text("\n".join([*VOCAB[:5], *(f"v{i}" for i in range(50))]) + "\n")
    text = tmp_path / "in.txt"
    text.write_text("w1 w2 w3\n")
    proc = _cli("features", f"--checkpoint={tmp_path / 'hf'}", f"--input={text}",
                f"--output={tmp_path / 'x.npy'}", f"--vocab_file={other}")  # fmt: skip
    assert proc.returncode == 1 and not (tmp_path / "x.npy").exists()
    assert f"--vocab_file {other} differs from {tmp_path / 'hf' / 'vocab.txt'}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    copy = tmp_path / "copy.txt"
    shutil.copy(tmp_path / "hf" / "vocab.txt", copy)
    proc = _cli("features", f"--checkpoint={tmp_path / 'hf'}", f"--input={text}",
                f"--output={tmp_path / 'x.npy'}", f"--vocab_file={copy}")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert np.load(tmp_path / "x.npy").shape[-1] == 32


def test_a_sentencepiece_run_exports_a_tokenizer_json_transformers_loads(tmp_path) -> None:
    """A ModernBERT whose vocabulary is a SentencePiece ``.model`` (transformers 5 builds
    its tokenizer from a tokenizer.json alone): the exported folder's `AutoTokenizer` gives
    bert_jax's ids on real text, and the model its logits."""
    from bert_jax.data import corpora, tokenization, vocab_learning

    docs = corpora.load_documents("wiki_excerpt")
    sentences = [s for d in docs[:20] for s in d][:2000]
    model_file = vocab_learning.train_sentencepiece(sentences, str(tmp_path / "sp"), 400)
    ours = tokenization.load_tokenizer(model_file, kind="sentencepiece")
    config = transformers.ModernBertConfig(**dict(MODERN, vocab_size=ours.vocab_size))
    reference = _saved(transformers.ModernBertForMaskedLM(config), tmp_path / "hf")
    os.remove(tmp_path / "hf" / "vocab.txt")
    for src, dst, fmt in (("hf", "bj", "bert_jax"), ("bj", "back", "hf")):
        proc = _cli("convert", f"--src={tmp_path / src}", f"--dst={tmp_path / dst}", f"--dst_format={fmt}",
                    f"--vocab_file={model_file}")  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert {"spm.model", "tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(tmp_path / "back"))
    assert "vocab.txt" not in os.listdir(tmp_path / "back")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "back"))
    texts = [" ".join(d[:3]) for d in docs[60:80]] + ["  Two  spaces, Ünïcödé and ﬁ ligatures ½."]
    special = ours.special
    want = [[special.cls, *row, special.sep] for row in ours.sp.encode([t.lower() for t in texts])]
    assert [tokenizer(t)["input_ids"] for t in texts] == want
    assert tokenizer("a", "b")["input_ids"][-1] == special.sep
    ids, mask = _batch()
    again = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "back", attn_implementation="eager")
    assert _diff(_logits(again.eval(), ids, mask), _logits(reference, ids, mask), mask) <= ATOL
