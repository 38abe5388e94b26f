"""The paper's ablations (§5, Appendix C): every table's rows, its columns and the
published numbers.

`--config=configs/ablations.py:TABLE[.PRESET][+COLUMN...]` gives one table
(`TABLE[.PRESET]/ROW` one row's pre-training config, e.g. for `bert-jax plan`):

- ``rows.<row>``: the complete pre-training config of every row that pre-trains
  (`configs/pretrain.py:PRESET` plus the row's changes), so any key of one row can be
  overridden (`--config.rows.no_nsp.learning_rate=2e-4`);
- ``row_settings.<row>``: for every row, whose pre-trained model it uses (``model_from``:
  itself, or another row's, as "+ BiLSTM" uses the LTR model) and how it is fine-tuned
  (``head``: "" or "bilstm"; ``approach``: "" for the column's, or "features";
  ``layers``/``combine`` of the feature-based approach; ``random_init``: fine-tuned from
  fresh weights of that model's shape, the ``random_init`` baseline row);
- ``columns.<column>``: what a column measures (`configs/ablation_columns.py`):
  ``approach`` "finetune" (the fine-tuning config under ``finetune``, the dev ``metric``
  of its results and the ``report_metric`` reported; a ``grid`` of hyper-parameters
  chosen on dev), "features" (a BiLSTM trained on frozen features of ``layers``, combined
  by ``combine``, with the task data of ``finetune``: NER tags, or a sentence(-pair)
  class) or "lm_ppl" (exp of the held-out LM loss of pre-training); ``stands_for``: the
  paper's column an offline column stands in for;
- ``feature_bilstm``: the size and training of the feature-based approach's BiLSTM;
- ``finetune_seeds``: fine-tuning restarts per cell (seeds 0..n-1; mean, std and each
  kept); ``grid_seeds``: the seeds each grid point runs before the best is chosen;
- ``processes``: runs at once (pre-training rows and fine-tuning seeds), one process per
  core (default 1: one after another on every core; `bert_jax.ablations.parallel`);
- ``compilation_cache``: JAX's persistent compilation cache for the table's runs (""
  ``WORKDIR/xla_cache``, "none" off, or a folder);
- ``paper.<row>.<column>``: the published dev figure (absent where the paper has none);
- ``data_dirs``: task data per family, used where a column's own ``finetune.data_dir`` is
  empty: ``glue``, ``squad``, ``conll2003``: "tfds" (default; ``tfds:<dir>`` for a TFDS
  data folder: glue/<task>, squad/v1.1, conll2003) or the original files' folder;
  ``swag``: the release's folder; ``bbc``: "" (bundled); ``downstream``: "" (the cache
  of `bash scripts/setup_env.sh downstream`) or a folder of that layout.

PRESET is the scale (default ``base``, the paper's): ``tiny`` (tests), ``demo`` (a CPU
in minutes per row), ``cpu`` (26 min to under 2 h per table on a 2-core machine, offline: see
`CPU_PRETRAIN`), ``base``. ``demo`` and ``cpu`` pre-train with the demo's modern recipe
(`ABLATION_BASE`: a small model leaves the unigram stage within their budget, the
paper's recipe does not); ``demo_paper`` and ``cpu_paper`` with the paper's. At
``tiny``/``demo`` the model sizes of Tables 6 and 7 are scaled down (hidden width / 8,
same layers and heads; ``cpu`` also divides the layers by 3), and fine-tuning runs on a
subset.

At ``cpu`` every table pre-trains on the text that ships offline (the Wikipedia excerpt
and the BBC News articles of the ``bbc`` task's train split; 5% of documents held out for
the LM figures) and gains the ``bbc`` column (BBC News topics, 3 restarts; in Table 7's
feature-based rows a BiLSTM on the frozen layers classifies the topics; ``+bbc_features``
adds the same BiLSTM on the two layers of an L2 model, e.g. to Table 8 as the offline
counterpart of its feature-based NER column, where the paper's mixes differ most). The paper's
columns stay in the report; those whose task data needs a network have ``skip`` set (a
reason, shown in the report) and are not run: ``--config.columns.mnli_m.skip=''`` runs one
where TFDS can download.
``+COLUMN`` adds a column from `COLUMNS` (e.g. ``table5.demo+bbc`` adds BBC News topics),
``+SET`` a set of them: ``+qa``, ``+pairs``, ``+sentiment``, ``+offline`` (the offline
downstream suite, scored on test at hyper-parameters chosen on dev). Tables 5-8
have a ``random_init`` row at ``tiny``/``demo``/``cpu`` (``+random_init`` at ``base``):
the first row's model (Tables 6 and 7: BERT-Base's shape) fine-tuned from fresh weights;
Table 7 also ``random_init_embeddings``, the feature-based approach on the frozen
embeddings of fresh weights.

Tables: ``table5`` (pre-training tasks), ``table6`` (model size), ``table7`` (feature-based
vs fine-tuning, CoNLL-2003 NER), ``table8`` (masking mixes), ``figure5`` (MNLI-m against
pre-training steps, MLM and LTR; ``steps`` are the step counts fine-tuned from).
"""

from __future__ import annotations

from typing import Any

import ml_collections

from bert_jax.training import run_config
from bert_jax.training.run_config import set_keys

columns = run_config.sibling(__file__, "ablation_columns")
COLUMNS, COLUMN_SETS, OFFLINE_COLUMNS = columns.COLUMNS, columns.COLUMN_SETS, columns.OFFLINE_COLUMNS

_TABLE6_SIZES = ((3, 768, 12), (6, 768, 3), (6, 768, 12), (12, 768, 12), (12, 1024, 16), (24, 1024, 16))
_TABLE8_MIXES = ((0.8, 0.1), (1.0, 0.0), (0.8, 0.2), (0.8, 0.0), (0.0, 0.8), (0.0, 1.0))


def _size(layers: int, hidden: int, heads: int) -> dict[str, Any]:
    return {
        "model.num_hidden_layers": layers,
        "model.hidden_size": hidden,
        "model.num_attention_heads": heads,
        "model.intermediate_size": 4 * hidden,
    }


def _mix_name(m: float, r: float) -> str:
    return f"mask{round(100 * m)}_same{round(100 * (1 - m - r))}_rnd{round(100 * r)}"


# Each table: its columns, its rows (name -> pre-training changes, or None for a row that
# uses another row's model), the rows' fine-tuning settings, and the paper's figures.
_LTR = {"data.nsp": False, "data.objective": "ltr", "model.causal_attention": True}
TABLES: dict[str, dict[str, Any]] = {
    "table5": dict(
        title="Table 5: ablation over the pre-training tasks",
        columns=("mnli_m", "qnli", "mrpc", "sst2", "squad_f1"),
        rows={"bert_base": {}, "no_nsp": {"data.nsp": False}, "ltr_no_nsp": _LTR, "plus_bilstm": None},
        settings={"plus_bilstm": dict(model_from="ltr_no_nsp", head="bilstm")},
        baseline_from="bert_base",
        paper={
            "bert_base": (84.4, 88.4, 86.7, 92.7, 88.5),
            "no_nsp": (83.9, 84.9, 86.5, 92.6, 87.9),
            "ltr_no_nsp": (82.1, 84.3, 77.5, 92.1, 77.8),
            "plus_bilstm": (82.1, 84.1, 75.7, 91.6, 84.9),
        },
    ),
    "table6": dict(
        title="Table 6: ablation over BERT model size (fine-tuning: mean of the restarts)",
        columns=("lm_ppl", "mnli_m", "mrpc", "sst2"),
        rows={f"L{a}_H{b}_A{c}": _size(a, b, c) for a, b, c in _TABLE6_SIZES},
        scaled_sizes=True,
        finetune_seeds=5,
        baseline_from="L12_H768_A12",
        paper={
            f"L{a}_H{b}_A{c}": v
            for (a, b, c), v in zip(
                _TABLE6_SIZES,
                (
                    (5.84, 77.9, 79.8, 88.4),
                    (5.24, 80.6, 82.2, 90.7),
                    (4.68, 81.9, 84.8, 91.3),
                    (3.99, 84.4, 86.7, 92.9),
                    (3.54, 85.7, 86.9, 93.3),
                    (3.23, 86.6, 87.8, 93.7),
                ),
                strict=True,
            )
        },
    ),
    "table7": dict(
        title="Table 7: CoNLL-2003 NER, fine-tuning vs feature-based (BiLSTM on frozen BERT-Base)",
        columns=("ner_f1",),
        rows={
            "finetune_large": _size(24, 1024, 16),
            "finetune_base": _size(12, 768, 12),
            "embeddings": None,
            "second_to_last_hidden": None,
            "last_hidden": None,
            "weighted_sum_last_four": None,
            "concat_last_four": None,
            "weighted_sum_all_12": None,
        },
        scaled_sizes=True,
        baseline_from="finetune_base",
        # Beside random_init (fine-tuned from fresh weights): the feature-based approach on
        # the frozen embeddings of fresh weights, what pre-trained features have to beat.
        feature_baselines={"random_init_embeddings": ("0", "concat")},
        settings={
            row: dict(model_from="finetune_base", approach="features", layers=layers, combine=combine)
            for row, layers, combine in (
                ("embeddings", "0", "concat"),
                ("second_to_last_hidden", "-2", "concat"),
                ("last_hidden", "-1", "concat"),
                ("weighted_sum_last_four", "-1,-2,-3,-4", "weighted"),
                ("concat_last_four", "-1,-2,-3,-4", "concat"),
                ("weighted_sum_all_12", "all", "weighted"),
            )
        },
        paper={
            "finetune_large": (96.6,),
            "finetune_base": (96.4,),
            "embeddings": (91.0,),
            "second_to_last_hidden": (95.6,),
            "last_hidden": (94.9,),
            "weighted_sum_last_four": (95.9,),
            "concat_last_four": (96.1,),
            "weighted_sum_all_12": (95.5,),
        },
    ),
    "table8": dict(
        title="Table 8: ablation over the masking mixes (MASK/SAME/RND of the chosen 15%)",
        columns=("mnli_m", "ner_finetune_f1", "ner_feature_f1"),
        baseline_from=_mix_name(0.8, 0.1),
        rows={
            _mix_name(m, r): {"data.mask_token_prob": m, "data.random_token_prob": r}
            for m, r in _TABLE8_MIXES
        },
        paper={
            _mix_name(m, r): v
            for (m, r), v in zip(
                _TABLE8_MIXES,
                (
                    (84.2, 95.4, 94.9),
                    (84.3, 94.9, 94.0),
                    (84.1, 95.2, 94.6),
                    (84.4, 95.2, 94.7),
                    (83.7, 94.8, 94.6),
                    (83.6, 94.9, 94.1),
                ),
                strict=True,
            )
        },
    ),
    "figure5": dict(
        title="Figure 5: MNLI-m dev accuracy against pre-training steps, MLM and LTR",
        columns=("mnli_m",),
        rows={"mlm": {}, "ltr": _LTR},
        paper={},  # published as a plot only
    ),
}

# Step counts Figure 5 fine-tunes from, per preset (the paper: every 200k to 1M).
FIGURE5_STEPS = {
    "base": (200_000, 400_000, 600_000, 800_000, 1_000_000),
    "tiny": (3, 6),
    "demo": (250, 500, 1000),
    "cpu": (300, 600, 1200),
}

# The `cpu` scale: the demo pre-training (L2 H128, sequence 128) on the offline text
# (Wikipedia excerpt + BBC News train articles), 4.9M tokens in 1,200 steps of 32: the
# demo's budget. With sentence pairs and NSP, half of it (1,200 steps of 16) leaves the
# model at the unigram stage on some rows and not others (measured 2026-11-25).
CPU_PRETRAIN: dict[str, Any] = {
    "data.source": "wiki_excerpt,bbc_news",
    "global_batch_size": 32,
    "num_train_steps": 1200,
    "warmup_steps": 120,
    "eval_every_steps": 1200,
    "checkpoint_every_steps": 400,
    "baseline_batches": 0,
}
# The BiLSTM of the feature-based approach (§5.3: two layers of 768 per direction).
FEATURE_BILSTM = {
    "tiny": dict(lstm_size=16, lstm_layers=2, learning_rate=1e-2, num_epochs=2, global_batch_size=8),
    "demo": dict(lstm_size=128, lstm_layers=2, learning_rate=1e-3, num_epochs=4, global_batch_size=32),
    "cpu": dict(lstm_size=128, lstm_layers=2, learning_rate=1e-3, num_epochs=4, global_batch_size=32),
    "base": dict(lstm_size=768, lstm_layers=2, learning_rate=1e-3, num_epochs=4, global_batch_size=32),
}


# The base of every row at the `demo` and `cpu` scales: the demo's recipe (pre-LN, GeGLU,
# rotary positions, no biases, no dropout, 30% masking, warm-up-stable-decay, a vocabulary
# learned on the corpus: `configs/pretrain.py`), which leaves the unigram stage within the
# budget, with the paper's sentence pairs and NSP in place of its FULL-SENTENCES rows, so
# that a row's own change (NSP, LTR, the masking mix, the size) is its only difference.
# The paper's recipe at these scales: the presets `demo_paper` and `cpu_paper`.
ABLATION_BASE: dict[str, Any] = {"data.full_sentences": False, "data.nsp": True}
PAPER_SUFFIX = "_paper"
# The baseline row of Tables 5, 6 and 8 (at tiny/demo/cpu, or `+random_init`): a model of
# the table's first (Table 6: BERT-Base's) shape, fine-tuned from fresh weights.
RANDOM_INIT = "random_init"


def _pretrain_config(preset: str) -> ml_collections.ConfigDict:
    module = run_config.sibling(__file__, "pretrain")
    scale, paper = _scale(preset), preset.endswith(PAPER_SUFFIX)
    if scale not in ("cpu", "demo"):
        return module.get_config(preset)
    c = module.get_config("demo+bert") if paper else set_keys(module.get_config("demo"), ABLATION_BASE)
    return set_keys(c, CPU_PRETRAIN) if scale == "cpu" else c


def _scale(preset: str) -> str:
    """The scale of a preset (``cpu_paper`` is the ``cpu`` scale with the paper's recipe)."""
    return preset.removesuffix(PAPER_SUFFIX)


def _scale_down(changes: dict[str, Any], preset: str) -> dict[str, Any]:
    """The model sizes at a CPU scale: hidden width / 8, the same heads; the same layers
    (``cpu``: a third of them)."""
    out = dict(changes)
    if "model.hidden_size" in out:
        out["model.hidden_size"] //= 8
        out["model.intermediate_size"] = 4 * out["model.hidden_size"]
    if _scale(preset) == "cpu" and "model.num_hidden_layers" in out:
        out["model.num_hidden_layers"] = max(1, out["model.num_hidden_layers"] // 3)
    return out


def get_config(spec: str = "table5") -> ml_collections.ConfigDict:
    """``TABLE[.PRESET][+COLUMN...]``: the table; ``TABLE[.PRESET]/ROW``: that row's
    pre-training config alone (for `bert-jax plan` and `bert-jax pretrain`)."""
    spec, _, row = spec.partition("/")
    if row:
        table = get_config(spec)
        if row not in table.rows:
            raise ValueError(f"{table.table} has no pre-training row {row!r}; rows: {', '.join(table.rows)}")
        return table.rows[row]
    head, *extra = spec.split("+")
    table, _, preset = head.partition(".")
    if table not in TABLES:
        raise ValueError(f"unknown ablation table {table!r}; choose from {', '.join(TABLES)}")
    preset = preset or "base"
    scale = _scale(preset)
    if scale not in columns.FINETUNE_PRESETS or (scale != preset and scale not in ("cpu", "demo")):
        known = [*columns.FINETUNE_PRESETS, "demo_paper", "cpu_paper"]
        raise ValueError(f"unknown ablation preset {preset!r}; choose from {', '.join(known)}")
    t = TABLES[table]
    c = ml_collections.ConfigDict()
    c.table = table
    c.title = t["title"]
    c.preset = preset
    c.row_order = tuple(t["rows"])  # the paper's order (ConfigDict keys iterate sorted)
    baseline = RANDOM_INIT in extra or (scale != "base" and "baseline_from" in t)
    if baseline and "baseline_from" not in t:
        with_one = ", ".join(n for n, x in TABLES.items() if "baseline_from" in x)
        raise ValueError(f"{table} has no {RANDOM_INIT} row; tables with one: {with_one}")
    extra = columns.expand([x for x in extra if x != RANDOM_INIT])
    if scale == "cpu" and "bbc" not in extra:  # the offline column: BBC News topics
        extra.insert(0, "bbc")
    feature_baselines = t.get("feature_baselines", {}) if baseline else {}
    c.row_order = c.row_order + ((RANDOM_INIT, *feature_baselines) if baseline else ())
    c.column_order = tuple(t["columns"]) + tuple(x for x in extra if x not in t["columns"])
    scaled = t.get("scaled_sizes") and scale in ("tiny", "demo", "cpu")
    c.rows = ml_collections.ConfigDict(
        {
            row: set_keys(_pretrain_config(preset), _scale_down(changes, preset) if scaled else changes)
            for row, changes in t["rows"].items()
            if changes is not None
        }
    )
    settings = dict(t.get("settings", {}))
    if baseline:  # the first row's architecture, freshly initialised
        settings[RANDOM_INIT] = dict(model_from=t["baseline_from"], random_init=True)
        for row, (layers, combine) in feature_baselines.items():
            features = dict(approach="features", layers=layers, combine=combine)
            settings[row] = dict(model_from=t["baseline_from"], random_init=True, **features)
    c.row_settings = ml_collections.ConfigDict(
        {
            row: {
                **dict(model_from=row, head="", approach="", layers="", combine="", random_init=False),
                **settings.get(row, {}),
            }
            for row in c.row_order
        }
    )
    c.columns = ml_collections.ConfigDict({col: columns.column(col, scale) for col in c.column_order})
    c.finetune_seeds = columns.FINETUNE_SEEDS[scale] if scale != "base" else t.get("finetune_seeds", 5)
    c.grid_seeds = min(columns.GRID_SEEDS[scale], int(c.finetune_seeds))
    # Fine-tuning runs at once, each in its own process on one core (`ablations.parallel`);
    # 1: one after another in this process, on every core.
    c.processes = 1
    # JAX's persistent compilation cache shared by the runs: "" WORKDIR/xla_cache, "none" off.
    c.compilation_cache = ""
    c.feature_bilstm = ml_collections.ConfigDict(FEATURE_BILSTM[scale])
    c.data_dirs = ml_collections.ConfigDict(
        dict(glue="tfds", squad="tfds", conll2003="tfds", swag="", bbc="", downstream="")
    )
    c.paper = ml_collections.ConfigDict(
        {row: dict(zip(t["columns"], values, strict=True)) for row, values in t["paper"].items()}
    )
    if table == "figure5":
        c.steps = FIGURE5_STEPS[scale]
    return c
