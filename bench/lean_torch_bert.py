"""A lean PyTorch BERT for the time-to-quality benchmark: the same model and recipe as a
bert_jax config, written the way the small-compute recipes train it (Cramming,
MosaicBERT: "sparse prediction", the output layer run at the masked positions only).

Pre-LN or post-LN layers, GELU or GeGLU feed-forward, learned or rotary positions, with or
without biases: the switches of `bert_jax.model.config.BertConfig`. Not a peer of the library's
API, a peer of its arithmetic: the strongest straightforward PyTorch of the recipe.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from bert_jax.model.config import BertConfig


class _Layer(nn.Module):
    def __init__(self, c: BertConfig) -> None:
        super().__init__()
        h, f, b = c.hidden_size, c.intermediate_size, c.use_bias
        self.c = c
        self.qkv = nn.Linear(h, 3 * h, bias=b)
        self.out = nn.Linear(h, h, bias=b)
        self.inner = nn.Linear(h, 2 * f if c.gated_ffn else f, bias=b)
        self.outer = nn.Linear(f, h, bias=b)
        self.norm_attention = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.norm_output = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def attention(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        b, s, h = x.shape
        n = self.c.num_attention_heads
        q, k, v = self.qkv(x).view(b, s, 3, n, h // n).permute(2, 0, 3, 1, 4)  # each [B, N, S, D]
        if rope is not None:
            q, k = _rotate(q, *rope), _rotate(k, *rope)
        ctx = F.scaled_dot_product_attention(q, k, v)  # full rows: no padding mask
        return self.out(ctx.transpose(1, 2).reshape(b, s, h))

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = self.inner(x)
        if self.c.gated_ffn:
            value, gate = inner.chunk(2, dim=-1)
            return self.outer(F.gelu(gate) * value)
        return self.outer(F.gelu(inner))

    def forward(self, x: torch.Tensor, rope) -> torch.Tensor:
        if self.c.pre_layer_norm:
            x = x + self.attention(self.norm_attention(x), rope)
            return x + self.feed_forward(self.norm_output(x))
        x = self.norm_attention(x + self.attention(x, rope))
        return self.norm_output(x + self.feed_forward(x))


def _rotate(x: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class LeanBertForMaskedLM(nn.Module):
    """Embeddings → layers (→ final LayerNorm) → MLM head at the masked positions only."""

    def __init__(self, c: BertConfig, max_len: int) -> None:
        super().__init__()
        h = c.hidden_size
        self.c = c
        self.words = nn.Embedding(c.vocab_size, h)
        self.positions = None if c.rotary else nn.Embedding(c.max_position_embeddings, h)
        # BERT's segment embeddings, as bert_jax's model has them (rows of one segment: type 0).
        self.token_types = nn.Embedding(c.type_vocab_size, h) if c.type_vocab_size else None
        self.norm_embeddings = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.layers = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))
        self.norm_final = nn.LayerNorm(h, eps=c.layer_norm_eps) if c.pre_layer_norm else None
        self.transform = nn.Linear(h, h, bias=c.use_bias)
        self.norm_transform = nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.decoder_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.rope = None
        if c.rotary:
            d = h // c.num_attention_heads
            inv_freq = c.rotary_base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
            angles = torch.arange(max_len, dtype=torch.float32)[:, None] * inv_freq
            self.rope = (angles.sin(), angles.cos())
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.trunc_normal_(
                    module.weight,
                    std=c.initializer_range,
                    a=-2 * c.initializer_range,
                    b=2 * c.initializer_range,
                )
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def logits(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """MLM logits [B, P, V] at the [B, P] masked positions only."""
        s = ids.shape[1]
        x = self.words(ids)
        if self.positions is not None:
            x = x + self.positions.weight[:s]
        if self.token_types is not None:
            x = x + self.token_types.weight[0]
        x = self.norm_embeddings(x)
        rope = None if self.rope is None else (self.rope[0][:s], self.rope[1][:s])
        for layer in self.layers:
            x = layer(x, rope)
        if self.norm_final is not None:
            x = self.norm_final(x)
        picked = torch.gather(x, 1, positions[..., None].expand(-1, -1, x.shape[-1]))  # [B, P, H]
        hidden = self.norm_transform(F.gelu(self.transform(picked)))
        return hidden @ self.words.weight.T + self.decoder_bias

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor
    ):
        """Summed cross-entropy over the weighted masked positions [B, P], and its weight."""
        logits = self.logits(ids, positions)
        losses = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
        return (losses * weights.flatten()).sum(), weights.sum()


def adamw(model: nn.Module, lr: float, b2: float, eps: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW without decay on biases and LayerNorms (the paper's, and bert_jax's, mask)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, b2), eps=eps)
