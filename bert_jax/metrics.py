"""Evaluation metrics of the GLUE tasks (accuracy, F1, Matthews correlation, Pearson and
Spearman correlation), in numpy, with the definitions the GLUE benchmark uses."""

from __future__ import annotations

import numpy as np


def accuracy(labels: np.ndarray, preds: np.ndarray) -> float:
    return float(np.mean(np.asarray(labels) == np.asarray(preds)))


def f1_binary(labels: np.ndarray, preds: np.ndarray, positive: int = 1) -> float:
    labels, preds = np.asarray(labels), np.asarray(preds)
    tp = np.sum((preds == positive) & (labels == positive))
    fp = np.sum((preds == positive) & (labels != positive))
    fn = np.sum((preds != positive) & (labels == positive))
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def matthews_corr(labels: np.ndarray, preds: np.ndarray) -> float:
    """Binary Matthews correlation (CoLA); 0 when undefined, as scikit-learn."""
    labels, preds = np.asarray(labels).astype(bool), np.asarray(preds).astype(bool)
    tp = float(np.sum(preds & labels))
    tn = float(np.sum(~preds & ~labels))
    fp = float(np.sum(preds & ~labels))
    fn = float(np.sum(~preds & labels))
    denom = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denom) if denom else 0.0


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denom = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denom) if denom else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks for ties (as scipy.stats.rankdata)."""
    x = np.asarray(x)
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), np.float64)
    sorted_x = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(_ranks(x), _ranks(y))
