"""The offline downstream suite as ablation columns: the column sets and the paper's rows
they stand in for, hyper-parameters chosen on dev and reported on test, the spread and
the differences in the report, the random-init baseline row, end to end on a tiny model
(a QA and a sentiment column), and the runner's parallel processes (same figures as one
after another; resumable)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bert_jax.ablations import cells, cost, grid, parallel, progress, runner
from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.tasks import scorers, squad
from bert_jax.training import run_config
from configs import ablations as ablation_configs
from tests.helpers.task_data import write_tiny_checkpoint

STEPS = dict(num_train_steps=6, checkpoint_every_steps=6, eval_every_steps=6, async_checkpointing=False)
OFFLINE = ["disfl_qa", "cpkc", "dialog_pairs", "vitaminc", "rotten_tomatoes"]
STANDS_FOR = {
    "disfl_qa": "for SQuAD v1.1 F1",
    "cpkc": "for SQuAD v1.1 F1",
    "dialog_pairs": "movie dialog pairs test acc for MRPC",
    "vitaminc": "VitaminC test acc for MNLI-m",
    "rotten_tomatoes": "Rotten Tomatoes test acc for SST-2",
}


def test_column_sets_name_the_papers_rows_and_read_the_cache(tmp_path) -> None:
    sets = ablation_configs.get_config("table5.cpu+qa+pairs+sentiment")
    typed = run_settings.ablation_table(sets)
    assert list(sets.column_order[-5:]) == OFFLINE
    assert sets.column_order == ablation_configs.get_config("table5.cpu+offline").column_order
    assert list(ablation_configs.get_config("table6.demo+qa").column_order[-2:]) == ["disfl_qa", "cpkc"]
    for name, words in STANDS_FOR.items():
        col = sets.columns[name]
        assert words in col.label and col.skip == "" and col.report_metric == f"test/{col.metric}"
        assert col.finetune.task == name and tuple(col.grid.learning_rate) == (5e-4, 1e-3)
        plan = cells.cell_plan(typed, "bert_base", name)
        assert plan["config"].data_dir == "" and plan["grid"] == ["lr0.0005_ep2", "lr0.001_ep2"]
    assert sets.columns.disfl_qa.metric == "best_f1" and sets.columns.cpkc.metric == "f1"
    assert sets.columns.mnli_m.skip  # the paper's column still needs a network
    # A random-init baseline row at the CPU scales, on demand at base; Table 7 has none.
    assert sets.row_order[-1] == "random_init" and sets.row_settings.random_init.model_from == "bert_base"
    assert "random_init" not in ablation_configs.get_config("table5").row_order
    assert ablation_configs.get_config("table8+random_init").row_settings.random_init.random_init
    assert ablation_configs.get_config("table6.cpu").row_settings.random_init.model_from == "L12_H768_A12"
    with pytest.raises(
        ValueError, match="figure5 has no random_init row; tables with one: table5, table6, table7"
    ):
        ablation_configs.get_config("figure5.cpu+random_init")
    with pytest.raises(ValueError, match=r"unknown column 'sentimnt'; known: .*sentiment \(set\)"):
        ablation_configs.get_config("table5.cpu+sentimnt")
    # The dry run: every header names the paper's row; its published figure beside ours.
    report = runner.run_table(typed, str(tmp_path), dry_run=True)
    md = (tmp_path / "report.md").read_text()
    head = next(line for line in md.splitlines() if line.startswith("| row |"))
    assert all(sets.columns[c].label + " ours | paper" in head for c in OFFLINE)
    rows = {r["row"]: r for r in report["rows"]}
    assert rows["ltr_no_nsp"]["paper"]["disfl_qa"] == 77.8 and rows["no_nsp"]["paper"]["vitaminc"] == 83.9
    assert rows["random_init"]["paper"]["disfl_qa"] is None and rows["random_init"]["pretraining"] == {}
    assert "`test/best_f1` at the grid point with the best mean dev `best_f1`" in md
    assert "random_init: the bert_base row's model shape" in md


def _result(folder: Path, dev: float, test: float, metric: str = "accuracy") -> None:
    folder.mkdir(parents=True)
    best = {metric: dev, f"test/{metric}": test, "epoch": 1}
    (folder / "results.json").write_text(json.dumps({"main_metric": metric, "best": best}))


def test_grid_point_chosen_on_dev_reported_on_test_with_its_spread(tmp_path) -> None:
    table = run_settings.ablation_table(ablation_configs.get_config("table5.cpu+sentiment"))
    col, cell = table.columns["rotten_tomatoes"], tmp_path / "bert_base" / "rotten_tomatoes"
    assert col.grid == (("learning_rate", (5e-4, 1e-3)), ("num_epochs", (2,)))
    assert (table.finetune_seeds, table.grid_seeds) == (3, 1)
    first = cells.pending_runs(table, "bert_base", "rotten_tomatoes", str(cell))
    assert [(s, Path(d).relative_to(cell).as_posix(), c) for s, d, c in first] == [
        (0, "lr0.0005_ep2/seed0", {"learning_rate": 5e-4, "num_epochs": 2}),
        (0, "lr0.001_ep2/seed0", {"learning_rate": 1e-3, "num_epochs": 2}),
    ]
    runs = lambda: progress.cell_runs(table, "bert_base", "rotten_tomatoes", str(cell))
    assert runs() == (0, 4)  # (finished, in all): 2 points x 1 grid seed, then 2 more seeds
    _result(cell / "lr0.0005_ep2" / "seed0", dev=0.70, test=0.90)  # best test, not best dev
    assert grid.selection(col, str(cell), 1)["chosen"] is None  # one point still missing
    assert runs() == (1, 4)
    assert cells.cell_values(table, "bert_base", "rotten_tomatoes", None, str(cell)) == []
    _result(cell / "lr0.001_ep2" / "seed0", dev=0.75, test=0.70)
    assert grid.selection(col, str(cell), 1)["chosen"] == "lr0.001_ep2"
    then = cells.pending_runs(table, "bert_base", "rotten_tomatoes", str(cell))
    assert [Path(d).relative_to(cell).as_posix() for _, d, _ in then] == [
        "lr0.001_ep2/seed1",
        "lr0.001_ep2/seed2",
    ]
    assert runs() == (2, 4)
    _result(cell / "lr0.001_ep2" / "seed1", dev=0.74, test=0.72)
    assert runs() == (3, 4)
    _result(cell / "lr0.001_ep2" / "seed2", dev=0.76, test=0.74)
    assert cells.cell_done(table, "bert_base", "rotten_tomatoes", str(cell)) and runs() == (4, 4)
    assert cells.cell_values(table, "bert_base", "rotten_tomatoes", None, str(cell)) == pytest.approx(
        [70.0, 72.0, 74.0]
    )
    # Another row far below and one within the spread: only the first is marked.
    for row, tests in (("ltr_no_nsp", (0.50, 0.52, 0.54)), ("no_nsp", (0.71, 0.73, 0.69))):
        for point, dev in (("lr0.0005_ep2", 0.6), ("lr0.001_ep2", 0.5)):
            _result(tmp_path / row / "rotten_tomatoes" / point / "seed0", dev=dev, test=tests[0])
        for k in (1, 2):
            _result(tmp_path / row / "rotten_tomatoes" / "lr0.0005_ep2" / f"seed{k}", dev=0.6, test=tests[k])
    report = runner.run_table(table, str(tmp_path), columns=["rotten_tomatoes"], dry_run=True)
    rows = {r["row"]: r for r in report["rows"]}
    assert rows["bert_base"]["std"]["rotten_tomatoes"] == pytest.approx(2.0)
    assert rows["bert_base"]["selection"]["rotten_tomatoes"]["chosen"] == "lr0.001_ep2"
    assert report["rank_agreement"]["rotten_tomatoes"] == pytest.approx(1.0)  # SST-2: BERT > No NSP > LTR
    md = (tmp_path / "report.md").read_text()
    assert "| bert_base | 72.00 ± 2.00 (3) | 92.7 |" in md
    assert "| no_nsp | -1.00 (spread 4.00) |" in md
    assert "| ltr_no_nsp | -20.00 * (spread 4.00) |" in md
    assert "| bert_base | Rotten Tomatoes test acc for SST-2 acc | lr0.001_ep2 | lr0.0005_ep2 70.00, " in md
    # The plan counts every run: 2 grid points x 1 seed, then 2 more seeds at the chosen one.
    assert cost.run_epochs(table, "bert_base", "rotten_tomatoes") == [2, 2, 2, 2]
    assert cost.cell_flops(table, "bert_base", "rotten_tomatoes") == pytest.approx(
        8 * cost.finetune_flops(table, "bert_base", "rotten_tomatoes")
    )


def test_random_init_row_sets_the_fine_tuning_key_or_says_why_not() -> None:
    config = ablation_configs.get_config("table5.cpu+sentiment")
    table = run_settings.ablation_table(config)
    if "random_init" not in config.columns.rotten_tomatoes.finetune:
        plan = cells.cell_plan(table, "random_init", "rotten_tomatoes")
        assert plan["approach"] == "n/a" and "no random_init setting" in plan["reason"]
        config.columns.rotten_tomatoes.finetune.random_init = False  # as the key will be
        table = run_settings.ablation_table(config)
    plan = cells.cell_plan(table, "random_init", "rotten_tomatoes")
    assert plan["config"].random_init is True and plan["model_from"] == "bert_base"
    assert cells.cell_plan(table, "bert_base", "rotten_tomatoes")["config"].random_init is False
    # Nothing pre-trained to read a perplexity or frozen features from.
    t6 = run_settings.ablation_table(ablation_configs.get_config("table6.cpu"))
    assert cells.cell_plan(t6, "random_init", "lm_ppl")["approach"] == "n/a"
    t8 = run_settings.ablation_table(ablation_configs.get_config("table8.cpu+bbc_features"))
    assert "fine-tuned only" in cells.cell_plan(t8, "random_init", "bbc_features")["reason"]


# --- end to end on a tiny model ------------------------------------------------------------


def _tiny_offline(tmp_path: Path, downstream_root: Path, spec: str, rows: tuple[str, ...]):
    """A tiny table whose rows' models are a tiny random BERT (standing in for the
    pre-trained rows), fine-tuned on a few examples of the real files."""
    table = ablation_configs.get_config(spec)
    table.data_dirs.downstream = str(downstream_root)
    for row in table.rows.values():
        run_config.set_keys(row, STEPS)
    for name in table.column_order:
        if "finetune" in table.columns[name]:
            ft = table.columns[name].finetune
            ft.max_train_examples, ft.max_eval_examples, ft.log_every_steps = 16, 16, 1000
    for row in rows:
        model = tmp_path / row
        write_tiny_checkpoint(model)
        shutil.copy(tokenization.default_vocab_file(), model / "vocab.txt")
        steps = int(table.rows[row].num_train_steps)
        (model / "pretraining.json").write_text(
            json.dumps({"num_train_steps": steps, "final": {"mlm_loss": 5.0}})
        )
    return table


def test_qa_column_chooses_on_dev_and_reports_test_end_to_end(tmp_path, downstream_root) -> None:
    """disfl_qa (official SQuAD 2.0 scoring) in Table 5: two learning rates with one seed
    each, then the chosen one's second seed; the report has both seeds' test F1."""
    table = _tiny_offline(tmp_path, downstream_root, "table5.tiny+qa", ("bert_base",))
    table.finetune_seeds = 2
    report = runner.run_table(
        run_settings.ablation_table(table), str(tmp_path), rows=["bert_base"], columns=["disfl_qa"]
    )
    (row,) = report["rows"]
    sel = row["selection"]["disfl_qa"]
    assert sel["chosen"] in ("lr0.001_ep1", "lr0.003_ep1") and all(
        len(p["dev"]) == 1 for p in sel["points"].values()
    )
    dev = {n: p["dev"][0] for n, p in sel["points"].items()}
    assert dev[sel["chosen"]] == max(dev.values())
    chosen = tmp_path / "bert_base" / "disfl_qa" / sel["chosen"]
    results = [json.loads((chosen / f"seed{k}" / "results.json").read_text()) for k in (0, 1)]
    assert [r["seed"] for r in results] == [0, 1] and results[0]["train_rows"] >= 16
    assert [r["learning_rate"] for r in results] == [
        sel["points"][sel["chosen"]]["params"]["learning_rate"]
    ] * 2
    # The official F1 is in percent already: reported as it is.
    assert row["seeds"]["disfl_qa"] == pytest.approx([r["best"]["test/best_f1"] for r in results])
    assert row["std"]["disfl_qa"] is not None and 0.0 <= row["ours"]["disfl_qa"] <= 100.0
    other = next(p for p in sel["points"] if p != sel["chosen"])
    assert not (tmp_path / "bert_base" / "disfl_qa" / other / "seed1").exists()  # grid seeds only
    md = (tmp_path / "report.md").read_text()
    assert f"| bert_base | disfl_qa test F1 for SQuAD v1.1 F1 | {sel['chosen']} |" in md
    assert f"({len(results)}) | 88.5 |" in md  # mean ± std (2 seeds) beside the paper's SQuAD F1


def test_parallel_processes_pretrain_and_fill_the_same_figures(tmp_path, downstream_root, capsys) -> None:
    """Two one-core workers: one pre-trains No NSP while the other fine-tunes BERT's
    Rotten Tomatoes cell, then No NSP's cell and the random-init baseline's; BERT's
    figure is the one a sequential run gives; a rerun starts nothing."""
    par = tmp_path / "par"
    table = _tiny_offline(par, downstream_root, "table5.tiny+sentiment", ("bert_base",))
    table.columns.rotten_tomatoes.grid.learning_rate = (1e-3,)
    table.processes = 2
    rows, cols = ["bert_base", "no_nsp", "random_init"], ["rotten_tomatoes"]
    report = runner.run_table(run_settings.ablation_table(table), str(par), rows=rows, columns=cols)
    assert sorted(p.name for p in (par / "logs").glob("*.log")) == [  # one per job
        "bert_base--rotten_tomatoes--lr0.001_ep1--seed0.log",
        "no_nsp--rotten_tomatoes--lr0.001_ep1--seed0.log",
        "pretrain--no_nsp.log",
        "random_init--rotten_tomatoes--lr0.001_ep1--seed0.log",
    ]
    baseline = (par / "logs" / "random_init--rotten_tomatoes--lr0.001_ep1--seed0.log").read_text()
    assert "freshly initialised weights" in baseline and report["rows"][2]["pretraining"] == {}
    assert json.loads((par / "no_nsp" / "pretraining.json").read_text())["num_train_steps"] == 6
    assert all(len(r["seeds"]["rotten_tomatoes"]) == 1 for r in report["rows"])
    assert report["rows"][1]["pretraining"]["done"] and not report["rows"][1]["pretraining"]["nsp"]
    # The table's line as jobs start: BERT's model was there, so No NSP's pre-training and
    # BERT's run start together; the other two runs as slots free (in an order the jobs'
    # times decide), No NSP's last, once its model is pre-trained.
    table_lines = [line for line in capsys.readouterr().out.splitlines() if "fine-tuning runs done" in line]
    assert table_lines[0].split(";")[0] == "== table5: 1 of 2 pre-trainings, 0 of 3 fine-tuning runs done"
    assert table_lines[0].endswith("so far, about ? left")
    assert 2 <= len(table_lines) <= 3 and table_lines[-1].startswith("== table5: 2 of 2 pre-trainings")
    # One after another in this process (both cores): the same figure.
    shutil.copytree(
        par / "bert_base", tmp_path / "seq" / "bert_base", ignore=shutil.ignore_patterns("rotten*")
    )
    table.processes = 1
    again = runner.run_table(
        run_settings.ablation_table(table), str(tmp_path / "seq"), rows=["bert_base"], columns=cols
    )
    assert again["rows"][0]["seeds"] == report["rows"][0]["seeds"]
    # A rerun in parallel finds everything done and starts nothing.
    table.processes = 2
    for log in (par / "logs").glob("*.log"):
        log.unlink()
    assert (
        runner.run_table(run_settings.ablation_table(table), str(par), rows=rows, columns=cols)["rows"]
        == report["rows"]
    )
    assert not list((par / "logs").glob("*.log"))
    assert (par / "xla_cache").is_dir()  # the workers' shared compilation cache


def test_a_workers_user_error_is_its_one_line(tmp_path) -> None:
    (tmp_path / "k.job.error").write_text("/data/x.bz2 is missing: fetch the downstream data with `...`\n")
    err = parallel._failure("k", parallel.USER_ERROR, str(tmp_path / "k.log"))
    assert (
        isinstance(err, ValueError)
        and str(err) == "/data/x.bz2 is missing: fetch the downstream data with `...`"
    )
    assert "failed with exit code 1: see" in str(parallel._failure("j", 1, str(tmp_path / "j.log")))
    env = parallel.worker_env({"XLA_FLAGS": "--xla_force_host_platform_device_count=1"})
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=1 " + parallel.XLA_SINGLE_THREAD
    assert env["OMP_NUM_THREADS"] == "1"


def test_feature_row_extracts_spans_and_reports_the_official_test_f1(tmp_path, downstream_root) -> None:
    """Table 7's "Last Hidden" row on the cpkc column: a BiLSTM on the frozen last layer
    gives a start and an end logit per token; dev is scored every epoch, test at each
    epoch that is the best so far, and the cell is the best epoch's official test F1."""
    table = _tiny_offline(tmp_path, downstream_root, "table7.tiny+cpkc", ("finetune_base",))
    table.finetune_seeds, table.feature_bilstm.num_epochs = 1, 3
    report = runner.run_table(
        run_settings.ablation_table(table), str(tmp_path), rows=["last_hidden"], columns=["cpkc"]
    )
    (row,) = report["rows"]
    run = tmp_path / "last_hidden" / "cpkc" / "seed0"
    results = json.loads((run / "results.json").read_text())
    assert (results["task"], results["approach"], results["layers"]) == ("cpkc", "features", "-1")
    assert results["main_metric"] == "f1" and set(results["eval_rows"]) == {"dev", "test"}
    best = results["best"]
    assert row["seeds"]["cpkc"] == pytest.approx([best["test/f1"]])
    best_so_far = -1.0
    for epoch in results["epochs"]:  # test only where dev is at least the best so far
        assert ("test/f1" in epoch) == (epoch["f1"] >= best_so_far), epoch
        best_so_far = max(best_so_far, epoch["f1"])
    answers = json.loads((run / "eval" / f"epoch{best['epoch']}" / "test" / "predictions.json").read_text())
    test_file = downstream_root / "cpkc" / "test-v1.1.json"
    data = squad.restrict(squad.load_json(str(test_file))["data"], set(answers))
    assert len(answers) == 16 and scorers.squad_v1(data, answers)["f1"] == pytest.approx(best["test/f1"])


def test_table7_feature_baseline_reads_the_embeddings_of_fresh_weights(tmp_path, downstream_root) -> None:
    """Table 7's ``random_init_embeddings`` row: the same BiLSTM, seed and layer as the
    Embeddings row, on the frozen embeddings of a freshly initialised encoder of the
    BERT-Base row's shape (the baseline its features have to beat)."""
    table = _tiny_offline(tmp_path, downstream_root, "table7.tiny+sentiment", ("finetune_base",))
    assert table.row_order[-2:] == ("random_init", "random_init_embeddings")
    settings = table.row_settings.random_init_embeddings
    assert (settings.model_from, settings.approach, settings.layers, settings.random_init) == (
        "finetune_base", "features", "0", True
    )  # fmt: skip
    table.finetune_seeds = 1
    rows = ["embeddings", "random_init_embeddings"]
    report = runner.run_table(
        run_settings.ablation_table(table), str(tmp_path), rows=rows, columns=["rotten_tomatoes"]
    )
    results = {
        row: json.loads((tmp_path / row / "rotten_tomatoes" / "seed0" / "results.json").read_text())
        for row in rows
    }
    assert [results[r]["random_init"] for r in rows] == [False, True]
    assert all(results[r]["layers"] == "0" and results[r]["seed"] == 0 for r in rows)
    # The same BiLSTM, data and seed: only the features differ.
    losses = {r: [e["train_loss"] for e in results[r]["epochs"]] for r in rows}
    assert losses["embeddings"] != losses["random_init_embeddings"]
    (baseline,) = [r for r in report["rows"] if r["row"] == "random_init_embeddings"]
    assert baseline["seeds"]["rotten_tomatoes"] == [
        pytest.approx(100 * results["random_init_embeddings"]["best"]["test/accuracy"])
    ]
    assert baseline["pretraining"] == {}
    md = (tmp_path / "report.md").read_text()
    note = "random_init_embeddings: the finetune_base row's model shape and vocabulary, the feature-based"
    assert f"{note} approach on layers 0 (concat) of freshly initialised weights" in md
