"""The paper's ablations, one pre-training config per table row.

`--config=configs/ablations.py:TABLE[.PRESET]` gives a table: ``rows.<name>`` is each row's
complete pre-training config (`configs/pretrain.py:PRESET` plus the row's changes), so any
key of one row can be overridden (`--config.rows.no_nsp.learning_rate=2e-4`). PRESET is
the scale every row runs at (default `base`, the paper's; `demo` or `tiny` on a CPU).
`bert-jax ablate` pre-trains each row, optionally fine-tunes each on one task, and writes
the report.

- ``table5`` (§5.1, effect of the pre-training tasks): BERT with MLM + NSP, No NSP,
  LTR & No NSP (a left-to-right LM with causal attention). The "+ BiLSTM" row needs a
  BiLSTM head that is not built.
- ``table6`` (§5.2, model size): the six (L, H, A) rows; H/4 per head, 4H feed-forward.
  The sizes are the paper's at every PRESET.
- ``table8`` (Appendix C.2, masking strategies): the MASK / SAME / RND proportions of
  the chosen 15%.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import ml_collections

from bert_jax.ablations import set_keys

# table -> row -> {dotted key: value} applied to the preset's pre-training config.
TABLES: dict[str, dict[str, dict[str, Any]]] = {
    "table5": {
        "bert_base": {},
        "no_nsp": {"data.nsp": False},
        "ltr_no_nsp": {"data.nsp": False, "data.objective": "ltr", "model.causal_attention": True},
    },
    "table6": {
        f"L{layers}_H{hidden}_A{heads}": {
            "model.num_hidden_layers": layers,
            "model.hidden_size": hidden,
            "model.num_attention_heads": heads,
            "model.intermediate_size": 4 * hidden,
        }
        for layers, hidden, heads in (
            (3, 768, 12),
            (6, 768, 3),
            (6, 768, 12),
            (12, 768, 12),
            (12, 1024, 16),
            (24, 1024, 16),
        )
    },
    "table8": {
        f"mask{round(100 * m)}_same{round(100 * (1 - m - r))}_rnd{round(100 * r)}": {
            "data.mask_token_prob": m,
            "data.random_token_prob": r,
        }
        for m, r in ((0.8, 0.1), (1.0, 0.0), (0.8, 0.2), (0.8, 0.0), (0.0, 0.8), (0.0, 1.0))
    },
}


def _pretrain_config(preset: str) -> ml_collections.ConfigDict:
    """configs/pretrain.py loaded by path (config files need not be an importable package)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrain.py")
    spec = importlib.util.spec_from_file_location("_ablation_pretrain_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(preset)


def get_config(spec: str = "table5") -> ml_collections.ConfigDict:
    table, _, preset = spec.partition(".")
    if table not in TABLES:
        raise ValueError(f"unknown ablation table {table!r}; choose from {', '.join(TABLES)}")
    c = ml_collections.ConfigDict()
    c.table = table
    c.preset = preset or "base"
    c.row_order = tuple(TABLES[table])  # the paper's order (ConfigDict keys iterate sorted)
    c.rows = ml_collections.ConfigDict(
        {row: set_keys(_pretrain_config(c.preset), changes) for row, changes in TABLES[table].items()}
    )
    return c
