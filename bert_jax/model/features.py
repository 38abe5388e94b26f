"""Feature-based BERT (the paper's §5.3, Table 7): per-token hidden states of chosen layers.

Layers are counted as in the paper's table: ``-1`` is the last Transformer layer, ``0`` the
embedding output. Several layers are combined as the table's rows do:

- ``concat``: along the hidden axis ("Concat Last Four Hidden" is layers ``-1,-2,-3,-4``);
- ``sum``: a weighted sum with fixed weights (default 1 each: "Weighted Sum Last Four
  Hidden" with equal weights);
- ``stack``: ``[examples, tokens, layers, hidden]``, for a downstream model that learns the
  mixing weights itself (the paper's weighted sums are learned with the task's BiLSTM).

Padding positions are zeroed, so the output can be compared position by position with
another implementation.

Input text (`read_examples`): one example per line, so row i of the output is line i of
the file, as `bert-jax tokenize` numbers them. A blank line is an empty example (its row
holds ``[CLS] [SEP]`` and padding, as `tokenize` gives no ids for it); lines end at "\\n"
only. Bytes that are not UTF-8 become U+FFFD, counted in one ``warning:`` line.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import numpy as np

from bert_jax.data import text_files
from bert_jax.model.config import BertConfig
from bert_jax.model.encoder import BertModel
from bert_jax.model.numerics import DEFAULT, Numerics


def read_examples(path: str) -> tuple[list[str], list[str | None] | None]:
    """One example per line, each taken as it is (see the module docstring): a tab
    separates sentence A from sentence B, a line without one is a single sentence (B is
    None), a blank line an empty one; no B anywhere gives None."""
    lines = text_files.read_lines(path)
    if not lines:
        raise ValueError(f"{path} is empty: features need one example per line")
    parts = [ln.split("\t", 1) for ln in lines]
    if not any(len(p) == 2 for p in parts):
        return [p[0] for p in parts], None
    return [p[0] for p in parts], [p[1] if len(p) == 2 else None for p in parts]


def parse_layers(spec: Sequence[str], num_layers: int) -> list[int]:
    """``["-1", "-2"]`` → ``[-1, -2]``; ``["all"]`` → every Transformer layer (1..L), as the
    table's "Weighted Sum All 12 Layers"."""
    if list(spec) == ["all"]:
        return list(range(1, num_layers + 1))
    try:
        layers = [int(x) for x in spec]
    except ValueError:
        raise ValueError(f"layers must be integers or 'all', got {','.join(spec)}") from None
    if any(not -num_layers - 1 <= layer <= num_layers for layer in layers):
        raise ValueError(
            f"layers {','.join(spec)} out of range for a {num_layers}-layer model (0 the embeddings, "
            f"1..{num_layers} the layers, -1..-{num_layers + 1} from the last)"
        )
    return layers


def extract(
    params: dict,
    config: BertConfig,
    batch: dict[str, np.ndarray],
    layers: Sequence[int],
    batch_size: int = 32,
    combine: str = "concat",
    weights: Sequence[float] | None = None,
    numerics: Numerics = DEFAULT,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """float32, zero at padding: ``[examples, tokens, hidden x len(layers)]`` for concat,
    ``[examples, tokens, hidden]`` for sum, ``[examples, tokens, len(layers), hidden]`` for
    stack. Computed with `numerics` (float32 by default, whatever the checkpoint was trained
    in: numerics are the run's, not the model's), `batch_size` examples a pass: one
    compiled program (the last batch is padded), the parameters its argument (not
    constants folded into it). `progress(n)` is told of every `n` examples done."""
    model = BertModel(config, numerics, add_pooler=False)
    num = config.num_hidden_layers
    index = [layer if layer >= 0 else num + 1 + layer for layer in layers]
    if any(not 0 <= i <= num for i in index):
        raise ValueError(f"layers {list(layers)} out of range for a {num}-layer model")
    if combine not in ("concat", "sum", "stack"):
        raise ValueError(f"combine must be concat, sum or stack, got {combine!r}")
    if weights is not None and (combine != "sum" or len(weights) != len(index)):
        raise ValueError(
            f"{len(weights)} layer weights given for combine={combine!r} over {len(index)} layers"
        )
    w = np.ones(len(index), np.float32) if weights is None else np.asarray(weights, np.float32)

    @jax.jit
    def hidden(params: dict, ids: jax.Array, mask: jax.Array, seg: jax.Array) -> tuple:
        _, _, states = model.apply({"params": params}, ids, mask, seg, output_hidden_states=True)
        return tuple(states[i] for i in index)

    on_device, total, out = jax.device_put(params), len(batch["input_ids"]), []
    for start in range(0, total, batch_size):
        sl = slice(start, start + batch_size)
        rows = [batch[k][sl] for k in ("input_ids", "input_mask", "segment_ids")]
        n = len(rows[0])
        if n < batch_size < total:  # the last batch, padded to the compiled shape
            rows = [np.concatenate([r, np.zeros((batch_size - n, *r.shape[1:]), r.dtype)]) for r in rows]
        states = [np.asarray(s[:n], np.float32) for s in hidden(on_device, *rows)]
        if combine == "concat":
            feats = np.concatenate(states, axis=-1)
        elif combine == "sum":
            feats = sum(wi * s for wi, s in zip(w, states, strict=True))
        else:
            feats = np.stack(states, axis=2)
        mask = batch["input_mask"][sl].reshape(*feats.shape[:2], *([1] * (feats.ndim - 2)))
        out.append(feats * mask.astype(np.float32))
        if progress is not None:
            progress(n)
    return np.concatenate(out)
