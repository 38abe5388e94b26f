"""Masks drawn eagerly on the host, for tests (training draws them inside its jitted step)."""

import functools

import jax
import numpy as np

from bert_jax.data import masking, run_vocabulary
from bert_jax.data.settings import DataSettings


@functools.cache
def _jitted_mask():
    return jax.jit(masking.mask_batch, static_argnames="spec")


def mask_rows(
    data: DataSettings, rows: dict[str, np.ndarray], max_predictions_per_seq: int
) -> dict[str, np.ndarray]:
    """Unmasked host rows → masked rows, by the data settings' rule (as training masks them)."""
    if "masked_lm_positions" in rows:
        return rows
    spec, table = run_vocabulary.masking_spec(data, max_predictions_per_seq)
    out = _jitted_mask()({k: rows[k] for k in masking.RAW_KEYS}, spec=spec, is_continuation=table)
    return {k: np.asarray(v) for k, v in out.items()}
