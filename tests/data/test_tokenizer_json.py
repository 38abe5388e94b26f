"""A Hugging Face tokenizer.json (byte-level BPE, as ModernBERT's) as a bert_jax tokenizer.

Learned here (`build-vocab --tokenizer=bpe`) on part of the Wikipedia excerpt, it gives
the ids of `transformers.AutoTokenizer` on held-out text, feeds `prepare-data`, a
fine-tuning task and `features` unchanged, and is refused in one line where it cannot
belong to a checkpoint or lacks a special token."""

import json
import os
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tokenizers
import transformers
from tokenizers import models, pre_tokenizers, processors, trainers

from bert_jax import convert
from bert_jax.commands import run_settings
from bert_jax.convert import tokenizer_files
from bert_jax.data import corpora, tokenization, tokenizer_json, vocab_fit, vocab_learning
from bert_jax.finetuning import finetune
from bert_jax.model.encoder import BertModel
from bert_jax.tasks import ner
from configs import bbc as bbc_config
from tests.conftest import ROOT
from tests.helpers.task_data import TINY

VOCAB_SIZE = 3000
DOCS = corpora.load_documents("wiki_excerpt")
TRAIN = [s for d in DOCS[:40] for s in d]
EDGE_CASES = [
    "Hello WORLD, the [MASK] is here.",
    "naïve café Ünïcödé — “quotes” 😀 日本語テキスト",
    "  two  spaces\tand a tab\nand a newline ",
    "",
    "e\u0301 (decomposed) and \u00e9 (composed)",
]
HELD_OUT = [s for d in DOCS[90:96] for s in d][:400] + EDGE_CASES
PAIRS = list(zip(HELD_OUT[:60:2], HELD_OUT[1:60:2], strict=True))
ENV = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")


def bert_jax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_jax", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=300,
    )


@pytest.fixture(scope="module")
def cased(tmp_path_factory) -> Path:
    """A cased tokenizer folder written by `build-vocab --tokenizer=bpe` (ModernBERT's default)."""
    folder = tmp_path_factory.mktemp("bpe")
    text = folder / "train.txt"
    text.write_text("\n\n".join("\n".join(d) for d in DOCS[:40]) + "\n")
    proc = bert_jax(
        "build-vocab", "--tokenizer=bpe", f"--input_file={text}", f"--output={folder / 'tok'}",
        f"--vocab_size={VOCAB_SIZE}",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return folder / "tok"


@pytest.fixture(scope="module")
def uncased(tmp_path_factory) -> Path:
    """A lower-casing one, written by the export writer (`write_tokenizer_json_files`)."""
    folder = tmp_path_factory.mktemp("bpe_lower")
    learned = vocab_learning.byte_level_bpe(TRAIN, VOCAB_SIZE, do_lower_case=True)
    tok = tokenizer_json.TokenizerJson(str(folder / "tokenizer.json"), learned)
    written = tokenizer_files.write_tokenizer_json_files(tok, str(folder), model_max_length=512)
    assert sorted(os.path.basename(p) for p in written) == [
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"
    ]  # fmt: skip
    return folder


def test_build_vocab_learns_the_same_exact_size_file_in_every_process(cased) -> None:
    assert sorted(p.name for p in cased.iterdir()) == [
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"
    ]  # fmt: skip
    again = vocab_learning.byte_level_bpe(TRAIN, VOCAB_SIZE).to_str(pretty=True)  # this process
    assert (cased / "tokenizer.json").read_text() == again
    tok = tokenization.load_tokenizer(str(cased / "tokenizer.json"))  # the default kind: detected
    assert isinstance(tok, tokenizer_json.TokenizerJson) and tok.vocab_size == VOCAB_SIZE
    assert [tok.vocab[i] for i in (0, 1, 2, 3, 4)] == list(tokenization.SPECIAL_TOKENS)
    assert (tok.special.pad, tok.special.unk, tok.special.cls, tok.special.sep, tok.special.mask) == (
        0,
        1,
        2,
        3,
        4,
    )
    # A byte-level vocabulary: no text is unknown; "Ġ" starts a word, the rest continue one.
    ids = tok.tokenize(HELD_OUT)
    assert tok.special.unk not in {i for row in ids for i in row}
    pieces = tok.tokenize_to_pieces(["the unbelievable"])[0]
    assert pieces[1].startswith("\u0120") and not tok.is_continuation[tok.vocab.index(pieces[1])]
    assert [tok.is_continuation[tok.vocab.index(p)] for p in pieces[2:]] == [True] * len(pieces[2:])
    with pytest.raises(ValueError, match=r"vocab_size=100 is too small for a byte-level BPE: at least 261"):
        vocab_learning.byte_level_bpe(TRAIN, 100)


@pytest.mark.parametrize("which", ["cased", "uncased"])
def test_ids_equal_autotokenizer_on_held_out_text(which, request) -> None:
    folder = request.getfixturevalue(which)
    ours = tokenization.load_tokenizer(str(folder / "tokenizer.json"))  # do_lower_case=True: the file rules
    ref = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert isinstance(ref, transformers.PreTrainedTokenizerFast) and len(ref) == VOCAB_SIZE
    assert ours.tokenize(HELD_OUT) == ref(HELD_OUT, add_special_tokens=False)["input_ids"]
    # With the special tokens: single sentences and pairs, segment ids as token types.
    for texts_a, texts_b in ((HELD_OUT[:50], None), ([a for a, _ in PAIRS], [b for _, b in PAIRS])):
        got = ours.encode_pairs(texts_a, texts_b, 2048)  # none truncated
        want = ref(texts_a, texts_b, return_token_type_ids=True)
        for i, ids in enumerate(want["input_ids"]):
            n = int(got["input_mask"][i].sum())
            assert got["input_ids"][i, :n].tolist() == ids and not got["input_ids"][i, n:].any()
            assert got["segment_ids"][i, :n].tolist() == want["token_type_ids"][i]
    assert "token_type_ids" not in ref("a", "b")  # written for ModernBERT: no segment embedding
    hello = ours.tokenize(["Hello World", "hello world"])
    assert (hello[0] == hello[1]) == (which == "uncased") and ours.do_lower_case == (which == "uncased")
    assert ref.convert_ids_to_tokens(ours.tokenize(["the [MASK] is"])[0]) == [
        "the",
        "[MASK]",
        "Ġis",
    ]  # the space before [MASK] taken


def _roberta_style(folder: Path, specials: list[str], pad: str = "") -> str:
    """A byte-level BPE with RoBERTa's token names and post-processor (with `pad`: padding
    and truncation to 8 switched on, as some published files have them)."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(TRAIN[:300], trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")), ("<s>", 0))
    if pad:
        tok.enable_padding(pad_id=tok.token_to_id(pad), pad_token=pad, length=8)
        tok.enable_truncation(max_length=8)
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return str(folder / "tokenizer.json")


def test_special_token_roles_are_read_from_the_file_or_refused_in_one_line(tmp_path) -> None:
    path = _roberta_style(tmp_path / "roberta", ["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tok = tokenization.load_tokenizer(path)
    assert [tok.vocab[getattr(tok.special, r)] for r in tokenizer_json.ROLES] == [
        "<pad>", "<unk>", "<s>", "</s>", "<mask>"
    ]  # fmt: skip
    vocab_fit.check_vocab_fits(tok, tok.vocab_size, "ckpt")  # other names, same roles: fits
    assert not tok.is_continuation[[0, 1, 2, 3, 4]].any()
    # A tokenizer_config.json beside the file names the roles first (as transformers reads it).
    (tmp_path / "roberta" / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<unk>"}))
    assert tokenization.load_tokenizer(path).special.mask == tok.special.unk
    # A pad token of another name, found as the padding's; the file's padding and truncation off.
    path = _roberta_style(tmp_path / "padded", ["<s>", "<|pad|>", "</s>", "<unk>", "<mask>"], pad="<|pad|>")
    tok = tokenization.load_tokenizer(path)
    assert tok.vocab[tok.special.pad] == "<|pad|>" and len(tok.tokenize([TRAIN[0]])[0]) > 8
    assert tok.tokenize(["a"])[0] == [tok.vocab.index("Ġa")]
    path = _roberta_style(tmp_path / "no_mask", ["<s>", "<pad>", "</s>", "<unk>"])
    with pytest.raises(ValueError) as e:
        tokenization.load_tokenizer(path)
    assert str(e.value).startswith(f"{path} names no mask token") and "\n" not in str(e.value)
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"model": 3}')
    with pytest.raises(ValueError, match=r"tokenizer\.json is not a Hugging Face tokenizer\.json \("):
        tokenization.load_tokenizer(str(bad))


def test_prepare_data_takes_it_as_vocab_file(cased, tmp_path) -> None:
    text = tmp_path / "tiny.txt"
    docs = DOCS[100:104]
    text.write_text("\n\n".join("\n".join(d) for d in docs) + "\n")
    out = tmp_path / "prepared"
    proc = bert_jax(
        "prepare-data", f"--input_file={text}", f"--output_dir={out}",
        f"--vocab_file={cased / 'tokenizer.json'}", "--max_seq_length=64", "--dupe_factor=1",
        "--eval_fraction=0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads((out / "metadata.json").read_text())
    ref = transformers.AutoTokenizer.from_pretrained(str(cased))
    expected = sum(len(ids) for d in docs for ids in ref(d, add_special_tokens=False)["input_ids"])
    assert meta["counts"]["tokens"] == expected and meta["counts"]["train"] > 50
    from bert_jax.data import records

    rows = records.PreparedSet(str(out), "train").read(np.arange(meta["counts"]["train"]))
    assert (rows["input_ids"][:, 0] == ref.cls_token_id).all()
    assert ((rows["input_ids"] == ref.sep_token_id).sum(1) == 2).all()  # NSP pairs
    assert rows["input_ids"].max() < VOCAB_SIZE


def _tiny_checkpoint(folder: Path, vocab_size: int) -> str:
    config = TINY.replace(vocab_size=vocab_size)
    ids = jnp.zeros((1, 8), jnp.int32)
    params = nn.meta.unbox(BertModel(config).init(jax.random.key(0), ids, ids, ids))["params"]
    convert.save_checkpoint(str(folder), {"bert": params}, config, "hf")
    return str(folder)


def test_finetuning_and_features_use_it_and_refuse_another_size(cased, tmp_path) -> None:
    checkpoint = _tiny_checkpoint(tmp_path / "ckpt", VOCAB_SIZE)
    # As `convert` writes it: a BERT (two segments) keeps token_type_ids among its inputs.
    convert.write_tokenizer_files(checkpoint, str(cased / "tokenizer.json"), True, TINY)
    assert tokenization.vocab_beside(checkpoint) == os.path.join(checkpoint, "tokenizer.json")
    c = bbc_config.get_config()
    c.init_checkpoint, c.max_seq_length, c.max_train_examples, c.max_eval_examples = checkpoint, 64, 16, 8
    inputs = finetune.load_inputs(
        run_settings.finetune_settings(c)
    )  # the task's featurizer, the vocabulary beside the checkpoint
    ref = transformers.AutoTokenizer.from_pretrained(checkpoint)
    examples = inputs.train.meta
    want = ref(
        [e.text_a for e in examples], [e.text_b for e in examples], truncation="longest_first",
        max_length=64, padding="max_length",
    )  # fmt: skip
    np.testing.assert_array_equal(inputs.train.arrays["input_ids"], want["input_ids"])
    np.testing.assert_array_equal(inputs.train.arrays["segment_ids"], want["token_type_ids"])
    # Another checkpoint's vocabulary size: one line with both sizes.
    other = _tiny_checkpoint(tmp_path / "other", VOCAB_SIZE + 64)
    c.init_checkpoint, c.data.vocab_file = other, str(cased / "tokenizer.json")
    with pytest.raises(ValueError) as e:
        finetune.load_inputs(run_settings.finetune_settings(c))
    assert f"has {VOCAB_SIZE} tokens but {other} was trained with {VOCAB_SIZE + 64}" in str(e.value)
    # `features` from the checkpoint folder alone (its tokenizer.json found beside it).
    text = tmp_path / "in.txt"
    text.write_text("The first sentence.\tAnd its pair.\nA single one.\n")
    features = ["features", f"--input={text}", f"--output={tmp_path / 'f.npy'}", "--overwrite"]
    proc = bert_jax(*features, f"--checkpoint={checkpoint}", "--max_seq_length=16")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert np.load(tmp_path / "f.npy").shape == (2, 16, TINY.hidden_size)
    proc = bert_jax(*features, f"--checkpoint={other}", f"--vocab_file={cased / 'tokenizer.json'}")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1
    assert f"{VOCAB_SIZE} tokens" in proc.stderr and str(VOCAB_SIZE + 64) in proc.stderr


def test_fill_mask_rows_are_autotokenizers_with_the_mask_taking_its_space(cased) -> None:
    """`masked_text.encode` splits the text at the mask string and drops the space before
    a mask, as `transformers` reads ModernBERT's ``[MASK]`` (lstrip): the same ids."""
    from bert_jax.data import masked_text

    ours = tokenization.load_tokenizer(str(cased / "tokenizer.json"))
    ref = transformers.AutoTokenizer.from_pretrained(str(cased))
    texts = ["The [MASK] of France is Paris.", "[MASK] begins, and ends:[MASK]", "two  [MASK] [MASK]  spaces"]
    rows = masked_text.encode(ours, texts)
    for i, want in enumerate(ref(texts)["input_ids"]):
        assert rows.batch["input_ids"][i, : len(want)].tolist() == want, texts[i]
        assert [want[k] for k in rows.positions[i, : rows.counts[i]]] == [ours.mask_id] * texts[i].count(
            "[MASK]"
        )
    assert masked_text.piece_text(ours.vocab[ours.tokenize(["the capital"])[0][-1]]) == "capital"


def test_a_modernbert_folder_fills_masks_and_classifies_as_transformers(cased, tmp_path) -> None:
    """A `transformers` ModernBERT folder with this tokenizer.json (local and global layers,
    rotary positions): `bert_jax.fill_mask` gives the fill-mask pipeline's tokens and
    scores, `bert_jax.predict` the text-classification pipeline's probabilities and a token
    classifier's tags by the class's own logits."""
    import shutil

    import torch

    import bert_jax

    texts = ["The [MASK] of France is Paris.", "Prices rose as the [MASK] bank [MASK] rates again."]
    config = dict(
        vocab_size=VOCAB_SIZE, hidden_size=32, num_attention_heads=2, intermediate_size=48,
        num_hidden_layers=3, max_position_embeddings=64, global_attn_every_n_layers=2, local_attention=8,
        pad_token_id=0, bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3,
    )  # fmt: skip
    labels = ["negative", "neutral", "positive"]
    tags = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    for cls, extra in (
        (transformers.ModernBertForMaskedLM, {}),
        (transformers.ModernBertForSequenceClassification, dict(id2label=dict(enumerate(labels)))),
        (transformers.ModernBertForTokenClassification, dict(id2label=dict(enumerate(tags)))),
    ):
        torch.manual_seed(0)
        model = cls(transformers.ModernBertConfig(**config, **extra)).eval()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        folder = tmp_path / cls.__name__
        model.save_pretrained(folder)
        for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            shutil.copy(cased / name, folder / name)
        if cls is transformers.ModernBertForMaskedLM:
            got = bert_jax.fill_mask(str(folder), texts, top_k=4)
            pipe = transformers.pipeline("fill-mask", model=str(folder), top_k=4)
            for text, record in zip(texts, got, strict=True):
                want = pipe(text)
                want = [want] if isinstance(want[0], dict) else want
                for ours, theirs in zip(record["masks"], want, strict=True):
                    assert [p["id"] for p in ours] == [p["token"] for p in theirs], text
                    np.testing.assert_allclose(
                        [p["score"] for p in ours], [p["score"] for p in theirs], rtol=1e-4
                    )
        elif cls is transformers.ModernBertForTokenClassification:
            # a tagger's words are tagged by the class's own logits at their first pieces
            # (its prediction head before the classifier at every token)
            got = bert_jax.predict(str(folder), [t.replace("[MASK]", "new") for t in texts])
            ours = tokenization.load_tokenizer(str(folder / "tokenizer.json"))
            sentences = [ner.Sentence(r["words"], ["O"] * len(r["words"]), 1) for r in got]
            batch, first = ner.featurize(sentences, ours, 32, tuple(tags))
            ids, mask = (torch.tensor(batch[k]) for k in ("input_ids", "input_mask"))
            with torch.no_grad():
                logits = model(input_ids=ids, attention_mask=mask).logits.numpy()
            assert [r["tags"] for r in got] == ner.decode(logits, first, tuple(tags))
            assert len({t for r in got for t in r["tags"]}) > 1  # tags that say something
        else:
            got = bert_jax.predict(str(folder), [t.replace("[MASK]", "new") for t in texts])
            pipe = transformers.pipeline("text-classification", model=str(folder), top_k=None)
            for record, want in zip(got, pipe([r["text"] for r in got]), strict=True):
                np.testing.assert_allclose(
                    [record["probabilities"][p["label"]] for p in want], [p["score"] for p in want], rtol=1e-4
                )
