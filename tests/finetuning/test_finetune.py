"""The fine-tuning loop: the real MiniLM BERT on BBC News topics, and every task family
(classification with GLUE submission files, SQuAD v2.0 spans, NER tags, SWAG choices) end
to end with a tiny random BERT; the sweep's table; checkpoint/vocab mismatches."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers

import bert_jax
from bert_jax import convert
from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.finetuning import finetune, sweep
from bert_jax.model import param_shapes
from bert_jax.tasks import bbc, ner, scorers, swag
from bert_jax.tasks.base import MODEL_INPUTS
from bert_jax.tasks.registry import get_task
from bert_jax.training import run_config
from configs import bbc as bbc_config
from configs import finetune as any_config
from configs import glue as glue_config
from configs import ner as ner_config
from configs import squad as squad_config
from configs import swag as swag_config
from tests.conftest import ROOT
from tests.helpers import results as worker_results
from tests.helpers.task_data import bbc_sentences, build_squad, tagged_sentences, write_sst2


def _tiny(config, checkpoint: str, **overrides):
    config.init_checkpoint = checkpoint
    config.data.vocab_file = tokenization.default_vocab_file()
    config.log_every_steps = 5
    return run_config.set_keys(config, overrides)


def _exports_as(saved: Path, auto_class, key: str, labels: list[str]) -> None:
    """A fine-tuned ``best_model`` converts to the `transformers` class of its head, whole
    (nothing missing, the head's weights its own) and with its labels' names."""
    params, config = convert.load_checkpoint(str(saved))
    dst = saved.parent / "hf_export"
    convert.save_checkpoint(str(dst), params, config, "hf", label_names=convert.label_names(str(saved)))
    model, info = auto_class.from_pretrained(str(dst), output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    weight = model.state_dict()[f"{'qa_outputs' if key == 'qa_outputs' else 'classifier'}.weight"].numpy()
    np.testing.assert_array_equal(weight, np.asarray(params[key]["kernel"]).T)
    assert [model.config.id2label[i] for i in range(len(labels))] == labels


def test_bbc_news_split_is_fixed_and_disjoint() -> None:
    train, dev = bbc.read("", "train"), bbc.read("", "dev")
    assert len(train) + len(dev) == 2225
    assert 380 < len(dev) < 520
    assert not {e.guid for e in train} & {e.guid for e in dev}
    assert {e.label for e in dev} == set(range(5))
    assert all("Â" not in e.text_b for e in dev)  # UTF-8 decoded (the pound sign is "£")


def test_finetuning_real_minilm_on_bbc_news_reaches_high_dev_accuracy(tmp_path, capsys) -> None:
    c = bbc_config.get_config()
    c.max_train_examples = 320
    c.max_seq_length = 32  # the title and the first words of the article
    c.global_batch_size = 16
    c.learning_rate = 1e-4
    c.num_epochs = 2
    best = run_settings.finetune(c, str(tmp_path))
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["eval_rows"] == {"dev": len(bbc.read("", "dev"))}  # the whole dev split
    dev = len(bbc.read("", "dev"))  # every article is longer than 32 pieces: the run says so
    assert (
        f"rows: train 320 (320 cut at max_seq_length=32), dev {dev} ({dev} cut at" in capsys.readouterr().out
    )
    assert best.metrics["accuracy"] > 0.8  # chance is about 0.23 (5 topics); measured 0.89
    assert results["epochs"][1]["train_loss"] < results["epochs"][0]["train_loss"]
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("split") == "dev" and "accuracy" in r for r in rows)
    assert list((tmp_path / "tensorboard").iterdir())


def _evaluates_as_trained(c, saved: Path, accuracy: float, tmp_path: Path, capsys) -> None:
    """`finetune --evaluate` of the saved model, and of its transformers export, scores what
    the run reported, trains nothing and reads no training data; an export whose classes
    are stored in another order is matched by their names; one that does not name them is
    taken in order, with a warning line."""
    import safetensors.numpy

    capsys.readouterr()
    (Path(c.data_dir) / "SST-2" / "train.tsv").rename(tmp_path / "train.tsv")  # not read
    for source in (saved, saved.parent / "hf_export"):
        c.init_checkpoint = str(source)
        result = run_settings.evaluate(c, str(tmp_path / "evaluated" / source.name))
        assert result.metrics["accuracy"] == pytest.approx(accuracy), source
    assert json.loads((tmp_path / "evaluated" / "hf_export" / "evaluation.json").read_text())["scores"] == {
        "accuracy": pytest.approx(accuracy)
    }
    swapped = tmp_path / "swapped"
    shutil.copytree(saved.parent / "hf_export", swapped)
    state = safetensors.numpy.load_file(str(swapped / "model.safetensors"))
    state = {**state, "classifier.weight": state["classifier.weight"][::-1].copy(),
             "classifier.bias": state["classifier.bias"][::-1].copy()}  # fmt: skip
    safetensors.numpy.save_file(state, str(swapped / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((swapped / "config.json").read_text())
    config["id2label"], config["label2id"] = {"0": "1", "1": "0"}, {"1": 0, "0": 1}
    (swapped / "config.json").write_text(json.dumps(config))
    c.init_checkpoint = str(swapped)
    with pytest.raises(ValueError, match=r"holds the evaluation of .*hf_export .*pass --overwrite"):
        run_settings.evaluate(c, str(tmp_path / "evaluated" / "hf_export"))  # another checkpoint's
    assert run_settings.evaluate(c, str(tmp_path / "evaluated" / "swapped")).metrics["accuracy"] == (
        pytest.approx(accuracy)
    )
    assert "warning" not in capsys.readouterr().out
    config["id2label"], config["label2id"] = {"0": "LABEL_0", "1": "LABEL_1"}, {"LABEL_0": 0, "LABEL_1": 1}
    (swapped / "config.json").write_text(json.dumps(config))
    unnamed = run_settings.evaluate(c, str(tmp_path / "evaluated" / "unnamed")).metrics["accuracy"]
    assert unnamed == pytest.approx(1.0 - accuracy)  # two classes, swapped
    assert f"warning: {swapped} does not name its classes: taken in sst2's order ['0', '1']" in (
        capsys.readouterr().out
    )
    (tmp_path / "train.tsv").rename(Path(c.data_dir) / "SST-2" / "train.tsv")


def _continues_from_its_head(
    c, saved: Path, accuracy: float, pre_trained: str, tmp_path: Path, capsys
) -> None:
    """Fine-tuning from a fine-tuned model starts a fresh head and says so in one line; with
    ``keep_head`` it starts from the model's own head (from its `transformers` export too):
    a run that barely moves the weights scores what the model did, where a fresh head does
    not; a checkpoint without a head is refused in one line."""
    capsys.readouterr()
    saved_head = convert.load_checkpoint(str(saved))[0]["classifier"]
    export = saved.parent / "hf_export"
    for source in (saved, export):
        c.init_checkpoint, c.keep_head = str(source), False
        fresh = finetune.load_inputs(run_settings.finetune_settings(c))
        assert not np.array_equal(fresh.params["classifier"]["kernel"], saved_head["kernel"])
        c.keep_head = True
        kept = finetune.load_inputs(run_settings.finetune_settings(c))
        np.testing.assert_array_equal(kept.params["classifier"]["kernel"], saved_head["kernel"])
        np.testing.assert_array_equal(kept.params["classifier"]["bias"], saved_head["bias"])
    out = capsys.readouterr().out
    for source in (saved, export):
        line = f"warning: {source} is fine-tuned: sst2 starts a fresh head, not its sequence classifier"
        assert f"{line} (--config.keep_head=true continues from it)" in out
    # A run that barely moves the weights: its loss is the saved model's, not a fresh head's
    # (ln 2 = 0.69 for two classes), and its accuracy the saved model's.
    c.learning_rate, c.num_epochs, c.predict_test, c.max_train_examples = 1e-12, 1, False, 32
    c.init_checkpoint, c.keep_head = str(export), True
    again = run_settings.finetune(c, str(tmp_path / "again"))
    (epoch,) = json.loads((tmp_path / "again" / "epochs.json").read_text())
    assert epoch["train_loss"] < 0.3 and again.metrics["accuracy"] == pytest.approx(accuracy)
    c.init_checkpoint = pre_trained
    refused = (
        r"holds no task head, not a sequence classifier for sst2: --config.keep_head=true continues from"
    )
    with pytest.raises(ValueError, match=refused):
        finetune.load_inputs(run_settings.finetune_settings(c))
    c.keep_head = False


def test_glue_task_trains_and_writes_the_submission_file(tmp_path, tiny_checkpoint, capsys) -> None:
    data = write_sst2(tmp_path / "glue")
    c = _tiny(glue_config.get_config("sst2"), tiny_checkpoint, data_dir=str(data), max_seq_length=48,
              global_batch_size=8, learning_rate=2e-3, num_epochs=6, predict_test=True)  # fmt: skip
    best = run_settings.finetune(c, str(tmp_path / "run"))
    assert best.metrics["accuracy"] >= 0.9  # the appended word decides the label
    # The best epoch is saved whole: re-scoring it gives the same dev accuracy.
    saved = tmp_path / "run" / "best_model"
    assert json.loads((saved / "task.json").read_text())["best"]["accuracy"] == best.metrics["accuracy"]
    again = finetune.evaluate_saved(run_settings.finetune_settings(c), str(saved), str(tmp_path / "rescore"))
    assert again["accuracy"] == pytest.approx(best.metrics["accuracy"])
    lines = (tmp_path / "run" / "test" / "SST-2.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 11
    got = [x.split("\t")[1] for x in lines[1:]]
    assert set(got) <= {"0", "1"}  # labels, not logits or indices
    assert sum(g == ("1" if i % 2 else "0") for i, g in enumerate(got)) >= 9  # the best epoch's model
    _exports_as(saved, transformers.AutoModelForSequenceClassification, "classifier", ["0", "1"])
    _evaluates_as_trained(c, saved, best.metrics["accuracy"], tmp_path, capsys)
    _continues_from_its_head(c, saved, best.metrics["accuracy"], tiny_checkpoint, tmp_path, capsys)
    # A folder saved before task.json named its head's kind: the encoder loads alone.
    record = json.loads((saved / "task.json").read_text())
    del record["head"]
    (saved / "task.json").write_text(json.dumps(record))
    assert sorted(convert.load_checkpoint(str(saved))[0]) == ["bert"]


def test_squad_v2_end_to_end_writes_official_prediction_files(tmp_path, tiny_checkpoint) -> None:
    dataset = build_squad(version_2=True, n_articles=4)
    (tmp_path / "train-v2.0.json").write_text(json.dumps(dataset))
    (tmp_path / "dev-v2.0.json").write_text(json.dumps(dataset))
    c = _tiny(squad_config.get_config("2.0"), tiny_checkpoint, data_dir=str(tmp_path), max_seq_length=96,
              doc_stride=32, max_query_length=24, global_batch_size=8, learning_rate=3e-3,
              num_epochs=3)  # fmt: skip
    best = run_settings.finetune(c, str(tmp_path / "run"))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    losses = [e["train_loss"] for e in results["epochs"]]
    assert losses[-1] < losses[0]
    out = tmp_path / "run" / "eval" / f"epoch{best.metrics['epoch']}" / "dev"
    preds = json.loads((out / "predictions.json").read_text())
    null_odds = json.loads((out / "null_odds.json").read_text())
    qids = {qa["id"] for a in dataset["data"] for p in a["paragraphs"] for qa in p["qas"]}
    assert set(preds) == qids == set(null_odds)
    # The reported scores are the official ones of the files written.
    rescored = scorers.squad_v2(dataset["data"], preds, null_odds)
    assert {k: best.metrics[k] for k in rescored} == pytest.approx(rescored)
    assert 0.0 <= best.metrics["best_f1"] <= 100.0 and best.metrics["best_f1"] >= best.metrics["f1"]
    assert (out / "predictions_tuned.json").exists() and (out / "nbest_predictions.json").exists()
    saved = tmp_path / "run" / "best_model"
    _exports_as(saved, transformers.AutoModelForQuestionAnswering, "qa_outputs", [])
    for source in (saved, saved.parent / "hf_export"):  # the span head scored again, saved and exported
        c.init_checkpoint = str(source)
        again = run_settings.evaluate(c, str(tmp_path / "evaluated" / source.name)).metrics
        assert again["f1"] == pytest.approx(best.metrics["f1"]) and again["exact"] == best.metrics["exact"]


def _conll(root: Path) -> Path:
    """CoNLL-format files: real sentences with gazetteer entities inserted (IOB2 tags)."""
    entities = [("london", "LOC"), ("new york", "LOC"), ("gordon brown", "PER"), ("tony blair", "PER"),
                ("the bbc", "ORG"), ("nokia", "ORG"), ("euro", "MISC")]  # fmt: skip
    rng = random.Random(0)
    root.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.txt", 90), ("valid.txt", 30), ("test.txt", 10)):
        lines = ["-DOCSTART- -X- -X- O", ""]
        for words in tagged_sentences(n, len(name) + n, entities, rng):
            lines += [f"{w} NN O {t}" for w, t in words] + [""]
        (root / name).write_text("\n".join(lines) + "\n")
    return root


def test_ner_end_to_end_scores_entities_as_seqeval(tmp_path, tiny_checkpoint) -> None:
    from seqeval.metrics import f1_score

    data = _conll(tmp_path / "conll")
    c = _tiny(ner_config.get_config(), tiny_checkpoint, data_dir=str(data), **{"data.do_lower_case": True},
              max_seq_length=64, global_batch_size=8, learning_rate=3e-3, num_epochs=8,
              predict_test=True)  # fmt: skip
    best = run_settings.finetune(c, str(tmp_path / "run"))
    assert best.metrics["f1"] > 0.5  # gazetteer words are learnable from their pieces
    written = (
        tmp_path / "run" / "eval" / f"epoch{best.metrics['epoch']}" / "dev" / "dev_predictions.txt"
    ).read_text()
    gold, pred = [], []
    for block in written.strip().split("\n\n"):
        rows = [line.split() for line in block.splitlines()]
        gold.append([r[1] for r in rows])
        pred.append([r[2] for r in rows])
    assert len(gold) == 30
    assert best.metrics["f1"] == pytest.approx(f1_score(gold, pred))
    assert (tmp_path / "run" / "test" / "test_predictions.txt").exists()
    _exports_as(tmp_path / "run" / "best_model", transformers.AutoModelForTokenClassification,
                "token_classifier", list(ner.TAGS))  # fmt: skip
    for source in ("best_model", "hf_export"):  # the tagger scored again, as saved and as exported
        c.init_checkpoint = str(tmp_path / "run" / source)
        again = run_settings.evaluate(c, str(tmp_path / "evaluated" / source)).metrics["f1"]
        assert again == pytest.approx(best.metrics["f1"])


def _swag(root: Path) -> Path:
    """SWAG-release CSVs from real sentences: the true ending is the sentence's own end."""
    root.mkdir(parents=True, exist_ok=True)
    header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
    rng = random.Random(0)
    for name, n in (("train.csv", 24), ("val.csv", 8), ("test.csv", 4)):
        sentences = bbc_sentences(n * 4, seed=n)
        lines = [header if name != "test.csv" else header.replace(",label", "")]
        for i in range(n):
            words = sentences[4 * i].replace('"', "").replace(",", "").split()
            cut = len(words) // 2
            others = [
                " ".join(s.replace('"', "").replace(",", "").split()[-3:])
                for s in sentences[4 * i + 1 : 4 * i + 4]
            ]
            label = rng.randrange(4)
            endings = [*others[:label], " ".join(words[cut + 2 :]), *others[label:]]
            row = [
                str(i),
                "v",
                "0",
                "x",
                " ".join(words[:cut]),
                " ".join(words[cut : cut + 2]),
                "gold",
                *endings,
            ]
            lines.append(",".join(row + ([str(label)] if name != "test.csv" else [])) + "\n")
        (root / name).write_text("".join(lines))
    return root


def test_swag_end_to_end_multiple_choice(tmp_path, tiny_checkpoint) -> None:
    data = _swag(tmp_path / "swag")
    c = _tiny(swag_config.get_config(), tiny_checkpoint, data_dir=str(data), max_seq_length=48,
              global_batch_size=4, eval_batch_size=4, learning_rate=3e-3, num_epochs=3,
              predict_test=True)  # fmt: skip
    best = run_settings.finetune(c, str(tmp_path / "run"))
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["train_rows"] == 24 and results["eval_rows"] == {"dev": 8}
    assert 0.0 <= best.metrics["accuracy"] <= 1.0
    losses = [e["train_loss"] for e in results["epochs"]]
    assert losses[-1] < losses[0]  # 24 questions are memorised
    rows = (tmp_path / "run" / "test" / "swag_test.csv").read_text().splitlines()
    assert rows[0].startswith("line,pred,score0") and len(rows) == 5
    # `predict` on the saved model: each test row's choice and its softmax, as the run wrote them
    examples = swag.read_swag(str(data / "test.csv"), labelled=False)
    texts = ["\t".join([e.context, *(f"{e.start} {x}".strip() for x in e.endings)]) for e in examples]
    got = bert_jax.predict(str(tmp_path / "run" / "best_model"), texts, max_seq_length=48)
    for record, row in zip(got, rows[1:], strict=True):
        scores = np.array([float(x) for x in row.split(",")[2:]])
        assert record["choice"] == int(row.split(",")[1])
        np.testing.assert_allclose(record["probabilities"], np.exp(scores) / np.exp(scores).sum(), atol=1e-4)


def test_sweep_from_the_command_line_writes_the_table_and_resumes(
    tmp_path, tiny_checkpoint, monkeypatch
) -> None:
    data = write_sst2(tmp_path / "glue")
    workdir = tmp_path / "sweep"
    overrides = {"data_dir": str(data), "init_checkpoint": tiny_checkpoint,
                 "data.vocab_file": tokenization.default_vocab_file(), "max_seq_length": 32,
                 "max_train_examples": 16, "eval_batch_size": 32}  # fmt: skip
    grid = {"global_batch_sizes": "(8,)", "learning_rates": "(1e-3, 5e-4)", "epochs": "(1,)", "seeds": "(0,)"}
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "finetune", "--config=configs/glue.py:sst2",
         f"--workdir={workdir}", "--sweep", *(f"--config.{k}={v}" for k, v in overrides.items()),
         *(f"--config.sweep.{k}={v}" for k, v in grid.items())],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "best run:" in proc.stdout
    runs = (workdir / "sweep_runs.tsv").read_text().splitlines()
    assert len(runs) == 1 + 2 and runs[0].startswith(
        "global_batch_size\tlearning_rate\tepochs\tseed\taccuracy"
    )
    table = (workdir / "sweep_table.md").read_text()
    assert "| 8 | 0.001 | 1 | 1 |" in table and "| 8 | 0.0005 | 1 | 1 |" in table
    best = json.loads((workdir / "sweep_best.json").read_text())
    assert best["score"] == pytest.approx(max(float(r.split("\t")[4]) for r in runs[1:]))
    assert json.loads((workdir / "bs8_lr0.001_ep1_seed0" / "results.json").read_text())["task"] == "sst2"
    # Rerunning the same sweep reuses the finished runs.
    c = run_config.set_keys(glue_config.get_config("sst2"), overrides)
    c.sweep.global_batch_sizes, c.sweep.learning_rates, c.sweep.epochs, c.sweep.seeds = (
        (8,),
        (1e-3, 5e-4),
        (1,),
        (0,),
    )
    monkeypatch.setattr(sweep, "finetune", lambda *a: pytest.fail("a finished run was repeated"))
    assert sweep.sweep(run_settings.finetune_settings(c), str(workdir)) == best


def test_a_sweeps_later_seeds_compile_nothing_anew(tmp_path, tiny_checkpoint) -> None:
    """The sweep's runs share its compilation cache: a second seed of a grid point finds
    every program of the first there (seeds are inputs, not constants of a program)."""
    c = run_config.set_keys(
        glue_config.get_config("sst2"),
        {"data_dir": str(write_sst2(tmp_path / "glue")), "init_checkpoint": tiny_checkpoint,
         "data.vocab_file": tokenization.default_vocab_file(), "max_seq_length": 32,
         "max_train_examples": 16, "eval_batch_size": 32},
    )  # fmt: skip
    c.sweep.global_batch_sizes, c.sweep.learning_rates, c.sweep.epochs = (8,), (1e-3,), (1,)
    workdir, programs = tmp_path / "sweep", lambda: sorted(p.name for p in cache.iterdir())
    cache = workdir / "compilation_cache"
    c.sweep.seeds = (0,)
    sweep.sweep(run_settings.finetune_settings(c), str(workdir))
    first = programs()
    assert len(first) >= 3  # the head's initialisation, the state's, the train step, ...
    c.sweep.seeds = (0, 1)
    sweep.sweep(run_settings.finetune_settings(c), str(workdir))
    assert (workdir / "bs8_lr0.001_ep1_seed1" / "results.json").exists()
    assert programs() == first


def test_wrong_size_checkpoint_and_vocab_fail_clearly(tmp_path, tiny_checkpoint) -> None:
    init = {"embeddings": {"word_embeddings": {"embedding": jnp.zeros((30522, 64))}}}
    loaded = {"embeddings": {"word_embeddings": {"embedding": jnp.zeros((30522, 32))}}}
    with pytest.raises(ValueError, match=r"ckpt: shape mismatch at embeddings/word_embeddings/embedding"):
        param_shapes.merge_params(init, loaded, "ckpt")
    with pytest.raises(ValueError, match="ckpt: missing from the checkpoint: pooler/dense/kernel"):
        param_shapes.merge_params({"pooler": {"dense": {"kernel": jnp.zeros(2)}}}, loaded, "ckpt")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    c = _tiny(
        glue_config.get_config("sst2"),
        tiny_checkpoint,
        data_dir=str(tmp_path),
        **{"data.vocab_file": str(vocab)},
    )
    with pytest.raises(ValueError, match=r"vocab.txt has 7 tokens but .* was trained with 30522"):
        run_settings.finetune(c, str(tmp_path / "run"))
    c.layer_loop = "scan"  # scanned layers are pre-training's: refused before anything is read
    with pytest.raises(ValueError, match=r"^config.layer_loop='scan' is for pre-training: .*=auto\)$"):
        run_settings.finetune(c, str(tmp_path / "run"))
    with pytest.raises(ValueError, match="unknown task 'sst3'"):
        any_config.get_config("sst3")
    assert (
        any_config.get_config("squad2.0").task == "squad2.0" and get_task("squad2.0").main_metric == "best_f1"
    )


def test_random_init_keeps_the_architecture_and_draws_fresh_weights(tiny_checkpoint) -> None:
    """The random-init baseline: the checkpoint's shapes and vocabulary, none of its weights."""
    c = _tiny(bbc_config.get_config(), tiny_checkpoint, max_train_examples=16, max_eval_examples=8)
    loaded = finetune.load_inputs(run_settings.finetune_settings(c))
    c.random_init = True
    fresh = finetune.load_inputs(run_settings.finetune_settings(c))
    assert fresh.bert_config == loaded.bert_config
    flat = lambda p: dict(jax.tree_util.tree_flatten_with_path(p)[0])
    before, after = flat(loaded.params), flat(fresh.params)
    assert before.keys() == after.keys()
    assert all(np.shape(before[k]) == np.shape(after[k]) for k in before)
    encoder = [k for k in before if k[0].key == "bert" and k[-1].key in ("kernel", "embedding")]
    assert encoder and not any(np.allclose(before[k], after[k]) for k in encoder)
    again = flat(
        finetune.load_inputs(run_settings.finetune_settings(c)).params
    )  # the same seed: the same baseline
    assert all(np.array_equal(after[k], again[k]) for k in after)


def test_the_fresh_head_is_the_models_own_initialisation(tiny_checkpoint) -> None:
    """`load_inputs` draws only the head (a compiled program without the encoder's draws):
    bitwise the head `model.init` gives with the run's seed, and the checkpoint's encoder."""
    c = _tiny(bbc_config.get_config(), tiny_checkpoint, max_train_examples=16, max_eval_examples=8)
    settings = run_settings.finetune_settings(c)
    inputs = finetune.load_inputs(settings)
    model = inputs.task.model(inputs.bert_config)
    sample = [jnp.asarray(inputs.train.arrays[k][:1]) for k in MODEL_INPUTS]
    eager = nn.meta.unbox(model.init(jax.random.key(settings.seed), *sample))["params"]
    heads = [k for k in eager if k != "bert"]
    assert heads and sorted(inputs.params) == sorted(eager)
    flat = lambda p: dict(jax.tree_util.tree_flatten_with_path(p)[0])
    for name in heads:
        mine, theirs = flat(inputs.params[name]), flat(jax.device_get(eager[name]))
        assert mine.keys() == theirs.keys()
        same = [np.array_equal(mine[k], theirs[k]) and mine[k].dtype == theirs[k].dtype for k in mine]
        assert all(same), name
    loaded, _ = convert.load_checkpoint(tiny_checkpoint)
    encoder, saved = flat(inputs.params["bert"]), flat(loaded["bert"])
    assert all(np.array_equal(v, saved[k]) for k, v in encoder.items())


SHARDED_SCRIPT = """
import json, sys
import jax
from jax.sharding import PartitionSpec as P
from bert_jax.finetuning import finetune
from configs import glue
from bert_jax.commands import run_settings

checkpoint, vocab, data, out = sys.argv[1:]
results = {}
for shape in ((8, 1, 1), (2, 2, 2)):
    c = glue.get_config("sst2")
    c.data.vocab_file = vocab
    c.update(dict(init_checkpoint=checkpoint, data_dir=data, max_seq_length=48,
                  global_batch_size=8, eval_batch_size=16, learning_rate=2e-3, num_epochs=1,
                  log_every_steps=1, mesh_shape=shape))
    settings = run_settings.finetune_settings(c)
    inputs = finetune.load_inputs(settings)
    state = finetune.Finetuning(settings, inputs, total_steps=10).engine.init_state(0, inputs.params)
    word = state.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
    results[str(shape)] = {"word_spec": [str(a) for a in word.sharding.spec],
                           "word_shards": len({d.id for d in word.sharding.device_set}),
                           "word_local": list(word.addressable_shards[0].data.shape)}
    workdir = f"{out}/{shape[0]}{shape[1]}{shape[2]}"
    best = run_settings.finetune(c, workdir)
    with open(f"{workdir}/metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    results[str(shape)]["losses"] = [r["loss"] for r in rows if "loss" in r]
    results[str(shape)]["accuracy"] = best.metrics["accuracy"]
    # Scored again on the mesh, with a training batch (12) that would not split over it.
    c.update(dict(init_checkpoint=f"{workdir}/best_model", global_batch_size=12))
    results[str(shape)]["evaluated"] = run_settings.evaluate(c, f"{workdir}/evaluated").metrics["accuracy"]
print("RESULT " + json.dumps(results))
"""


def test_sharded_finetuning_equals_one_device(tmp_path, tiny_checkpoint) -> None:
    """Same losses on 1 device and on 8 virtual devices (data 8, and 2x2x2 with FSDP and
    tensor parallelism); parameters sharded as the logical-axis rules say."""
    import os

    data = write_sst2(tmp_path / "glue")
    vocab = tokenization.default_vocab_file()
    c = _tiny(glue_config.get_config("sst2"), tiny_checkpoint, data_dir=str(data), max_seq_length=48,
              global_batch_size=8, eval_batch_size=16, learning_rate=2e-3, num_epochs=1)  # fmt: skip
    c.log_every_steps = 1
    best = run_settings.finetune(c, str(tmp_path / "one"))
    rows = [json.loads(x) for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    want = [r["loss"] for r in rows if "loss" in r]
    assert len(want) == 170 // 8

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", SHARDED_SCRIPT, tiny_checkpoint, vocab, str(data), str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = worker_results.parse(proc.stdout)
    for shape, res in got.items():
        assert res["losses"] == pytest.approx(want, rel=1e-5), shape
        assert res["accuracy"] == pytest.approx(best.metrics["accuracy"]), shape
        assert res["evaluated"] == pytest.approx(res["accuracy"]), shape  # `--evaluate` on the mesh
    # vocab -> tensor, embed -> fsdp: a [vocab, hidden] table split 2 x 2 on the 2x2x2 mesh.
    assert got["(2, 2, 2)"]["word_spec"] == ["tensor", "fsdp"]
    assert got["(2, 2, 2)"]["word_local"] == [30522 // 2, 32 // 2]
    assert got["(8, 1, 1)"]["word_local"] == [30522, 32]  # data parallel: replicated


def test_finetuning_starts_from_a_pretraining_workdir(tmp_path) -> None:
    """`pretrain` → `finetune --config.init_checkpoint=WORKDIR`: the workdir carries its
    vocabulary, and the encoder starts from the latest pre-training checkpoint."""
    import numpy as np

    from configs import pretrain as pretrain_config

    pre = pretrain_config.get_config("tiny")
    pre.num_train_steps, pre.checkpoint_every_steps, pre.eval_every_steps = 4, 4, 4
    pre.async_checkpointing, pre.baseline_batches = False, 4
    workdir = tmp_path / "pretrain"
    final = run_settings.pretrain(pre, str(workdir))
    # Dynamic 80/10/10 masking of real text: some masked tokens are shown unchanged.
    assert 0 < final.metrics["num_changed_predictions"] < final.metrics["num_predictions"]
    # Four steps leave the model near uniform; the unigram model of the text is far better.
    assert final.metrics["unigram_baseline_loss"] < final.metrics["mlm_loss_changed"] - 1.0 < np.log(30522)
    assert 0.0 < final.metrics["unigram_baseline_accuracy"] < 0.5
    assert (workdir / "vocab.txt").read_bytes() == Path(tokenization.default_vocab_file()).read_bytes()

    c = glue_config.get_config("sst2")
    data = str(write_sst2(tmp_path / "glue"))
    c.update(dict(init_checkpoint=str(workdir), data_dir=data, max_seq_length=48,
                  global_batch_size=8, num_epochs=1, max_train_examples=32, learning_rate=1e-3))  # fmt: skip
    inputs = finetune.load_inputs(run_settings.finetune_settings(c))
    loaded, _ = convert.load_checkpoint(str(workdir))
    for name in ("embeddings", "encoder"):
        a, b = convert.flatten(inputs.params["bert"][name]), convert.flatten(loaded["bert"][name])
        assert a.keys() <= b.keys() and all(np.array_equal(a[k], b[k]) for k in a), name
    run_settings.finetune(c, str(tmp_path / "ft"))
    results = json.loads((tmp_path / "ft" / "results.json").read_text())
    assert results["checkpoint"] == str(workdir) and results["train_rows"] == 32
