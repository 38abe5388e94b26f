"""`bert-jax fill-mask` / `bert_jax.fill_mask`: the masked-LM head's most likely tokens at
each [MASK] of a text, as `transformers`' fill-mask pipeline gives them."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import bert_jax
from bert_jax.data import masked_text, tokenization
from tests.conftest import ROOT

TEXTS = [
    "The capital of France is [MASK].",
    "[MASK] was born in Hawaii and studied at the [MASK] of Chicago, then Harvard.",
    "Penicillin was discovered in 1928 by Alexander [MASK]",
    "A sentence with its mask at the end of a long row: " + "and it goes on, " * 6 + "[MASK]",
]


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory) -> Path:
    """A random 2-layer `transformers` BertForMaskedLM on the bert-base-uncased vocabulary,
    its output bias spread so that its predictions differ by more than rounding."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():
        model.cls.predictions.bias.normal_(0.0, 2.0)
    folder = tmp_path_factory.mktemp("masked_lm")
    model.save_pretrained(folder)
    shutil.copy(tokenization.default_vocab_file(), folder / "vocab.txt")
    return folder


def test_the_top_tokens_and_scores_are_the_fill_mask_pipelines(masked_lm) -> None:
    got = bert_jax.fill_mask(str(masked_lm), TEXTS, top_k=5, max_seq_length=64)
    tokenizer = transformers.BertTokenizer(str(masked_lm / "vocab.txt"))
    pipe = transformers.pipeline("fill-mask", model=str(masked_lm), tokenizer=tokenizer, top_k=5)
    for text, record in zip(TEXTS, got, strict=True):
        want = pipe(text)
        want = [want] if isinstance(want[0], dict) else want  # one list per mask
        assert len(record["masks"]) == len(want) == text.count("[MASK]")
        for ours, theirs in zip(record["masks"], want, strict=True):
            assert [p["id"] for p in ours] == [p["token"] for p in theirs], text
            assert [p["token"] for p in ours] == [p["token_str"].replace(" ", "") for p in theirs]
            np.testing.assert_allclose([p["score"] for p in ours], [p["score"] for p in theirs], rtol=1e-4)
        best = [m[0]["token"] for m in record["masks"]]
        assert (
            record["filled"] == masked_text.filled(text, "[MASK]", best) and "[MASK]" not in record["filled"]
        )
    # The rows are the pipeline tokenizer's, the masks where its [MASK]s are.
    rows = masked_text.encode(tokenization.load_tokenizer(str(masked_lm / "vocab.txt")), TEXTS, 64)
    for i, text in enumerate(TEXTS):
        ids = tokenizer(text)["input_ids"]
        assert rows.batch["input_ids"][i, : len(ids)].tolist() == ids and rows.lengths[i] == len(ids)
        where = [k for k, t in enumerate(ids) if t == tokenizer.mask_token_id]
        assert rows.positions[i, : rows.counts[i]].tolist() == where


def test_filled_joins_word_pieces_and_drops_the_bpe_space() -> None:
    assert masked_text.filled("un[MASK] and [MASK].", "[MASK]", ["##able", "more"]) == "unable and more."
    assert masked_text.filled("walk [MASK] here", "[MASK]", ["##ing"]) == "walking here"
    assert masked_text.piece_text("\u0120capital") == "capital" and masked_text.piece_text("\u2581x") == "x"


def test_the_command_prints_and_writes_each_texts_masks_and_refuses_in_one_line(masked_lm, tmp_path) -> None:
    lines = tmp_path / "texts.txt"
    lines.write_text(f"{TEXTS[0]}\nno mask on this line\n")
    out = tmp_path / "out" / "predictions.jsonl"

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "bert_jax", "fill-mask", f"--checkpoint={masked_lm}", *args],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
        )  # fmt: skip

    proc = run(f"--input={lines}", f"--output={out}")
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("bert-jax ")]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert errors == [
        f"bert-jax fill-mask: error: line 2 of {lines} has no [MASK] to fill: 'no mask on this line'"
        "  [BERT_JAX_DEBUG=1 for the traceback]"
    ]
    assert not out.parent.exists()  # a refused run makes no folder
    lines.write_text(f"{TEXTS[0]}\n")
    proc = run(f"--text={TEXTS[1]}", f"--input={lines}", f"--output={out}", "--top_k=3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text"] for r in records] == [TEXTS[1], TEXTS[0]]  # --text first, then the file's lines
    assert records == bert_jax.fill_mask(str(masked_lm), [TEXTS[1], TEXTS[0]], top_k=3)
    shown = [ln for ln in proc.stdout.splitlines() if not ln.startswith("warning: ")]  # the fresh pooler
    first = records[0]["masks"][0]
    assert shown[:2] == [
        TEXTS[1],
        "  mask 1: " + "  ".join(f"{j + 1}. {p['token']} {p['score']:.3f}" for j, p in enumerate(first)),
    ]
    assert f"  filled: {records[1]['filled']}" in shown and shown[-1].startswith(
        f"wrote {out}: 2 texts, 3 masks"
    )
    proc = run(f"--text={TEXTS[0]}", f"--output={out}")
    assert proc.returncode == 1 and f"--output {out} already exists" in proc.stderr


def test_a_checkpoint_without_the_head_and_a_cut_mask_are_refused(
    tiny_checkpoint, masked_lm, monkeypatch
) -> None:
    with pytest.raises(ValueError, match=r"has no masked-LM head, .* fill-mask needs one"):
        bert_jax.fill_mask(tiny_checkpoint, TEXTS[:1])
    with pytest.raises(ValueError, match=r"text 1: its \[MASK\] at token 8 of 9 is cut at max_seq_length=8"):
        bert_jax.fill_mask(str(masked_lm), ["one two three four five six [MASK]"], max_seq_length=8)
    with pytest.raises(ValueError, match=r"max_seq_length=80 is longer than the position table"):
        bert_jax.fill_mask(str(masked_lm), TEXTS[:1], max_seq_length=80)
    # A batch whose activations the device cannot hold (a 10 kB device here): one line.
    from bert_jax.training import memory_fit

    with monkeypatch.context() as m:
        m.setattr(memory_fit, "device_bytes", lambda: (10_000, "cpu"))
        with pytest.raises(
            ValueError, match=r"--max_seq_length=\d+ with --batch_size=32: one layer of activations"
        ):
            bert_jax.fill_mask(str(masked_lm), TEXTS * 10)
    # A row cut after its last mask is filled as the pipeline fills the cut row.
    (record,) = bert_jax.fill_mask(
        str(masked_lm), ["Paris is the [MASK] of France, " + "a city " * 20], max_seq_length=16
    )
    assert len(record["masks"]) == 1 and len(record["masks"][0]) == 5


def test_a_pretraining_workdir_fills_masks_in_its_own_vocabulary(tmp_path) -> None:
    from tests.conftest import tiny_pretraining

    workdir = tmp_path / "run"
    bert_jax.pretrain(tiny_pretraining(num_train_steps=2, eval_every_steps=0), str(workdir))
    vocab = tokenization.default_vocab_file()  # the synthetic data's (a text run keeps its own beside it)
    records = bert_jax.fill_mask(str(workdir), ["the [MASK] is here."], top_k=2, vocab_file=vocab)
    (predictions,) = records[0]["masks"]
    assert len(predictions) == 2 and predictions[0]["score"] >= predictions[1]["score"] > 0
