"""An ablation table's spec, resolved once from its config (`AblationTable.from_config`).

`configs/ablations.py` stays what users write and override (``--config.finetune_seeds=3``,
``--set``, ``--finetune_set``); at the entry point (`bert-jax ablate`, or a test) the
table becomes this frozen record, checked in one place: unknown keys, value ranges, each
row's model source, head and approach, each column's approach. The runner, its cells,
workers, grid, cost estimate, Figure 5 and the report read typed fields from here.

Two parts are job configs, resolved here by the command's edge's resolvers (handed in by
`bert_jax.commands.run_settings.ablation_table`): ``rows`` become ``pretraining`` (each
pre-training row's `PretrainSettings`, at the vocabulary size known without data) and a
column's ``finetune`` its `FinetuneSettings`; the runner hands these to the jobs, a cell's
changes made with `resolver.updated`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import ml_collections

from bert_jax.finetuning.feature_based import FeatureBiLSTMSettings
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.pretraining.settings import PretrainSettings
from bert_jax.setting_fields import POSITIVE, setting
from bert_jax.training import resolver

TABLE_KEYS = (
    "table", "title", "preset", "row_order", "column_order", "rows", "row_settings", "columns",
    "finetune_seeds", "grid_seeds", "processes", "compilation_cache", "feature_bilstm",
    "data_dirs", "paper", "steps",
)  # fmt: skip
ROW_APPROACHES = ("", "finetune", "features")
HEADS = ("", "bilstm")
COLUMN_APPROACHES = ("finetune", "features", "lm_ppl")


PretrainResolver = Callable[[ml_collections.ConfigDict], PretrainSettings]
FinetuneResolver = Callable[[ml_collections.ConfigDict], FinetuneSettings]


def _unknown(keys: Any, known: Any, where: str) -> None:
    extra = sorted(set(keys) - set(known))
    if extra:
        raise ValueError(f"{where}: unknown key {extra[0]!r}; known: {', '.join(sorted(known))}")


@dataclasses.dataclass(frozen=True)
class RowSettings:
    """Whose pre-trained model a row uses and how it is fine-tuned."""

    model_from: str  # a pre-training row (itself, or another row's model)
    head: str = setting("", choices=HEADS)  # "" or "bilstm" (a BiLSTM under the output layer)
    approach: str = setting("", choices=ROW_APPROACHES)  # "": the column's; "finetune" or "features"
    layers: str = ""  # the feature-based approach's layers ("": the column's)
    combine: str = ""  # "concat" or "weighted" ("": the column's)
    random_init: bool = False  # fine-tuned from fresh weights of that model's shape

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Column:
    """What one column measures and how it is scored (`configs/ablation_columns.py`)."""

    name: str
    label: str
    approach: str = setting("finetune", choices=COLUMN_APPROACHES)
    metric: str = ""  # in results.json's "best": what a grid is chosen on (dev)
    report_metric: str = ""  # the figure reported ("": metric)
    stands_for: str = ""  # the paper's column an offline column stands in for ("": none)
    scale: float = setting(100.0, POSITIVE)  # ours in the paper's units
    layers: str = "-1,-2,-3,-4"  # the feature-based approach's layers
    combine: str = "concat"  # and how they are combined
    skip: str = ""  # a reason not to run the column ("": it runs)
    grid: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # (key, values), in grid order; () none
    finetune: FinetuneSettings | None = None  # the task's fine-tuning settings (a job's)

    def __post_init__(self) -> None:
        if not self.report_metric:
            object.__setattr__(self, "report_metric", self.metric)

    @classmethod
    def read(cls, name: str, config: ml_collections.ConfigDict, finetune: FinetuneResolver) -> Column:
        job, approach = config.get("finetune"), config.get("approach", "finetune")
        if approach != "lm_ppl" and job is None:
            raise ValueError(f"columns.{name}: approach {approach} needs a finetune config")
        grid = tuple((k, tuple(v)) for k, v in (config.get("grid") or {}).items() if len(v))
        given = {"name": name, "grid": grid, "finetune": finetune(job) if job is not None else None}
        return resolver.resolve(cls, config, f"columns.{name}", fill=True, **given)


@dataclasses.dataclass(frozen=True)
class AblationTable:
    """Everything an ablation run reads of its table."""

    table: str  # its name: table5, table6, ... (the config key `table`)
    title: str
    preset: str  # the scale: tiny, demo, cpu, base (+ _paper)
    row_order: tuple[str, ...]  # the paper's order
    column_order: tuple[str, ...]
    pretraining: dict[str, PretrainSettings]  # each pre-training row's settings (planned vocabulary)
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
    def from_config(
        cls,
        config: ml_collections.ConfigDict,
        pretrain_settings: PretrainResolver,
        finetune_settings: FinetuneResolver,
    ) -> AblationTable:
        """The table of `config` (`configs/ablations.py`), checked; a bad value is refused
        in one line naming its key. Its rows and columns are job configs, resolved by the
        command's edge's `pretrain_settings` and `finetune_settings`."""
        _unknown(config.keys(), TABLE_KEYS, "ablation table")
        name = config.table
        row_order = tuple(config.row_order)
        # The pre-training rows in the table's order (ConfigDict keys iterate sorted).
        ranks = {r: i for i, r in enumerate(row_order)}
        rows = sorted(config.rows, key=lambda r: ranks.get(r, len(ranks)))
        column_order = tuple(config.column_order)
        settings = {}
        for row in row_order:
            if row not in config.row_settings:
                raise ValueError(f"row_settings: no entry for row {row!r}")
            where, block = f"row_settings.{row}", config.row_settings[row]
            _unknown(block.keys(), [f.name for f in dataclasses.fields(RowSettings)], where)
            s = resolver.resolve(RowSettings, block, where, fill=True)
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
            columns[col] = Column.read(col, config.columns[col], finetune_settings)
        seeds, grid_seeds, processes = (config[k] for k in ("finetune_seeds", "grid_seeds", "processes"))
        if seeds < 1:
            raise ValueError(f"finetune_seeds must be >= 1, got {seeds}")
        if not 1 <= grid_seeds <= seeds:
            raise ValueError(f"grid_seeds must be within 1..finetune_seeds ({seeds}), got {grid_seeds}")
        if processes < 1:
            raise ValueError(f"processes must be >= 1, got {processes}")
        steps = tuple(config.get("steps", ()))
        pretraining = {}
        for row in rows:
            try:
                pretraining[row] = pretrain_settings(config.rows[row])
            except ValueError as e:
                raise ValueError(f"rows.{row}: {e}") from None
            total = pretraining[row].num_train_steps
            bad = [k for k in steps if not 0 < k <= total]
            if bad:
                raise ValueError(f"{name} steps {bad} are not within the {total} pre-training steps of {row}")
        return cls(
            table=name,
            title=config.title,
            preset=config.preset,
            row_order=row_order,
            column_order=column_order,
            pretraining=pretraining,
            row_settings=settings,
            columns=columns,
            finetune_seeds=seeds,
            grid_seeds=grid_seeds,
            processes=processes,
            compilation_cache=config.compilation_cache,
            feature_bilstm=resolver.resolve(FeatureBiLSTMSettings, config.feature_bilstm, "feature_bilstm"),
            data_dirs=config.data_dirs.to_dict(),
            paper=config.paper.to_dict(),
            steps=steps,
        )
