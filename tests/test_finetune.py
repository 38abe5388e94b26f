"""Fine-tuning: the real MiniLM BERT on BBC News topics; GLUE TSV reading; metrics."""

import numpy as np
import pytest
import scipy.stats

from bert_jax import finetune, metrics
from bert_jax.tasks import bbc, get_task
from configs import finetune as finetune_configs


def test_bbc_news_split_is_fixed_and_disjoint() -> None:
    train, dev = bbc.read("", "train"), bbc.read("", "dev")
    assert len(train) + len(dev) == 2225
    assert 380 < len(dev) < 520
    assert not {e.guid for e in train} & {e.guid for e in dev}
    assert {e.label for e in dev} == set(range(5))


def test_finetuning_real_minilm_on_bbc_news_reaches_high_dev_accuracy(tmp_path) -> None:
    c = finetune_configs.get_config("bbc")
    c.max_train_examples = 320
    c.max_eval_examples = 0
    c.max_seq_length = 64
    c.batch_size = 16
    c.learning_rate = 1e-4
    c.num_epochs = 2
    best = finetune.finetune(c, str(tmp_path))
    assert best["accuracy"] > 0.85  # chance is 0.2 (5 balanced-ish topics)
    assert (tmp_path / "results.json").exists() and (tmp_path / "metrics.jsonl").exists()


def _write_glue(root, folder, name, text) -> None:
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / folder / name).write_text(text)


def test_glue_tsv_layouts_and_bad_input(tmp_path) -> None:
    _write_glue(tmp_path, "SST-2", "train.tsv", "sentence\tlabel\ngreat film \t1\nawful\t0\n")
    _write_glue(tmp_path, "CoLA", "train.tsv", "gj04\t1\t\tThe book was read.\nx\t0\t*\tBook the read.\n")
    _write_glue(
        tmp_path,
        "MNLI",
        "dev_matched.tsv",
        "index\tsentence1\tsentence2\tgold_label\n0\tA man.\tA person.\tentailment\n",
    )
    _write_glue(tmp_path, "STS-B", "train.tsv", "sentence1\tsentence2\tscore\na\tb\t3.8\n")
    sst = get_task("sst2").read(str(tmp_path), "train")
    assert [(e.text_a, e.label) for e in sst] == [("great film ", 1), ("awful", 0)]
    cola = get_task("cola").read(str(tmp_path), "train")
    assert [(e.text_a, e.label) for e in cola] == [("The book was read.", 1), ("Book the read.", 0)]
    mnli = get_task("mnli").read(str(tmp_path), "dev")
    assert (mnli[0].text_b, mnli[0].label) == ("A person.", 1)
    assert get_task("stsb").read(str(tmp_path), "train")[0].label == pytest.approx(3.8)

    _write_glue(tmp_path, "RTE", "train.tsv", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n")
    with pytest.raises(ValueError, match=r"RTE/train\.tsv:2: label 'maybe' is not one of"):
        get_task("rte").read(str(tmp_path), "train")
    _write_glue(tmp_path, "QNLI", "train.tsv", "index\tquestion\tlabel\n0\tq\tentailment\n")
    with pytest.raises(ValueError, match=r"QNLI/train\.tsv:2: missing column 'sentence'"):
        get_task("qnli").read(str(tmp_path), "train")
    _write_glue(tmp_path, "WNLI", "train.tsv", "index\tsentence1\tsentence2\tlabel\n")
    with pytest.raises(ValueError, match="the train split is empty"):
        get_task("wnli").read(str(tmp_path), "train")
    with pytest.raises(ValueError, match="unknown task 'sst3'"):
        get_task("sst3")


def test_metrics_match_scipy_and_definitions() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=200), rng.normal(size=200)
    y[:50] = x[:50]
    xt = np.round(x, 1)  # ties
    assert metrics.pearson(x, y) == pytest.approx(scipy.stats.pearsonr(x, y)[0], abs=1e-10)
    assert metrics.spearman(xt, y) == pytest.approx(scipy.stats.spearmanr(xt, y)[0], abs=1e-10)
    labels = rng.integers(0, 2, 300)
    preds = np.where(rng.random(300) < 0.8, labels, 1 - labels)
    tp = np.sum((preds == 1) & (labels == 1))
    tn = np.sum((preds == 0) & (labels == 0))
    fp = np.sum((preds == 1) & (labels == 0))
    fn = np.sum((preds == 0) & (labels == 1))
    mcc = (tp * tn - fp * fn) / np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))
    assert metrics.matthews_corr(labels, preds) == pytest.approx(mcc)
    assert metrics.f1_binary(labels, preds) == pytest.approx(2 * tp / (2 * tp + fp + fn))
    assert metrics.accuracy(labels, preds) == pytest.approx((tp + tn) / 300)
