"""An ablation table's spec, resolved once from its config (`AblationTable.from_config`).

`configs/ablations.py` stays what users write and override (``--config.finetune_seeds=3``,
``--set``, ``--finetune_set``); at the entry point (`bert-jax ablate`, or a test) the
table becomes this frozen record, checked in one place: unknown keys, value ranges, each
row's model source, head and approach, each column's approach. The runner, its cells,
workers, grid, cost estimate, Figure 5 and the report read typed fields from here.

Two parts stay job configs, as the jobs take them: ``rows`` (each pre-training row's
config, handed to `pretrain.train_and_evaluate`, which resolves it) and a column's
``finetune`` (handed to `finetune.finetune` or `feature_based.train`). What the table
itself reads of a row (its size, objective, masking, steps, casing) comes from
``pretraining``: the same rows resolved as `PretrainSettings` at the vocabulary size
known without data (`model_vocab.planned`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_collections

from bert_jax.finetuning.feature_based import FeatureBiLSTMSettings
from bert_jax.pretraining import model_vocab
from bert_jax.pretraining.settings import PretrainSettings

TABLE_KEYS = (
    "table", "title", "preset", "row_order", "column_order", "rows", "row_settings", "columns",
    "finetune_seeds", "grid_seeds", "processes", "compilation_cache", "feature_bilstm",
    "data_dirs", "paper", "steps",
)  # fmt: skip
ROW_APPROACHES = ("", "finetune", "features")
HEADS = ("", "bilstm")
COLUMN_APPROACHES = ("finetune", "features", "lm_ppl")


def _unknown(keys: Any, known: Any, where: str) -> None:
    extra = sorted(set(keys) - set(known))
    if extra:
        raise ValueError(f"{where}: unknown key {extra[0]!r}; known: {', '.join(sorted(known))}")


@dataclasses.dataclass(frozen=True)
class RowSettings:
    """Whose pre-trained model a row uses and how it is fine-tuned."""

    model_from: str  # a pre-training row (itself, or another row's model)
    head: str = ""  # "" or "bilstm" (a BiLSTM under the output layer)
    approach: str = ""  # "": the column's; "finetune" or "features"
    layers: str = ""  # the feature-based approach's layers ("": the column's)
    combine: str = ""  # "concat" or "weighted" ("": the column's)
    random_init: bool = False  # fine-tuned from fresh weights of that model's shape

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict | dict[str, Any], where: str) -> RowSettings:
        names = [f.name for f in dataclasses.fields(cls)]
        _unknown(config.keys(), names, where)
        s = cls(
            model_from=str(config["model_from"]),
            head=str(config.get("head", "")),
            approach=str(config.get("approach", "")),
            layers=str(config.get("layers", "")),
            combine=str(config.get("combine", "")),
            random_init=bool(config.get("random_init", False)),
        )
        if s.approach not in ROW_APPROACHES:
            raise ValueError(f"{where}.approach {s.approach!r}: '', 'finetune' or 'features'")
        if s.head not in HEADS:
            raise ValueError(f"{where}.head {s.head!r}: '' or 'bilstm'")
        return s

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Column:
    """What one column measures and how it is scored (`configs/ablation_columns.py`)."""

    name: str
    label: str
    approach: str  # "finetune", "features" or "lm_ppl"
    metric: str  # in results.json's "best": what a grid is chosen on (dev)
    report_metric: str  # the figure reported
    stands_for: str  # the paper's column an offline column stands in for ("": none)
    scale: float  # ours in the paper's units
    layers: str  # the feature-based approach's layers
    combine: str  # and how they are combined
    skip: str  # a reason not to run the column ("": it runs)
    grid: tuple[tuple[str, tuple[Any, ...]], ...]  # (key, values), in grid order; () none
    finetune: ml_collections.ConfigDict | None  # the task's fine-tuning config (job config)

    @classmethod
    def from_config(cls, name: str, config: ml_collections.ConfigDict) -> Column:
        where = f"columns.{name}"
        _unknown(config.keys(), [f.name for f in dataclasses.fields(cls) if f.name != "name"], where)
        approach = str(config.approach)
        if approach not in COLUMN_APPROACHES:
            raise ValueError(f"{where}.approach {approach!r}: finetune, features or lm_ppl")
        finetune = config.get("finetune")
        if approach != "lm_ppl" and finetune is None:
            raise ValueError(f"{where}: approach {approach} needs a finetune config")
        grid = tuple((str(k), tuple(v)) for k, v in (config.get("grid") or {}).items() if len(v))
        scale = float(config.get("scale", 100.0))
        if not scale > 0:
            raise ValueError(f"{where}.scale must be > 0, got {scale}")
        return cls(
            name=name,
            label=str(config.label),
            approach=approach,
            metric=str(config.metric),
            report_metric=str(config.get("report_metric", "") or config.metric),
            stands_for=str(config.get("stands_for", "")),
            scale=scale,
            layers=str(config.get("layers", "-1,-2,-3,-4")),
            combine=str(config.get("combine", "concat")),
            skip=str(config.get("skip", "")),
            grid=grid,
            finetune=finetune,
        )


@dataclasses.dataclass(frozen=True)
class AblationTable:
    """Everything an ablation run reads of its table."""

    name: str  # table5, table6, ...
    title: str
    preset: str  # the scale: tiny, demo, cpu, base (+ _paper)
    row_order: tuple[str, ...]  # the paper's order
    column_order: tuple[str, ...]
    rows: dict[str, ml_collections.ConfigDict]  # each pre-training row's job config
    pretraining: dict[str, PretrainSettings]  # the same rows, resolved (planned vocabulary)
    row_settings: dict[str, RowSettings]  # every row, pre-training or not
    columns: dict[str, Column]
    finetune_seeds: int  # restarts per cell (seeds 0..n-1)
    grid_seeds: int  # seeds per grid point before the best is chosen
    processes: int  # runs at once, one process per core (1: one after another)
    compilation_cache: str  # "": WORKDIR/xla_cache; "none": off; or a folder
    feature_bilstm: FeatureBiLSTMSettings
    data_dirs: dict[str, str]  # task data per family (glue, squad, conll2003, swag, bbc, downstream)
    paper: dict[str, dict[str, float]]  # row -> column -> the published figure
    steps: tuple[int, ...] = ()  # Figure 5: the pre-training steps fine-tuned from

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict) -> AblationTable:
        """The table of `config` (`configs/ablations.py`), checked; a bad value is refused
        in one line naming its key."""
        _unknown(config.keys(), TABLE_KEYS, "ablation table")
        name = str(config.table)
        row_order = tuple(str(r) for r in config.row_order)
        # The pre-training rows in the table's order (ConfigDict keys iterate sorted).
        ranks = {r: i for i, r in enumerate(row_order)}
        rows = {str(r): config.rows[r] for r in sorted(config.rows, key=lambda r: ranks.get(r, len(ranks)))}
        column_order = tuple(str(c) for c in config.column_order)
        settings = {}
        for row in row_order:
            if row not in config.row_settings:
                raise ValueError(f"row_settings: no entry for row {row!r}")
            s = RowSettings.from_config(config.row_settings[row], f"row_settings.{row}")
            if s.model_from not in rows:
                raise ValueError(
                    f"row_settings.{row}.model_from {s.model_from!r} is not a pre-training row of "
                    f"{name} (rows: {', '.join(rows)})"
                )
            settings[row] = s
        columns = {}
        for col in column_order:
            if col not in config.columns:
                raise ValueError(f"columns: no entry for column {col!r}")
            columns[col] = Column.from_config(col, config.columns[col])
        seeds, grid_seeds, processes = (int(config[k]) for k in ("finetune_seeds", "grid_seeds", "processes"))
        if seeds < 1:
            raise ValueError(f"finetune_seeds must be >= 1, got {seeds}")
        if not 1 <= grid_seeds <= seeds:
            raise ValueError(f"grid_seeds must be within 1..finetune_seeds ({seeds}), got {grid_seeds}")
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        steps = tuple(int(s) for s in config.get("steps", ()))
        pretraining = {}
        for row, c in rows.items():
            try:
                pretraining[row] = PretrainSettings.from_config(model_vocab.planned(c))
            except ValueError as e:
                raise ValueError(f"rows.{row}: {e}") from None
            total = pretraining[row].num_train_steps
            bad = [k for k in steps if not 0 < k <= total]
            if bad:
                raise ValueError(f"{name} steps {bad} are not within the {total} pre-training steps of {row}")
        return cls(
            name=name,
            title=str(config.title),
            preset=str(config.preset),
            row_order=row_order,
            column_order=column_order,
            rows=rows,
            pretraining=pretraining,
            row_settings=settings,
            columns=columns,
            finetune_seeds=seeds,
            grid_seeds=grid_seeds,
            processes=processes,
            compilation_cache=str(config.compilation_cache),
            feature_bilstm=FeatureBiLSTMSettings.from_config(config.feature_bilstm),
            data_dirs={str(k): str(v) for k, v in config.data_dirs.items()},
            paper={str(r): {str(c): float(v) for c, v in cols.items()} for r, cols in config.paper.items()},
            steps=steps,
        )
