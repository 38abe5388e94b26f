"""GLUE and NER metrics against the reference implementations (scikit-learn, scipy,
seqeval). The SQuAD scores are compared with the official scripts in test_squad.py."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import sklearn.metrics
from seqeval.metrics import f1_score, precision_score, recall_score

from bert_jax.tasks import scorers


def test_glue_metrics_match_sklearn_and_scipy() -> None:
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(5, 300))
        labels = rng.integers(0, 2, n)
        flip = rng.random(n) < rng.uniform(0.0, 0.6)
        preds = np.where(flip, 1 - labels, labels)
        if trial == 0:
            preds = np.zeros(n, int)  # no positive prediction: F1 0, MCC undefined → 0
        assert scorers.accuracy(labels, preds) == pytest.approx(sklearn.metrics.accuracy_score(labels, preds))
        assert scorers.f1_binary(labels, preds) == pytest.approx(
            sklearn.metrics.f1_score(labels, preds, zero_division=0)
        )
        assert scorers.matthews_corr(labels, preds) == pytest.approx(
            sklearn.metrics.matthews_corrcoef(labels, preds), abs=1e-12
        )
        x = rng.normal(size=n)
        y = 0.5 * x + rng.normal(size=n)
        xt = np.round(x, 1)  # ties
        assert scorers.pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-10)
        assert scorers.spearman(xt, y) == pytest.approx(scipy.stats.spearmanr(xt, y)[0], abs=1e-10)


TYPES = ("PER", "LOC", "ORG", "MISC")


def _random_tags(rng: np.random.Generator, n: int, scheme: str) -> list[str]:
    prefixes = {"iob1": "OI", "iob2": "OBI", "iobes": "OBIES", "any": "OBIES"}[scheme]
    out = []
    for _ in range(n):
        p = prefixes[int(rng.integers(len(prefixes)))]
        out.append("O" if p == "O" else f"{p}-{TYPES[int(rng.integers(4))]}")
    return out


def test_entity_f1_matches_seqeval() -> None:
    rng = np.random.default_rng(1)
    for scheme in ("iob1", "iob2", "iobes", "any"):
        for _ in range(30):
            lengths = rng.integers(1, 15, size=int(rng.integers(1, 8)))
            gold = [_random_tags(rng, int(n), scheme) for n in lengths]
            # Predictions: gold with some tags replaced (so scores spread over 0..1).
            pred = [[t if rng.random() < 0.7 else _random_tags(rng, 1, scheme)[0] for t in s] for s in gold]
            got = scorers.entity_f1(gold, pred)
            assert got["f1"] == pytest.approx(f1_score(gold, pred), abs=1e-12)
            assert got["precision"] == pytest.approx(precision_score(gold, pred), abs=1e-12)
            assert got["recall"] == pytest.approx(recall_score(gold, pred), abs=1e-12)
    assert scorers.entities(["B-PER", "I-PER", "O", "I-LOC", "I-LOC", "B-LOC"]) == [
        ("PER", 0, 1),
        ("LOC", 3, 4),
        ("LOC", 5, 5),
    ]
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
        scorers.entity_f1([["O", "O"]], [["O"]])
