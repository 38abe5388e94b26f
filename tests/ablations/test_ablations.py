"""The ablation tables (rows, columns and the paper's figures), the report (ours beside the
paper's, Kendall's tau), the BiLSTM heads, the feature-based NER tagger, and `bert-jax
ablate` end to end on tiny models (Table 5's "+ BiLSTM" row, from the LTR row's model, on a
user-added column, and Figure 5's staged pre-training on MNLI from TFDS mock data)."""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.ablations import cells, figure5, reports, runner
from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import feature_based
from bert_jax.model import bilstm, flops
from bert_jax.tasks.registry import get_task
from bert_jax.training import run_config
from configs import ablations as ablation_configs
from tests.conftest import ROOT
from tests.helpers.task_data import TINY, bbc_sentences, write_tiny_checkpoint
from tests.helpers.tfds_mock import prepared_mock_data

COLUMNS = {
    "table5": ["mnli_m", "qnli", "mrpc", "sst2", "squad_f1"],
    "table6": ["lm_ppl", "mnli_m", "mrpc", "sst2"],
    "table7": ["ner_f1"],
    "table8": ["mnli_m", "ner_finetune_f1", "ner_feature_f1"],
}


def test_tables_hold_the_papers_rows_columns_and_figures() -> None:
    t6 = ablation_configs.get_config("table6")
    sizes = [(r.model.num_hidden_layers, r.model.hidden_size, r.model.num_attention_heads) for r in
             (t6.rows[n] for n in t6.row_order)]  # fmt: skip
    assert sizes == [(3, 768, 12), (6, 768, 3), (6, 768, 12), (12, 768, 12), (12, 1024, 16), (24, 1024, 16)]
    assert all(t6.rows[n].model.intermediate_size == 4 * t6.rows[n].model.hidden_size for n in t6.row_order)
    assert t6.finetune_seeds == 5 and t6.paper.L24_H1024_A16.lm_ppl == 3.23
    # At a CPU scale the widths shrink by 8, layers and heads as the paper's.
    tiny6 = ablation_configs.get_config("table6.tiny")
    assert [
        (tiny6.rows[n].model.num_hidden_layers, tiny6.rows[n].model.hidden_size) for n in tiny6.row_order[:-1]
    ][-1] == (24, 128)
    assert tiny6.row_order[-1] == "random_init" and "random_init" not in tiny6.rows  # fine-tuned only
    t8 = ablation_configs.get_config("table8")
    mixes = [(t8.rows[n].data.mask_token_prob, t8.rows[n].data.random_token_prob) for n in t8.row_order]
    assert mixes == [(0.8, 0.1), (1.0, 0.0), (0.8, 0.2), (0.8, 0.0), (0.0, 0.8), (0.0, 1.0)]
    assert t8.preset == "base" and t8.rows["mask100_same0_rnd0"].model.num_hidden_layers == 12
    assert t8.paper.mask0_same20_rnd80.to_dict() == {
        "mnli_m": 83.7,
        "ner_finetune_f1": 94.8,
        "ner_feature_f1": 94.6,
    }
    assert (
        t8.columns.ner_feature_f1.approach == "features" and t8.columns.ner_feature_f1.layers == "-1,-2,-3,-4"
    )
    t5 = ablation_configs.get_config("table5.tiny")
    assert t5.rows.bert_base.data.nsp and not t5.rows.no_nsp.data.nsp
    assert t5.rows.ltr_no_nsp.data.objective == "ltr" and t5.rows.ltr_no_nsp.model.causal_attention
    assert "plus_bilstm" not in t5.rows  # it fine-tunes the LTR model, with a BiLSTM
    assert (
        t5.row_settings.plus_bilstm.model_from == "ltr_no_nsp"
        and t5.row_settings.plus_bilstm.head == "bilstm"
    )
    assert t5.paper.plus_bilstm.to_dict() == {"mnli_m": 82.1, "qnli": 84.1, "mrpc": 75.7, "sst2": 91.6,
                                              "squad_f1": 84.9}  # fmt: skip
    assert t5.columns.mrpc.metric == "accuracy" and t5.columns.squad_f1.finetune.task == "squad1.1"
    t7 = ablation_configs.get_config("table7")
    assert t7.row_order[:2] == ("finetune_large", "finetune_base")
    assert t7.rows.finetune_large.model.num_hidden_layers == 24
    assert {r: (t7.row_settings[r].layers, t7.row_settings[r].combine) for r in t7.row_order[2:]} == {
        "embeddings": ("0", "concat"),
        "second_to_last_hidden": ("-2", "concat"),
        "last_hidden": ("-1", "concat"),
        "weighted_sum_last_four": ("-1,-2,-3,-4", "weighted"),
        "concat_last_four": ("-1,-2,-3,-4", "concat"),
        "weighted_sum_all_12": ("all", "weighted"),
    }  # fmt: skip
    assert all(t7.row_settings[r].model_from == "finetune_base" for r in t7.row_order[2:])
    for table, columns in COLUMNS.items():
        assert list(ablation_configs.get_config(table).column_order) == columns
    extra = ablation_configs.get_config("table5.demo+bbc")
    assert extra.column_order[-1] == "bbc" and extra.columns.bbc.finetune.task == "bbc"
    with pytest.raises(ValueError, match="unknown ablation table 'table9'"):
        ablation_configs.get_config("table9")
    with pytest.raises(ValueError, match="unknown column 'imdb'"):
        ablation_configs.get_config("table5+imdb")
    with pytest.raises(KeyError, match=r"'data\.nsq'"):
        run_config.set_keys(t5.rows.bert_base, {"data.nsq": False})


def test_kendall_tau_b_with_ties() -> None:
    tau = reports.kendall_tau
    assert tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert tau([1, 2], [2, 2]) is None and tau([1], [1]) is None and tau([], []) is None
    # Ties as scipy's tau-b: x ties one pair, y another.
    xs, ys = [1, 2, 2, 3, 5], [2, 1, 3, 3, 4]
    import scipy.stats as scipy_stats  # in the test extra: always installed where the suite runs

    assert tau(xs, ys) == pytest.approx(scipy_stats.kendalltau(xs, ys).statistic)
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = rng.integers(0, 4, 7).tolist(), rng.integers(0, 4, 7).tolist()
        expected = scipy_stats.kendalltau(a, b).statistic
        got = tau(a, b)
        assert (got is None and math.isnan(expected)) or got == pytest.approx(expected)


def _check_schema(report: dict, columns: list[str]) -> None:
    assert report["columns"] == columns
    assert set(report["rank_agreement"]) == set(columns)
    for r in report["rows"]:
        assert {"row", "ours", "paper", "seeds"} <= set(r)
        assert set(r["ours"]) == set(r["paper"]) == set(r["seeds"]) == set(columns)


@pytest.mark.parametrize("table", ["table5", "table6", "table7", "table8", "figure5"])
def test_dry_run_reports_the_papers_figures_and_every_rows_config(tmp_path, table) -> None:
    config = ablation_configs.get_config(table)
    report = runner.run_table(run_settings.ablation_table(config), str(tmp_path), dry_run=True)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    columns = COLUMNS.get(table, ["mnli_m"])
    _check_schema(on_disk, columns)
    names = [r["row"] for r in on_disk["rows"]]
    if table == "figure5":
        assert names == [
            f"{r}@{k}" for r in ("mlm", "ltr") for k in (200_000, 400_000, 600_000, 800_000, 1_000_000)
        ]
    else:
        assert names == list(config.row_order)
    for r in on_disk["rows"]:
        assert all(v is None for v in r["ours"].values()) and all(s == [] for s in r["seeds"].values())
        assert set(r["config"]["cells"]) == set(columns)
    assert all(t is None for t in on_disk["rank_agreement"].values())
    md = (tmp_path / "report.md").read_text()
    assert "Kendall's τ" in md
    assert not any(p.is_dir() for p in tmp_path.iterdir())  # nothing ran
    if table == "table5":
        rows = {r["row"]: r for r in on_disk["rows"]}
        assert rows["bert_base"]["paper"] == dict(zip(columns, (84.4, 88.4, 86.7, 92.7, 88.5), strict=True))
        cell = rows["plus_bilstm"]["config"]["cells"]["squad_f1"]
        assert cell["model_from"] == "ltr_no_nsp" and cell["config"]["task"] == "squad1.1+bilstm"
        assert rows["plus_bilstm"]["config"]["settings"]["head"] == "bilstm"
        assert rows["bert_base"]["config"]["pretraining"]["data"]["nsp"] is True
        assert "| bert_base | — | 84.4 | — | 88.4 |" in md
    if table == "table7":
        cell = {r["row"]: r for r in on_disk["rows"]}["weighted_sum_all_12"]["config"]["cells"]["ner_f1"]
        assert (cell["approach"], cell["layers"], cell["combine"]) == ("features", "all", "weighted")
        # Classification and span columns are served by both approaches; one the
        # feature-based approach does not serve (multiple choice) is "n/a" in those rows,
        # not an error.
        extra = runner.run_table(
            run_settings.ablation_table(ablation_configs.get_config("table7+bbc+squad_f1+swag")),
            str(tmp_path / "bbc"),
            dry_run=True,
        )
        cells = {r["row"]: r["config"]["cells"] for r in extra["rows"]}
        for column in ("bbc", "squad_f1"):
            assert cells["finetune_base"][column]["approach"] == "finetune"
            assert cells["last_hidden"][column]["approach"] == "features"
        assert cells["last_hidden"]["swag"]["approach"] == "n/a"
        assert "span extraction only" in cells["last_hidden"]["swag"]["reason"]
        assert cells["finetune_base"]["swag"]["approach"] == "finetune"


def test_cpu_preset_pretrains_offline_text_and_skips_columns_that_need_a_network(tmp_path) -> None:
    config = ablation_configs.get_config("table6.cpu")
    assert list(config.column_order) == [*COLUMNS["table6"], "bbc"]
    rows = config.rows
    pretrained = [r for r in config.row_order if r != "random_init"]
    sizes = [(rows[r].model.num_hidden_layers, rows[r].model.hidden_size) for r in pretrained]
    assert sizes == [(1, 96), (2, 96), (2, 96), (4, 96), (4, 128), (8, 128)]  # layers / 3, width / 8
    assert all(rows[r].data.source == "wiki_excerpt,bbc_news" for r in pretrained)
    report = runner.run_table(run_settings.ablation_table(config), str(tmp_path), dry_run=True)
    cells = report["rows"][0]["config"]["cells"]
    assert cells["mnli_m"]["approach"] == "n/a" and "network" in cells["mnli_m"]["reason"]
    assert cells["bbc"]["approach"] == "finetune" and cells["lm_ppl"]["approach"] == "lm_ppl"
    assert report["rows"][0]["paper"]["mnli_m"] == 77.9  # the paper's columns stay
    md = (tmp_path / "report.md").read_text()
    assert "Not run (task data needs a network" in md and "MNLI-m acc, MRPC acc, SST-2 acc" in md
    # The feature-based BBC column runs offline, on layers an L2 model has.
    t8 = ablation_configs.get_config("table8.cpu+bbc_features")
    assert list(t8.column_order) == [*COLUMNS["table8"], "bbc", "bbc_features"]
    assert (t8.columns.bbc_features.approach, t8.columns.bbc_features.layers) == ("features", "-1,-2")
    assert t8.columns.bbc_features.skip == "" and t8.columns.ner_feature_f1.skip
    runner.check_table(run_settings.ablation_table(t8))


def test_table7_cpu_scales_base_and_large_alike_and_checks_feature_layers_up_front(tmp_path) -> None:
    config = ablation_configs.get_config("table7.cpu")
    sizes = {r: (m.num_hidden_layers, m.hidden_size, m.num_attention_heads) for r, m in
             ((r, config.rows[r].model) for r in ("finetune_large", "finetune_base"))}  # fmt: skip
    assert sizes == {"finetune_large": (8, 128, 16), "finetune_base": (4, 96, 12)}
    report = runner.run_table(run_settings.ablation_table(config), str(tmp_path / "ok"), dry_run=True)
    cells = {r["row"]: r["config"]["cells"]["bbc"] for r in report["rows"]}
    assert (
        cells["concat_last_four"]["approach"] == "features"
        and cells["concat_last_four"]["layers"] == "-1,-2,-3,-4"
    )
    # A Base too shallow for "the last four" is refused before anything trains.
    config.rows.finetune_base.model.num_hidden_layers = 2
    with pytest.raises(ValueError, match=r"row weighted_sum_last_four, column bbc: layers .* out of range"):
        runner.run_table(run_settings.ablation_table(config), str(tmp_path / "shallow"))
    assert not (tmp_path / "shallow" / "finetune_base").exists()


def test_bbc_news_pretraining_text_holds_out_the_tasks_dev_articles() -> None:
    from bert_jax.data import corpora
    from bert_jax.tasks import bbc

    docs = list(corpora.read_bbc_news())
    train, dev = bbc.read("", "train"), bbc.read("", "dev")
    assert len(docs) == len(train) and [d[0] for d in docs] == [e.text_a for e in train]
    assert not {d[0] for d in docs} & {e.text_a for e in dev} - {e.text_a for e in train}


def test_report_from_finished_cells_mean_std_seeds_and_tau(tmp_path) -> None:
    config = ablation_configs.get_config("table6")
    ours = {  # accuracy fractions per seed, and the held-out LM loss, per row
        "L3_H768_A12": ([0.70, 0.72], [0.80, 0.78], 1.90),
        "L6_H768_A3": ([0.74, 0.76], [0.79, 0.81], 1.70),
        "L6_H768_A12": ([0.78], [0.82, 0.84], 1.50),
    }
    for row, (mnli, sst2, loss) in ours.items():
        (tmp_path / row).mkdir()
        (tmp_path / row / "pretraining.json").write_text(json.dumps({"num_train_steps": 10, "final": {
            "mlm_loss": loss, "mlm_accuracy": 0.5, "nsp_accuracy": 0.9}}))  # fmt: skip
        for column, values in (("mnli_m", mnli), ("sst2", sst2)):
            for seed, v in enumerate(values):
                folder = tmp_path / row / column / f"seed{seed}"
                folder.mkdir(parents=True)
                (folder / "results.json").write_text(
                    json.dumps({"main_metric": "accuracy", "best": {"accuracy": v}})
                )
    report = runner.run_table(run_settings.ablation_table(config), str(tmp_path), dry_run=True)
    _check_schema(report, COLUMNS["table6"])
    rows = {r["row"]: r for r in report["rows"]}
    assert rows["L3_H768_A12"]["seeds"]["mnli_m"] == pytest.approx([70.0, 72.0])
    assert rows["L3_H768_A12"]["ours"]["mnli_m"] == pytest.approx(71.0)
    assert rows["L3_H768_A12"]["std"]["mnli_m"] == pytest.approx(math.sqrt(2.0))
    assert rows["L6_H768_A12"]["std"]["mnli_m"] is None  # one seed
    assert rows["L6_H768_A3"]["ours"]["lm_ppl"] == pytest.approx(math.exp(1.70))
    assert rows["L12_H768_A12"]["ours"]["mnli_m"] is None and rows["L12_H768_A12"]["paper"]["mnli_m"] == 84.4
    # Ours rise with size as the paper's (ppl falls with both): tau 1 where 3 rows have both.
    assert report["rank_agreement"] == {"lm_ppl": 1.0, "mnli_m": 1.0, "mrpc": None, "sst2": 1.0}
    md = (tmp_path / "report.md").read_text()
    assert "| L3_H768_A12 | 6.69 | 5.84 | 71.00 ± 1.41 (2) | 77.9 |" in md
    assert "| Kendall's τ (ours vs paper) | +1.00 |  | +1.00 |  | — |  | +1.00 |  |" in md


def test_bilstm_heads_keep_the_encoder_and_the_outputs_shapes() -> None:
    ids = jnp.array([[101, 2054, 2003, 102, 0, 0], [101, 2023, 102, 0, 0, 0]], jnp.int32)
    mask, seg = (ids > 0).astype(jnp.int32), jnp.zeros_like(ids)
    for name, shape in (("sst2", (2, 2)), ("squad1.1", ((2, 6), (2, 6)))):
        task = get_task(f"{name}+bilstm")
        assert task.name == f"{name}+bilstm" and task.main_metric == get_task(name).main_metric
        model = task.model(TINY)
        params = jax.eval_shape(model.init, jax.random.key(0), ids, mask, seg)["params"]
        assert {"bert", "bilstm"} <= set(params) and "layer_1" not in params["bilstm"]
        out = jax.eval_shape(model.apply, {"params": params}, ids, mask, seg)
        got = tuple(o.shape for o in out) if isinstance(out, tuple) else out.shape
        assert got == shape
    # Padding is not read: a row's outputs do not change with more padding after it.
    lstm = bilstm.BiLSTM(4)
    x = jax.random.normal(jax.random.key(1), (1, 5, 3))
    p = lstm.init(jax.random.key(2), x, jnp.array([3]))
    apply = jax.jit(lstm.apply)
    a, b = apply(p, x.at[:, 3:].set(0.0), jnp.array([3])), apply(p, x.at[:, 3:].set(9.0), jnp.array([3]))
    np.testing.assert_allclose(a[:, :3], b[:, :3], atol=1e-6)
    assert not np.allclose(a[:, :2, 4:], apply(p, x, jnp.array([5]))[:, :2, 4:])  # backward reads to the end


def _write_conll(folder: Path) -> Path:
    """Real sentences; a capitalised word after the first is a person (B-PER/I-PER)."""
    folder.mkdir(parents=True)
    sentences = bbc_sentences(60, seed=3)
    for name, chunk in (("train.txt", sentences[:40]), ("valid.txt", sentences[40:])):
        lines = []
        for s in chunk:
            previous = "O"
            for i, word in enumerate(s.split()[:20]):
                tag = "O"
                if i and word[:1].isupper():
                    tag = "I-PER" if previous != "O" else "B-PER"
                lines.append(f"{word} X X {tag}")
                previous = tag
            lines.append("")
        (folder / name).write_text("-DOCSTART- -X- -X- O\n\n" + "\n".join(lines) + "\n")
    return folder


def _stand_in_base_model(tmp_path: Path) -> None:
    """A tiny random BERT standing in for Table 7's pre-trained BERT-Base row."""
    model_dir = tmp_path / "finetune_base"
    write_tiny_checkpoint(model_dir)
    shutil.copy(tokenization.default_vocab_file(), model_dir / "vocab.txt")
    (model_dir / "pretraining.json").write_text(
        json.dumps({"num_train_steps": 6, "final": {"mlm_loss": 5.0}})
    )


def test_table7_feature_row_trains_a_bilstm_on_the_frozen_layers(tmp_path) -> None:
    """Table 7's "Weighted Sum All 12 Layers" row: a BiLSTM on a learned mix of every layer
    of the BERT-Base row's model."""
    _stand_in_base_model(tmp_path)
    model_dir = tmp_path / "finetune_base"
    table = _tiny_table("table7.tiny")
    table.data_dirs.conll2003 = str(_write_conll(tmp_path / "conll"))
    table.columns.ner_f1.finetune.max_seq_length = 32
    report = runner.run_table(run_settings.ablation_table(table), str(tmp_path), rows=["weighted_sum_all_12"])
    (row,) = report["rows"]
    assert row["paper"]["ner_f1"] == 95.5 and 0.0 <= row["ours"]["ner_f1"] <= 100.0
    assert row["pretraining"]["model_from"] == "finetune_base"
    run = tmp_path / "weighted_sum_all_12" / "ner_f1" / "seed0"
    results = json.loads((run / "results.json").read_text())
    assert (results["approach"], results["layers"], results["combine"]) == ("features", "all", "weighted")
    assert results["checkpoint"] == str(model_dir) and results["main_metric"] == "f1"
    assert (
        len(results["epochs"]) == 2
        and results["epochs"][1]["train_loss"] < results["epochs"][0]["train_loss"]
    )
    assert row["seeds"]["ner_f1"] == [pytest.approx(100 * results["best"]["f1"])]
    assert (run / "eval" / "epoch2" / "dev" / "dev_predictions.txt").exists()
    assert feature_based.layer_indices("0,-1,-2", 2) == [0, 2, 1]
    assert feature_based.layer_indices("all", 2) == [1, 2]
    with pytest.raises(ValueError, match="out of range"):
        feature_based.layer_indices("-3,5", 2)


def test_table7_feature_row_classifies_bbc_topics_from_frozen_layers(tmp_path) -> None:
    """Table 7 offline: the "Last Hidden" row on BBC News topics, a BiLSTM's sentence
    vector over the frozen last layer."""
    _stand_in_base_model(tmp_path)
    table = _tiny_table("table7.tiny+bbc")
    table.columns.bbc.finetune.max_seq_length = 32
    report = runner.run_table(
        run_settings.ablation_table(table), str(tmp_path), rows=["last_hidden"], columns=["bbc"]
    )
    (row,) = report["rows"]
    run = tmp_path / "last_hidden" / "bbc" / "seed0"
    results = json.loads((run / "results.json").read_text())
    assert (results["task"], results["approach"], results["layers"]) == ("bbc", "features", "-1")
    assert results["main_metric"] == "accuracy" and results["train_rows"] == 48
    assert results["epochs"][1]["train_loss"] < results["epochs"][0]["train_loss"]
    assert row["seeds"]["bbc"] == [pytest.approx(100 * results["best"]["accuracy"])]
    model = bilstm.FeatureBiLSTM(5, 8, 1, "weighted", per_token=False)
    feats, mask = jnp.ones((3, 7, 2, 4)), jnp.ones((3, 7), jnp.int32)
    params = model.init(jax.random.key(0), feats, mask)
    assert model.apply(params, feats, mask).shape == (3, 5)


STEPS = dict(num_train_steps=6, checkpoint_every_steps=6, eval_every_steps=6, async_checkpointing=False)


def _tiny_table(spec: str):
    table = ablation_configs.get_config(spec)
    for row in table.rows.values():
        run_config.set_keys(row, STEPS)
    return table


def test_ablate_table5_plus_bilstm_row_on_a_user_added_column(tmp_path, capsys) -> None:
    """The CLI on Table 5's "+ BiLSTM" row, fine-tuned on BBC News topics (a column the user
    adds) from the LTR row's model, which it pre-trains though that row is not asked for."""
    steps = ",".join(f"{k}={v}" for k, v in STEPS.items())
    cmd = [
        sys.executable, "-m", "bert_jax", "ablate", "--config=configs/ablations.py:table5.tiny+bbc",
        f"--workdir={tmp_path}", f"--set={steps}", "--rows=plus_bilstm", "--columns=bbc",
        "--finetune_set=learning_rate=3e-5",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    _check_schema(report, ["bbc"])
    rows = {r["row"]: r for r in report["rows"]}
    assert list(rows) == ["plus_bilstm"]
    for r in rows.values():
        assert len(r["seeds"]["bbc"]) == 1 and 0.0 <= r["ours"]["bbc"] <= 100.0
        assert r["paper"]["bbc"] is None
        assert r["pretraining"]["objective"] == "ltr" and r["pretraining"]["steps"] == 6
        assert r["pretraining"]["model_from"] == "ltr_no_nsp"
        assert 0.0 <= r["pretraining"]["lm_accuracy"] <= 1.0 and r["pretraining"]["pretraining_flops"] > 0
        assert r["pretraining"]["lm_accuracy_changed"] == r["pretraining"]["lm_accuracy"]  # LTR
    results = json.loads((tmp_path / "plus_bilstm" / "bbc" / "seed0" / "results.json").read_text())
    assert results["task"] == "bbc+bilstm" and results["checkpoint"] == str(tmp_path / "ltr_no_nsp")
    assert results["train_rows"] == 48 and results["learning_rate"] == 3e-5
    assert not (tmp_path / "plus_bilstm" / "checkpoints").exists()  # no pre-training of its own
    assert "| plus_bilstm |" in proc.stdout and proc.stdout.count("pre-training in") == 1
    # The table's line as each job starts: no estimate until a job of each kind left is done.
    table_lines = [line for line in proc.stdout.splitlines() if "fine-tuning runs done" in line]
    assert [line.split(";")[0] for line in table_lines] == [
        "== table5: 0 of 1 pre-trainings, 0 of 1 fine-tuning runs done",
        "== table5: 1 of 1 pre-trainings, 0 of 1 fine-tuning runs done",
    ]
    assert all(line.endswith("so far, about ? left") for line in table_lines)
    # A rerun finds every cell done: nothing is trained again, the report is the same.
    capsys.readouterr()
    table = _tiny_table("table5.tiny+bbc")
    table.columns.bbc.finetune.learning_rate = 3e-5
    again = runner.run_table(run_settings.ablation_table(table), str(tmp_path), ["plus_bilstm"], ["bbc"])
    assert json.loads(json.dumps(again)) == report
    out = capsys.readouterr().out
    assert "pre-training in" not in out and "seed 0 in" not in out


def test_figure5_plots_every_column_that_has_figures(tmp_path, monkeypatch) -> None:
    """At the cpu preset MNLI-m (no network) is empty and BBC topics has figures: the
    plot is of BBC topics, one line per objective through its steps (SVG, as without
    matplotlib)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rows = [
        {"row": f"{obj}@{k}", "step": k, "ours": {"mnli_m": None, "bbc": acc}}
        for obj, accs in (("mlm", (40.0, 55.0)), ("ltr", (78.0, 93.0)))
        for k, acc in zip((300, 1200), accs, strict=True)
    ]
    report = {"columns": ["mnli_m", "bbc"], "labels": {"mnli_m": "MNLI-m", "bbc": "BBC"}, "rows": rows}
    figures = figure5.write_figures(report, str(tmp_path))
    assert list(figures) == ["bbc"]
    svg = (tmp_path / figures["bbc"]).read_text()
    assert svg.count("<polyline") == 2 and ">MLM<" in svg and ">LTR<" in svg and "BBC (dev)" in svg
    assert not figure5.write_figures({**report, "columns": ["mnli_m"]}, str(tmp_path / "none"))


def test_task_data_this_machine_cannot_get_is_refused_before_any_row_pretrains(tmp_path, monkeypatch) -> None:
    """A column's TFDS dataset neither prepared nor downloadable here (no download host
    resolves), or a data folder that does not exist: one line naming the column, before
    the rows pre-train (at the paper's scale, days before the first fine-tuning)."""
    from bert_jax.data import corpora

    def no_network(host, *args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    for name in corpora._PROXIES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    table = _tiny_table("table5.tiny")
    table.data_dirs.glue = table.data_dirs.squad = f"tfds:{tmp_path / 'tfds'}"  # not TFDS's own folder
    with pytest.raises(
        ValueError, match=r"^column mnli_m \(mnli\): TFDS dataset 'glue/mnli' is not prepared"
    ):
        runner.run_table(run_settings.ablation_table(table), str(tmp_path / "run"))
    table.data_dirs.glue = str(tmp_path / "nowhere")
    with pytest.raises(
        ValueError, match=rf"^column mnli_m \(mnli\): data folder {tmp_path}/nowhere does not exist"
    ):
        runner.run_table(run_settings.ablation_table(table), str(tmp_path / "run"))
    # The columns asked for only: SQuAD's TFDS dataset is checked as GLUE's.
    with pytest.raises(
        ValueError, match=r"^column squad_f1 \(squad1\.1\): TFDS dataset 'squad/v1\.1' is not"
    ):
        runner.run_table(run_settings.ablation_table(table), str(tmp_path / "run"), columns=["squad_f1"])
    assert not list((tmp_path / "run").glob("*/checkpoints")) and not (tmp_path / "tfds").exists()


def test_figure5_pretrains_in_stages_and_finetunes_mnli_from_each(tmp_path, capsys) -> None:
    """MNLI from TFDS (mock data), fine-tuned from the MLM model at steps 3 and 6."""
    table = _tiny_table("figure5.tiny+squad_f1")
    table.columns.squad_f1.skip = "no data here"  # a column that runs nothing (as at cpu)
    assert tuple(table.steps) == (3, 6) and table.data_dirs.glue == "tfds"
    with prepared_mock_data(num_examples=16):
        report = runner.run_table(run_settings.ablation_table(table), str(tmp_path), rows=["mlm"])
    assert [(r["row"], r["step"]) for r in report["rows"]] == [("mlm@3", 3), ("mlm@6", 6)]
    _check_schema(report, ["mnli_m", "squad_f1"])
    assert all(len(r["seeds"]["mnli_m"]) == 1 and r["ours"]["squad_f1"] is None for r in report["rows"])
    for step in (3, 6):
        results = json.loads(
            (tmp_path / "mlm" / f"step{step}" / "mnli_m" / "seed0" / "results.json").read_text()
        )
        assert results["task"] == "mnli" and results["train_rows"] == 16
        assert "dev_mismatched/accuracy" in results["best"]
    assert figure5.latest_checkpoint_step(str(tmp_path / "mlm")) == 6
    assert list(report["figures"]) == ["mnli_m"] and (tmp_path / report["figures"]["mnli_m"]).exists()
    assert f"]({report['figures']['mnli_m']})" in (tmp_path / "report.md").read_text()
    # Nothing to redo (the skipped column neither): the stages are not pre-trained again.
    again = runner.run_table(run_settings.ablation_table(table), str(tmp_path), rows=["mlm"])
    assert again["rows"] == report["rows"]
    # The table's line as each stage's pre-training and each run started (none for the rerun).
    table_lines = [line for line in capsys.readouterr().out.splitlines() if "fine-tuning runs done" in line]
    assert [line.split(";")[0] for line in table_lines] == [
        "== figure5: 0 of 2 pre-training stages, 0 of 2 fine-tuning runs done",
        "== figure5: 1 of 2 pre-training stages, 0 of 2 fine-tuning runs done",
        "== figure5: 1 of 2 pre-training stages, 1 of 2 fine-tuning runs done",
        "== figure5: 2 of 2 pre-training stages, 1 of 2 fine-tuning runs done",
    ]
    assert table_lines[1].endswith("about ? left") and not table_lines[2].endswith("about ? left")


def test_squad_and_conll_by_tfds_name_are_written_in_the_original_format(tmp_path) -> None:
    import tensorflow as tf

    from bert_jax.ablations import task_data
    from bert_jax.tasks import ner, squad_examples
    from tests.helpers.task_data import build_squad

    sentences = [["EU", "rejects", "German", "call"], ["Peter", "Blackburn"], ["BRUSSELS"]]
    ner_ids = [[3, 0, 7, 0], [1, 2], [5]]  # TFDS's order: O B-PER I-PER B-ORG I-ORG B-LOC I-LOC B-MISC I-MISC
    release = build_squad(version_2=False, n_articles=2)
    qas = [(a["title"], p["context"], q) for a in release["data"] for p in a["paragraphs"] for q in p["qas"]]

    def as_dataset(self, split, **kwargs):
        if self.name == "conll2003":
            zeros = tf.ragged.constant([[0] * len(x) for x in ner_ids])
            return tf.data.Dataset.from_tensor_slices(
                {"tokens": tf.ragged.constant(sentences), "ner": tf.ragged.constant(ner_ids), "pos": zeros,
                 "chunks": zeros}
            )  # fmt: skip
        return tf.data.Dataset.from_tensor_slices(
            {
                "id": [q["id"] for _, _, q in qas],
                "title": [t for t, _, _ in qas],
                "context": [c for _, c, _ in qas],
                "question": [q["question"] for _, _, q in qas],
                "answers": {
                    "text": [[a["text"] for a in q["answers"]] for _, _, q in qas],
                    "answer_start": [[a["answer_start"] for a in q["answers"]] for _, _, q in qas],
                },
            }
        )

    assert task_data.resolve("sst2", "tfds", str(tmp_path)) == "tfds"  # GLUE reads TFDS itself
    assert task_data.resolve("conll2003", "/data/conll", str(tmp_path)) == "/data/conll"
    with prepared_mock_data(as_dataset_fn=as_dataset):
        conll = task_data.resolve("conll2003", "tfds", str(tmp_path))
        squad = task_data.resolve("squad1.1+bilstm", "tfds", str(tmp_path))
    assert sorted(p.name for p in Path(conll).iterdir()) == [
        ".complete",
        "test.txt",
        "train.txt",
        "valid.txt",
    ]
    dev = ner.read_conll(ner.split_path(conll, "dev"))
    assert [s.words for s in dev] == sentences
    assert [s.tags for s in dev] == [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"], ["B-LOC"]]
    assert json.loads((Path(squad) / "dev-v1.1.json").read_text()) == json.loads(json.dumps(release))
    assert len(squad_examples.read_examples(str(Path(squad) / "train-v1.1.json"), version_2=False)[1]) == len(
        qas
    )
    # Written once: a second call reads the folder as it is.
    (Path(conll) / "train.txt").write_text("x X X O\n")
    assert task_data.resolve("conll2003", "tfds", str(tmp_path)) == conll
    assert (Path(conll) / "train.txt").read_text() == "x X X O\n"


def test_plan_estimates_a_tables_time_chip_hours_and_cost(tmp_path) -> None:
    from bert_jax.ablations import cost

    table = run_settings.ablation_table(ablation_configs.get_config("table6"))
    plan = cost.estimate(table, "v5e:4x4", mfu=0.5, chip_hour_usd=1.2)
    assert plan["chips"] == 16 and [e["row"] for e in plan["pretraining"]] == list(table.row_order)
    seconds = {e["row"]: e["seconds"] for e in plan["pretraining"]}
    assert seconds["L3_H768_A12"] < seconds["L12_H768_A12"] < seconds["L24_H1024_A16"]
    sustained = 16 * 197e12 * 0.5
    assert seconds["L12_H768_A12"] == pytest.approx(
        cells.pretraining_flops(table.pretraining["L12_H768_A12"]) / sustained
    )
    planned = {(e["row"], e["column"]): e for e in plan["finetuning"]}
    assert len(planned) == 6 * 4 and planned[("L3_H768_A12", "lm_ppl")]["flops"] == 0.0
    # MNLI: 392,702 rows in batches of 32 for 3 epochs, 5 seeds, at length 128.
    model = table.pretraining["L12_H768_A12"].model
    per_step = flops.model_flops_per_step(model, 32, 128, 0, nsp=False)
    assert planned[("L12_H768_A12", "mnli_m")]["flops"] == pytest.approx(
        math.ceil(392_702 / 32) * 3 * 5 * per_step
    )
    total = sum(e["seconds"] for e in plan["pretraining"] + plan["finetuning"]) / 3600
    assert plan["total_hours"] == pytest.approx(total) and plan["chip_hours"] == pytest.approx(16 * total)
    assert plan["cost_usd"] == pytest.approx(1.2 * plan["chip_hours"])
    md = cost.write(plan, str(tmp_path))
    assert "| L24_H1024_A16 |" in md and "chip-hours" in md and (tmp_path / "plan.json").exists()
    # The feature-based cells run the encoder forward only; "+ BiLSTM" is planned from the LTR model.
    t8 = cost.estimate(
        run_settings.ablation_table(ablation_configs.get_config("table8")),
        "v4:2x2x4",
        rows=["mask80_same10_rnd10"],
    )
    feature = next(e for e in t8["finetuning"] if e["column"] == "ner_feature_f1")
    finetune = next(e for e in t8["finetuning"] if e["column"] == "ner_finetune_f1")
    assert feature["flops"] < finetune["flops"] and t8["cost_usd"] is None
    t5 = cost.estimate(
        run_settings.ablation_table(ablation_configs.get_config("table5")), "v5e:2x2", rows=["plus_bilstm"]
    )
    assert [e["row"] for e in t5["pretraining"]] == ["ltr_no_nsp"]


def test_plan_compile_says_each_compile_as_it_goes() -> None:
    """`ablate --plan=TOPOLOGY --plan_compile`: each pre-training row's steps compiled for the
    slice, a line naming the row as each compile starts and one as it ends."""
    from bert_jax.ablations import cost

    table = run_settings.ablation_table(ablation_configs.get_config("table5.cpu"))
    lines: list[str] = []
    plan = cost.estimate(
        table, "v5e:2x2", rows=[table.row_order[0]], columns=[table.column_order[0]], compile=True,
        progress=lines.append,
    )  # fmt: skip
    (entry,) = plan["pretraining"]
    assert entry["fits"] and 0 < entry["hbm_per_chip_bytes"] < 16 * 1024**3
    row = re.escape(entry["row"])
    assert lines and len(lines) % 2 == 0, lines
    for started, ended in zip(lines[::2], lines[1::2], strict=True):
        begins = rf"{row}: compiling the step for v5e:2x2: \d+ x \d+ .* micro-batch(es)? \.\.\."
        assert re.fullmatch(begins, started), started
        assert re.fullmatch(rf"{row}: compiled in \d+\.\d s: \d+\.\d\d GiB per chip, fits", ended), ended
