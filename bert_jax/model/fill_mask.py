"""The masked-LM head's most likely tokens at given positions (`bert-jax fill-mask`).

What the pre-training objective (§3.1, "Task #1: Masked LM") learned, read back: the
probabilities over the vocabulary at each masked position (a softmax of the head's logits;
the rows that pad the vocabulary get none) and the `top_k` most likely tokens, as
`transformers`' fill-mask pipeline gives them.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.model import batched
from bert_jax.model.config import BertConfig
from bert_jax.model.heads import BertForMaskedLM
from bert_jax.model.numerics import DEFAULT, Numerics


def top_tokens(
    params: dict,
    config: BertConfig,
    batch: dict[str, np.ndarray],
    positions: np.ndarray,
    top_k: int = 5,
    batch_size: int = 32,
    numerics: Numerics = DEFAULT,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Ids and probabilities (float32) of the `top_k` tokens at `positions` [N, P] of each
    row, each [N, P, top_k], most likely first. `params` holds ``bert`` and ``mlm``
    (pre-training's, or a ``BertForMaskedLM``'s). `batch_size` rows a pass: one compiled
    program (the last batch padded), the parameters its argument."""
    if not 1 <= top_k <= config.vocab_size:
        raise ValueError(f"top_k={top_k}: between 1 and the vocabulary's {config.vocab_size:,} tokens")
    model = BertForMaskedLM(config, numerics)
    weights = {"bert": params["bert"], "mlm": params["mlm"]}

    @jax.jit
    def best(weights: dict, ids: jax.Array, mask: jax.Array, seg: jax.Array, where: jax.Array) -> tuple:
        logits = model.apply({"params": weights}, ids, mask, seg, where)
        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
        p, i = jax.lax.top_k(probs, top_k)
        return i, p

    rows = [batch[k] for k in ("input_ids", "input_mask", "segment_ids")] + [positions]
    ids, probs = batched.apply_in_batches(best, weights, rows, batch_size, progress)
    return ids, probs.astype(np.float32)
