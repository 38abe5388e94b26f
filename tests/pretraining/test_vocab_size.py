"""The model's vocabulary size written once (`bert_jax.pretraining.model_vocab`):
``model.vocab_size=0`` takes the tokenizer's size in a run, ``data.learned_vocab_size``
where no data is read, and a workdir's ``bert_config.json`` always holds the real size."""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest

from bert_jax.ablations import cells, cost
from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.data.settings import DataSettings
from bert_jax.model.config import BertConfig
from bert_jax.pretraining import model_file, model_vocab, pretrain
from bert_jax.training import resolver, run_config, sharding
from configs import ablations as ablation_configs
from configs import pretrain as pretrain_config
from tests.conftest import ROOT, tiny_pretraining

SENTENCES = [
    "the cat sat on the mat and looked at the door .",
    "a small dog ran across the green field to the river .",
    "my grandmother baked fresh bread every sunday morning .",
    "children played football in the park after school .",
]


def _sizes(c) -> tuple:
    """`planned_size` / `run_size`'s arguments from a run config."""
    return int(c.model.vocab_size), resolver.resolve(DataSettings, c.data, "config.data")


def _learning(tmp_path, learned: int, vocab_size: int = 0):
    """The tiny model on a small text corpus that learns a `learned`-token vocabulary."""
    rng = np.random.default_rng(0)
    docs = ["\n".join(SENTENCES[i] for i in rng.permutation(len(SENTENCES))) for _ in range(30)]
    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join(docs) + "\n")
    c = pretrain_config.get_config("tiny")
    run_config.set_keys(
        c,
        {
            "data.source": "text",
            "data.input_files": str(text),
            "data.cache_dir": str(tmp_path / "cache"),
            "data.eval_fraction": 0.2,
            "data.dupe_factor": 1,
            "data.learned_vocab_size": learned,
            "model.vocab_size": vocab_size,
            "global_batch_size": 4,
            "max_seq_length": 32,
            "max_predictions_per_seq": 5,
            "num_train_steps": 2,
            "warmup_steps": 1,
            "eval_every_steps": 0,
            "eval_steps": 1,
            "checkpoint_every_steps": 2,
            "baseline_batches": 0,
            "async_checkpointing": False,
        },
    )
    return c


def _learned_files(tmp_path) -> list:
    return sorted((tmp_path / "cache").glob("**/vocab-*.txt"))


def test_the_demo_is_planned_at_its_learned_size_without_learning_it(tmp_path) -> None:
    demo = pretrain_config.get_config("demo")
    demo.data.cache_dir = str(tmp_path / "cache")
    planned = run_settings.pretrain_settings(demo)
    assert planned.model.vocab_size == 8192 and demo.model.vocab_size == 0  # the config as written
    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    run = pretrain.Pretraining(planned, mesh)
    assert run.model_config.vocab_size == run.model_config.padded_vocab_size == 8192
    assert run.run.model.vocab_size == 8192 and run.run.config["model"]["vocab_size"] == 8192
    assert _learned_files(tmp_path) == []  # nothing was learned to know it


def test_ablation_costs_count_the_learned_vocabulary() -> None:
    """A pre-training row of the demo scale costs its MLM decoder over 8,192 rows (0 rows
    would leave the decoder out of the count)."""
    table = ablation_configs.get_config("table5.demo")
    row = table.row_order[0]
    assert table.rows[row].model.vocab_size == 0
    written = table.rows[row].copy_and_resolve_references()
    written.model.vocab_size = 8192
    plan = cost.estimate(
        run_settings.ablation_table(table), "v5e:2x2", rows=[row], columns=[table.column_order[0]]
    )
    (entry,) = plan["pretraining"]
    assert entry["flops"] == pytest.approx(cells.pretraining_flops(run_settings.pretrain_settings(written)))


def test_zero_takes_the_tokenizers_size_and_a_smaller_one_is_refused(tmp_path) -> None:
    c = _learning(tmp_path, learned=300)
    assert model_vocab.planned_size(*_sizes(c)) == 300 and _learned_files(tmp_path) == []
    settings = run_settings.pretrain_settings(c)  # planned: nothing learned yet
    assert settings.model.vocab_size == 300 and c.model.vocab_size == 0 and _learned_files(tmp_path) == []
    pretrain.check_run(settings)  # learns it, once
    assert len(_learned_files(tmp_path)) == 1
    c.model.vocab_size = 512  # larger than the tokenizer: kept (the ids fit)
    assert model_vocab.run_size(*_sizes(c)) == 512
    assert run_settings.pretrain_settings(c).model.vocab_size == 512
    c.model.vocab_size = 200
    with pytest.raises(ValueError) as e:
        pretrain.check_run(run_settings.pretrain_settings(c))
    assert str(e.value) == (
        "the vocabulary has 300 tokens but config.model.vocab_size is 200: set "
        "--config.model.vocab_size=300 (or 0: the tokenizer's size)"
    )


def test_zero_reads_a_given_vocabulary_files_size(tmp_path) -> None:
    words = ["the", "cat", "sat", "on", "mat", "##s", "dog"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join([*tokenization.SPECIAL_TOKENS, *words]) + "\n")
    c = tiny_pretraining(**{"data.source": "text", "data.vocab_file": str(path), "model.vocab_size": 0})
    assert model_vocab.planned_size(*_sizes(c)) == model_vocab.run_size(*_sizes(c)) == 12


def test_a_table_far_larger_than_the_vocabulary_is_said_in_one_warning(tmp_path, capsys) -> None:
    """A preset's size beside a user's small vocabulary: the run goes on, and says which
    rows no token uses and the two ways out; a size that fits, or 0, says nothing."""
    words = ["the", "cat", "sat", "on", "mat", "##s", "dog"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join([*tokenization.SPECIAL_TOKENS, *words]) + "\n")
    c = tiny_pretraining(**{"data.source": "text", "data.vocab_file": str(path), "model.vocab_size": 64})
    assert model_vocab.check_run_size(*_sizes(c)) == (
        f"config.model.vocab_size=64 has 52 rows more than the 12 tokens of {path}: no token uses them; set "
        "--config.data.vocab_file to the vocabulary the size is for, or --config.model.vocab_size=0 to size "
        "the model to this one"
    )
    pretrain.check_run(run_settings.pretrain_settings(c))
    assert [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("warning:")] == [
        f"warning: {model_vocab.check_run_size(*_sizes(c))}"
    ]
    for fits in (13, 0):  # one spare row is within the share; 0 is the vocabulary's own size
        c.model.vocab_size = fits
        assert model_vocab.check_run_size(*_sizes(c)) is None


def test_zero_without_a_tokenizer_is_refused_in_one_line(tmp_path) -> None:
    c = tiny_pretraining(**{"model.vocab_size": 0})
    for read in (model_vocab.planned_size, model_vocab.run_size):
        with pytest.raises(ValueError, match=r"^config\.model\.vocab_size=0 .* data\.source=synthetic"):
            read(*_sizes(c))
    with pytest.raises(ValueError, match=r"vocab_size=0"):
        model_file.write(str(tmp_path), BertConfig(vocab_size=0))
    assert not (tmp_path / model_file.NAME).exists()
    cmd = [sys.executable, "-m", "bert_jax", "pretrain", "--config=configs/pretrain.py:tiny",
           "--config.data.source=synthetic", "--config.model.vocab_size=0",
           f"--workdir={tmp_path / 'run'}"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    errors = [ln for ln in proc.stderr.splitlines() if "vocab_size" in ln]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr[-2000:]
    assert "set --config.model.vocab_size=N" in errors[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / model_file.NAME).exists()


def test_a_run_saves_and_resumes_at_the_tokenizers_size(tmp_path) -> None:
    c = _learning(tmp_path, learned=300)
    workdir = tmp_path / "run"
    run_settings.pretrain(c, str(workdir))
    saved = json.loads((workdir / model_file.NAME).read_text())
    assert (saved["vocab_size"], saved["vocab_pad_multiple"]) == (300, 128)  # 384 rows
    assert c.model.vocab_size == 0  # the caller's config is left as it was
    assert len(tokenization.load_vocab(str(workdir / "vocab.txt"))) == 300
    c.num_train_steps = 4
    run_settings.pretrain(c, str(workdir))  # resumes: the same size, the same model
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == ["2", "4"]
