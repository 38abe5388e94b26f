"""The standard deviation each kernel starts from: the paper's one value, or ModernBERT's
depth-scaled scheme for a model of the ModernBERT family.

The paper's BERT (and the original ``modeling.py``) draws every kernel and embedding from
a normal of std ``initializer_range`` (0.02) truncated at two standard deviations.
`transformers`' ModernBERT (``ModernBertPreTrainedModel._init_weights``; Warner et al.,
2024) draws from the same truncated normal (cut at ``initializer_cutoff_factor`` = 2
stds, as flax's `truncated_normal` is), with three stds by kind:

- "in": the embeddings and the input projections (query/key/value, the feed-forward's
  ``Wi``, both GeGLU halves): ``initializer_range``;
- "out": the projections back into the residual stream (attention output, feed-forward
  output), the prediction head's dense (MLM transform, pooling head) and an untied MLM
  decoder: ``initializer_range / sqrt(2 * num_hidden_layers)``;
- "final_out": a task classifier (sequence or token classification, multiple choice,
  span prediction): ``hidden_size ** -0.5``.

Biases start at zero and LayerNorm scales at one in both schemes.
"""

from __future__ import annotations

import math

from bert_jax.model.config import BertConfig

KINDS = ("in", "out", "final_out")


def modernbert_family(config: BertConfig) -> bool:
    """Whether `config` is a model of the ModernBERT family: the architecture that
    `transformers`' ModernBERT holds (and that ``convert --dst_format=hf`` exports as one),
    i.e. pre-LN, GeGLU, rotary positions, no attention LayerNorm in layer 0, bidirectional,
    and at most one segment row (ModernBERT has no segment embedding).

    Such a model starts where a `transformers` ModernBERT of its config starts. The rule
    is the whole architecture, not one switch such as `pre_layer_norm`: the recipes that
    borrow some of ModernBERT's switches at BERT's architecture (Cramming's pre-LN and
    GeGLU, the `modernbert` recipe at the BERT sizes, which keeps layer 0's attention
    LayerNorm and a segment embedding) are not ModernBERTs and keep the paper's
    initialisation, and their documented runs with it. `first_layer_attention_norm=False`,
    a switch only ModernBERT has, is what sets a family model apart from those."""
    c = config
    return (
        c.pre_layer_norm
        and c.gated_ffn
        and c.rotary
        and not c.first_layer_attention_norm
        and not c.causal_attention
        and c.type_vocab_size <= 1
    )


def init_std(config: BertConfig, kind: str = "in") -> float:
    """The (untruncated) std of a kernel of `kind` (`KINDS`): `initializer_range` for
    every kind outside the ModernBERT family, else ModernBERT's std of that kind."""
    if kind not in KINDS:
        raise ValueError(f"Unknown initialisation kind {kind!r}; choose from {KINDS}")
    if kind == "in" or not modernbert_family(config):
        return config.initializer_range
    if kind == "out":
        return config.initializer_range / math.sqrt(2.0 * config.num_hidden_layers)
    return config.hidden_size**-0.5
