"""Parameter names of bert_jax, Hugging Face and the original TF release, as data.

Each row of `EMBEDDINGS`, `LAYER` (once per encoder layer, ``{i}`` the layer index),
`POOLER` and `HEADS` names one module in the three formats and its kind; `KINDS` says
which tensors a kind holds and how each is laid out elsewhere, as a list of named steps
applied to the foreign array to get bert_jax's (and undone, in reverse, on export):

- ``transpose``: a 2-D transpose (HF `Linear` weights are [out, in]; TF's and ours [in, out]);
- ``split_heads``: the last axis [N*D] → [N, D] (query/key/value kernels [H, N, D] and biases);
- ``split_heads_first``: the first axis [N*D] → [N, D] (the attention output kernel [N, D, H]).

Only the real vocabulary appears here: padding rows (`vocab_padding`) are added after a
load and removed before an export.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from bert_jax.model.config import BertConfig

# The layout steps (see the module docstring).
STEPS = ("transpose", "split_heads", "split_heads_first")

# kind → its tensors: (bert_jax leaf, HF suffixes (the first is written; others are read,
# e.g. old LayerNorm names), TF suffix, HF layout, TF layout).
KINDS: dict[str, tuple[tuple[str, tuple[str, ...], str, tuple[str, ...], tuple[str, ...]], ...]] = {
    "dense": (
        ("kernel", (".weight",), "/kernel", ("transpose",), ()),
        ("bias", (".bias",), "/bias", (), ()),
    ),
    "norm": (
        ("scale", (".weight", ".gamma"), "/gamma", (), ()),
        ("bias", (".bias", ".beta"), "/beta", (), ()),
    ),
    "embedding": (("embedding", (".weight",), "", (), ()),),
    "vector": (("", ("",), "", (), ()),),
    "heads_in": (
        ("kernel", (".weight",), "/kernel", ("transpose", "split_heads"), ("split_heads",)),
        ("bias", (".bias",), "/bias", ("split_heads",), ("split_heads",)),
    ),
    "heads_out": (
        ("kernel", (".weight",), "/kernel", ("transpose", "split_heads_first"), ("split_heads_first",)),
        ("bias", (".bias",), "/bias", (), ()),
    ),
    # TF stores the NSP layer as "output_weights" [2, H] (like HF's Linear) and "output_bias".
    "classifier": (
        ("kernel", (".weight",), "/output_weights", ("transpose",), ("transpose",)),
        ("bias", (".bias",), "/output_bias", (), ()),
    ),
}

assert all(step in STEPS for tensors in KINDS.values() for t in tensors for step in (*t[3], *t[4]))

# (bert_jax module, HF module, TF module, kind).
EMBEDDINGS = (
    (
        "bert/embeddings/word_embeddings",
        "bert.embeddings.word_embeddings",
        "bert/embeddings/word_embeddings",
        "embedding",
    ),
    (
        "bert/embeddings/position_embeddings",
        "bert.embeddings.position_embeddings",
        "bert/embeddings/position_embeddings",
        "embedding",
    ),
    (
        "bert/embeddings/token_type_embeddings",
        "bert.embeddings.token_type_embeddings",
        "bert/embeddings/token_type_embeddings",
        "embedding",
    ),
    ("bert/embeddings/LayerNorm", "bert.embeddings.LayerNorm", "bert/embeddings/LayerNorm", "norm"),
)
# Per encoder layer: the names below after these prefixes.
LAYER_PREFIX = ("bert/encoder/layer_{i}/", "bert.encoder.layer.{i}.", "bert/encoder/layer_{i}/")
LAYER = (
    ("attention/query", "attention.self.query", "attention/self/query", "heads_in"),
    ("attention/key", "attention.self.key", "attention/self/key", "heads_in"),
    ("attention/value", "attention.self.value", "attention/self/value", "heads_in"),
    ("attention/output", "attention.output.dense", "attention/output/dense", "heads_out"),
    ("attention_LayerNorm", "attention.output.LayerNorm", "attention/output/LayerNorm", "norm"),
    ("intermediate", "intermediate.dense", "intermediate/dense", "dense"),
    ("output", "output.dense", "output/dense", "dense"),
    ("output_LayerNorm", "output.LayerNorm", "output/LayerNorm", "norm"),
)
POOLER = (("bert/pooler/dense", "bert.pooler.dense", "bert/pooler/dense", "dense"),)
HEADS = (
    ("mlm/transform", "cls.predictions.transform.dense", "cls/predictions/transform/dense", "dense"),
    (
        "mlm/transform_LayerNorm",
        "cls.predictions.transform.LayerNorm",
        "cls/predictions/transform/LayerNorm",
        "norm",
    ),
    ("mlm/bias", "cls.predictions.bias", "cls/predictions/output_bias", "vector"),
    ("nsp", "cls.seq_relationship", "cls/seq_relationship", "classifier"),
)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One tensor: its bert_jax path, HF names (the first is written), TF name, layouts."""

    path: tuple[str, ...]
    hf: tuple[str, ...]
    tf: str
    hf_layout: tuple[str, ...]
    tf_layout: tuple[str, ...]


def _modules(config: BertConfig, heads: bool) -> list[tuple[str, str, str, str]]:
    layers = [
        (*(p.format(i=i) + name for p, name in zip(LAYER_PREFIX, row[:3], strict=True)), row[3])
        for i in range(config.num_hidden_layers)
        for row in LAYER
    ]
    return [*EMBEDDINGS, *layers, *POOLER, *(HEADS if heads else ())]


def entries(config: BertConfig, heads: bool) -> list[Entry]:
    """Every tensor of the encoder (and the pre-training heads when `heads`)."""
    out = []
    for jax_name, hf_name, tf_name, kind in _modules(config, heads):
        for leaf, hf_suffixes, tf_suffix, hf_layout, tf_layout in KINDS[kind]:
            path = tuple(jax_name.split("/")) + ((leaf,) if leaf else ())
            hf = tuple(hf_name + s for s in hf_suffixes)
            out.append(Entry(path, hf, tf_name + tf_suffix, hf_layout, tf_layout))
    return out


def _split_heads(x: np.ndarray, n: int, first: bool) -> np.ndarray:
    return x.reshape(n, -1, *x.shape[1:]) if first else x.reshape(*x.shape[:-1], n, -1)


def _merge_heads(x: np.ndarray, first: bool) -> np.ndarray:
    return x.reshape(-1, *x.shape[2:]) if first else x.reshape(*x.shape[:-2], -1)


def to_jax(x: np.ndarray, layout: tuple[str, ...], config: BertConfig) -> np.ndarray:
    """A foreign array in bert_jax's layout (the `layout` steps in order)."""
    n = config.num_attention_heads
    for step in layout:
        if step == "transpose":
            x = x.T
        else:
            if x.shape[-1 if step == "split_heads" else 0] != config.hidden_size:
                raise ValueError(f"{x.shape} does not split into {n} heads of {config.head_dim}")
            x = _split_heads(x, n, first=step == "split_heads_first")
    return np.ascontiguousarray(x)


def from_jax(x: np.ndarray, layout: tuple[str, ...]) -> np.ndarray:
    """A bert_jax array in the foreign layout (the `layout` steps undone, in reverse)."""
    for step in reversed(layout):
        x = x.T if step == "transpose" else _merge_heads(x, first=step == "split_heads_first")
    return np.ascontiguousarray(x)
