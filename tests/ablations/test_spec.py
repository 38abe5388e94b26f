"""An ablation table's config becomes one typed, checked record (`AblationTable`) at the
entry point; a bad value is refused in one line naming its key, before anything runs.
The fine-tuning sweep's grid likewise (`SweepGrid`)."""

from __future__ import annotations

import subprocess
import sys

import ml_collections
import pytest

from bert_jax.ablations.spec import Column, RowSettings
from bert_jax.commands import run_settings
from bert_jax.finetuning.feature_based import FeatureBiLSTMSettings
from bert_jax.finetuning.settings import SweepGrid
from bert_jax.training import resolver
from configs import ablations as ablation_configs
from tests.conftest import ROOT


def test_the_table_is_read_typed() -> None:
    table = run_settings.ablation_table(ablation_configs.get_config("table5.cpu+sentiment"))
    assert table.table == "table5" and table.preset == "cpu" and table.row_order[-1] == "random_init"
    assert table.row_settings["plus_bilstm"] == RowSettings(model_from="ltr_no_nsp", head="bilstm")
    assert table.row_settings["random_init"].random_init and "random_init" not in table.pretraining
    col = table.columns["rotten_tomatoes"]
    assert isinstance(col, Column) and col.report_metric == "test/accuracy" and col.scale == 100.0
    assert col.grid == (("learning_rate", (5e-4, 1e-3)), ("num_epochs", (2,)))
    assert isinstance(table.feature_bilstm, FeatureBiLSTMSettings) and table.steps == ()
    # What the table reads of a row comes resolved: its model and data settings.
    ltr = table.pretraining["ltr_no_nsp"]
    assert ltr.data.objective == "ltr" and not ltr.data.nsp and ltr.model.causal_attention
    assert table.paper["bert_base"]["sst2"] == 92.7
    assert run_settings.ablation_table(ablation_configs.get_config("figure5.tiny")).steps == (3, 6)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("finetune_seeds", 0, "finetune_seeds must be >= 1, got 0"),
        ("grid_seeds", 4, r"grid_seeds must be within 1..finetune_seeds \(3\), got 4"),
        ("processes", 0, "processes must be >= 1, got 0"),
        ("row_settings.plus_bilstm.model_from", "bert_large",
         "row_settings.plus_bilstm.model_from 'bert_large' is not a pre-training row of table5"),
        ("row_settings.plus_bilstm.head", "lstm",
         r"row_settings.plus_bilstm.head='lstm': must be one of , bilstm"),
        ("row_settings.no_nsp.approach", "frozen", r"row_settings.no_nsp.approach='frozen': must be one of"),
        ("columns.bbc.approach", "probe",
         r"columns.bbc.approach='probe': must be one of finetune, features, lm_ppl"),
        ("columns.bbc.scale", 0.0, r"columns.bbc.scale=0.0: must be a positive number"),
        ("columns.bbc.finetune.num_epochs", 0, r"config.num_epochs=0: must be a positive integer"),
        ("rows.no_nsp.global_batch_size", 0, r"rows.no_nsp: .*global_batch_size"),
    ],
)  # fmt: skip
def test_a_bad_value_is_refused_naming_its_key(key, value, message) -> None:
    config = ablation_configs.get_config("table5.cpu")
    *path, last = key.split(".")
    node = config
    for part in path:
        node = node[part]
    node[last] = value
    with pytest.raises(ValueError, match=message):
        run_settings.ablation_table(config)


def test_figure5_steps_beyond_a_rows_pretraining_are_refused() -> None:
    config = ablation_configs.get_config("figure5.cpu")
    config.steps = (300, 1500)
    with pytest.raises(
        ValueError, match=r"figure5 steps \[1500\] are not within the 1200 pre-training steps of mlm"
    ):
        run_settings.ablation_table(config)
    config.steps = (0, 300)
    with pytest.raises(ValueError, match=r"figure5 steps \[0\] are not within"):
        run_settings.ablation_table(config)


def test_unknown_keys_are_refused() -> None:
    config = ablation_configs.get_config("table5.tiny")
    config.finetune_seed = 3
    with pytest.raises(ValueError, match="ablation table: unknown key 'finetune_seed'"):
        run_settings.ablation_table(config)
    config = ablation_configs.get_config("table5.tiny")
    config.row_settings.no_nsp.heads = "bilstm"
    with pytest.raises(ValueError, match=r"row_settings\.no_nsp: unknown key 'heads'"):
        run_settings.ablation_table(config)


def test_the_command_refuses_in_one_line_before_anything_runs(tmp_path) -> None:
    cmd = [sys.executable, "-m", "bert_jax", "ablate", "--config=configs/ablations.py:table5.tiny",
           "--config.grid_seeds=5", f"--workdir={tmp_path}", "--dry_run"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "grid_seeds must be within 1..finetune_seeds" in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "report.md").exists()


def test_sweep_grid_is_checked() -> None:
    block = ml_collections.ConfigDict(
        dict(global_batch_sizes=(16, 32), learning_rates=(5e-5,), epochs=(2,), seeds=(0, 1))
    )
    grid = resolver.resolve(SweepGrid, block, "config.sweep")
    assert grid.points() == [(16, 5e-5, 2, 0), (16, 5e-5, 2, 1), (32, 5e-5, 2, 0), (32, 5e-5, 2, 1)]
    block.learning_rates = ()
    with pytest.raises(ValueError, match=r"^config.sweep.learning_rates must be a non-empty list of values$"):
        resolver.resolve(SweepGrid, block, "config.sweep")
    block.learning_rates = (0.0,)
    with pytest.raises(
        ValueError, match=r"^config.sweep.learning_rates=\(0.0,\): must be a positive number$"
    ):
        resolver.resolve(SweepGrid, block, "config.sweep")
    block.learning_rates, block.seeds = (5e-5,), (-1,)
    with pytest.raises(ValueError, match=r"^config.sweep.seeds=\(-1,\): must be an integer >= 0$"):
        resolver.resolve(SweepGrid, block, "config.sweep")
