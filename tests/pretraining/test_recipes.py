"""Pre-training recipes (`configs/pretrain.py`): each one learns, each refuses what cannot
work, and the switches a recipe turns on reach the model, the data and the schedule."""

import json

import numpy as np
import pytest

from bert_jax.commands import run_settings
from bert_jax.data import pretraining_examples
from bert_jax.data.settings import DataSettings
from bert_jax.data.tokenization import SpecialIds
from bert_jax.pretraining import model_vocab, pretrain
from bert_jax.training import optimizer, resolver, run_config
from configs import pretrain as pretrain_config

# A few sentences, repeated: a model that uses the context predicts their hidden words far
# better than the words' frequencies do.
SENTENCES = [
    "the cat sat on the mat and looked at the door .",
    "a small dog ran across the green field to the river .",
    "my grandmother baked fresh bread every sunday morning .",
    "the old train left the station before the sun came up .",
    "children played football in the park after school .",
    "she wrote a long letter to her brother in canada .",
]


def _corpus(tmp_path) -> str:
    rng = np.random.default_rng(0)
    docs = ["\n".join(SENTENCES[i] for i in rng.permutation(len(SENTENCES))) for _ in range(60)]
    path = tmp_path / "repeated.txt"
    path.write_text("\n\n".join(docs) + "\n")
    return str(path)


def _learning_config(recipe: str, text: str, cache: str):
    c = pretrain_config.get_config(f"tiny+{recipe}")
    run_config.set_keys(
        c,
        {
            "data.source": "text",
            "data.input_files": text,
            "data.cache_dir": cache,
            "data.eval_fraction": 0.2,
            "data.dupe_factor": 2,
            # The corpus's own vocabulary (its words whole): steps ~4x faster than with
            # bert-base-uncased's 30,522 rows, and the same question asked.
            "data.learned_vocab_size": 256,
            "model.vocab_size": 0,
            "global_batch_size": 16,
            "max_seq_length": 32,
            "num_train_steps": 300,
            "warmup_steps": 30,
            "learning_rate": 2e-3,
            "eval_every_steps": 0,
            "checkpoint_every_steps": 1000,
            "log_every_steps": 100,
            "baseline_batches": 20,
            "async_checkpointing": False,
        },
    )
    c.max_predictions_per_seq = max(8, round(30 * c.data.masked_lm_prob) + 1)
    return c


# MosaicBERT's ALiBi (no position embedding) takes longer to place words in these short
# sentences: with the corpus's own 256-WordPiece vocabulary, held-out loss on the changed
# tokens at 300 steps was 2.05 (bert), 1.45 (cramming), 0.16 (modernbert) and 2.70
# (mosaicbert; unigram 3.57), at 600 steps mosaicbert 1.99 (measured 2026-11-27).
LEARNING_STEPS = {"mosaicbert": 600}


@pytest.mark.parametrize("recipe", sorted(pretrain_config.RECIPES))
def test_each_recipe_learns_well_past_the_unigram_model(tmp_path, recipe) -> None:
    config = _learning_config(recipe, _corpus(tmp_path), str(tmp_path / "cache"))
    config.num_train_steps = LEARNING_STEPS.get(recipe, config.num_train_steps)
    final = run_settings.pretrain(config, str(tmp_path / "run"))
    # The held-out loss on the tokens the model cannot copy, against always predicting the
    # training frequencies (the unigram model, smoothed in its favour).
    assert final.metrics["mlm_loss_changed"] < final.metrics["unigram_baseline_loss"] - 1.0, final
    assert final.metrics["mlm_accuracy_changed"] > final.metrics["unigram_baseline_accuracy"] + 0.05, final


def test_recipes_set_their_switches_and_sizes_keep_theirs() -> None:
    paper = pretrain_config.get_config("demo+bert")
    assert not paper.model.pre_layer_norm and paper.data.nsp and paper.lr_schedule == "linear"
    assert paper.model.vocab_size == 30522 and paper.data.learned_vocab_size == 0
    demo = pretrain_config.get_config("demo")
    assert (demo.global_batch_size, demo.max_seq_length) == (paper.global_batch_size, paper.max_seq_length)
    assert demo.data.full_sentences and not demo.data.nsp
    # The learned vocabulary's size is written once; the model takes the tokenizer's size.
    assert demo.data.learned_vocab_size == 8192 and demo.model.vocab_size == 0
    assert (
        model_vocab.planned_size(0, resolver.resolve(DataSettings, demo.data, "config.data"))
        == 8192
        == run_settings.pretrain_settings(demo).model.padded_vocab_size
    )
    for name in ("cramming", "mosaicbert", "modernbert"):
        c = pretrain_config.get_config(name)
        assert c.model.hidden_size == 768 and c.data.full_sentences, name
        wanted = round((c.max_seq_length - 2) * c.data.masked_lm_prob)
        assert c.max_predictions_per_seq >= wanted, name  # the masking rate is not capped
        pretrain.check_run(run_settings.pretrain_settings(c))  # a recipe's own settings pass its checks
    get = pretrain_config.get_config
    positions = {r: get(f"base+{r}").model.position_embedding_type for r in pretrain_config.RECIPES}
    assert positions == dict(bert="absolute", cramming="sinusoidal", mosaicbert="alibi", modernbert="rotary")
    with pytest.raises(ValueError, match="unknown recipe 'nope'"):
        pretrain_config.get_config("demo+nope")


def _synthetic(recipe: str = "bert", **changes):
    c = pretrain_config.get_config(f"tiny+{recipe}")
    c.data.source = "synthetic"
    for k, v in changes.items():
        run_config.set_keys(c, {k: v})
    return c


def test_contradictory_switches_are_refused_naming_the_keys(capsys) -> None:
    with pytest.raises(ValueError, match=r"data\.full_sentences=True .* --config\.data\.nsp=False"):
        pretrain.check_run(run_settings.pretrain_settings(_synthetic(**{"data.full_sentences": True})))
    pretrain.check_run(run_settings.pretrain_settings(_synthetic(**{"data.masked_lm_prob": 0.4})))
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("warning: config.data.masked_lm_prob=0.4 masks up to 25 of 64 tokens")
    assert "set --config.max_predictions_per_seq=25" in line
    pretrain.check_run(
        run_settings.pretrain_settings(_synthetic("modernbert"))
    )  # a recipe's own settings pass
    assert not capsys.readouterr().out


def test_a_checkpoint_with_learned_positions_refuses_a_rotary_run(tmp_path) -> None:
    from bert_jax.training import checkpoints

    c = _synthetic(num_train_steps=2, eval_every_steps=0, global_batch_size=4, max_seq_length=32)
    c.max_predictions_per_seq = 5
    run_settings.pretrain(c, str(tmp_path))
    c.model.position_embedding_type = "rotary"
    c.num_train_steps = 4
    with pytest.raises(
        checkpoints.CheckpointMismatchError, match="position_embedding_type: checkpoint absolute"
    ):
        run_settings.pretrain(c, str(tmp_path))


def test_full_sentence_rows_stream_documents_without_padding() -> None:
    special = SpecialIds(pad=0, unk=1, cls=2, sep=3, mask=4)
    docs = [[[10 + d * 100 + s * 10 + t for t in range(s + 3)] for s in range(4)] for d in range(5)]
    rows = pretraining_examples.create_full_sentence_instances(docs, 16, np.random.default_rng(0), special)
    assert all(r.tokens[0] == 2 and r.tokens[-1] == 3 and not r.is_random_next for r in rows)
    assert sum(len(r.tokens) == 16 for r in rows) == len(rows) - 1  # only the last row is short
    inner = [t for r in rows for t in r.tokens[1:-1].tolist()]
    assert inner.count(3) == len(docs) - 1  # a [SEP] between documents
    assert sorted(t for t in inner if t != 3) == sorted(t for d in docs for s in d for t in s)
    again = pretraining_examples.create_full_sentence_instances(docs, 16, np.random.default_rng(0), special)
    assert [r.tokens.tolist() for r in again] == [r.tokens.tolist() for r in rows]


def test_prepared_flags_of_the_paper_recipe_are_unchanged() -> None:
    """Folders (and cache keys) prepared before FULL-SENTENCES existed stay valid."""
    from bert_jax.data import prepare

    flags = prepare.Options().flags()
    assert "full_sentences" not in flags
    assert prepare.Options(nsp=False, full_sentences=True).flags()["full_sentences"] is True
    with pytest.raises(ValueError, match="nsp=False"):
        prepare.Options(full_sentences=True)
    json.dumps(flags)


@pytest.mark.parametrize("kind", optimizer.SCHEDULES)
def test_schedules_warm_up_peak_and_end_at_zero(kind) -> None:
    s = optimizer.learning_rate_schedule(1.0, warmup_steps=10, total_steps=100, kind=kind)
    values = np.array([float(s(i)) for i in range(101)])
    assert values[0] < 0.01 and abs(values[10] - 1.0) < 1e-6 and values[100] < 1e-3
    assert values.max() <= 1.0 + 1e-6 and np.all(np.diff(values[:11]) > 0)
    if kind == "wsd":  # the peak held until the last 20%, then a linear fall
        assert np.allclose(values[10:81], 1.0) and abs(values[90] - 0.5) < 1e-6
    if kind == "one_cycle":
        assert np.all(np.diff(values[10:]) <= 1e-9) and 0.4 < values[55] < 0.6
    with pytest.raises(ValueError, match="lr_schedule='cosine'"):
        optimizer.learning_rate_schedule(1.0, 10, 100, kind="cosine")


def test_a_modern_checkpoint_fine_tunes_gives_features_and_refuses_hf_export(tmp_path) -> None:
    """Pre-LN + GeGLU + rotary + no biases, on a vocabulary learned from the text: the
    workdir fine-tunes and gives features as any checkpoint, exports to bert_jax's format,
    and is refused by the Hugging Face and TF exports in one line naming the switches."""
    import subprocess
    import sys

    from bert_jax import convert
    from bert_jax.data import tokenization
    from bert_jax.model import features
    from configs import glue as glue_config
    from tests.conftest import ROOT
    from tests.helpers.task_data import write_sst2

    pre = _learning_config("modernbert", _corpus(tmp_path), str(tmp_path / "cache"))
    pre.data.learned_vocab_size, pre.model.vocab_size = 600, 0  # 0: the tokenizer's size
    pre.num_train_steps, pre.baseline_batches = 4, 0
    workdir = tmp_path / "pretrain"
    run_settings.pretrain(pre, str(workdir))
    vocab = tokenization.load_vocab(str(workdir / "vocab.txt"))
    assert len(vocab) == 600 and "the" in vocab  # the learned vocabulary travels with it
    assert json.loads((workdir / "bert_config.json").read_text())["vocab_size"] == 600

    params, config = convert.load_checkpoint(str(workdir))
    assert config.switches_on() == [
        "pre_layer_norm=True",
        "gated_ffn=True",
        "position_embedding_type=rotary",
        "use_bias=False",
    ]
    tok = tokenization.load_tokenizer(str(workdir / "vocab.txt"))
    batch = tok.encode_pairs(["the cat sat on the mat ."], None, 16)
    feats = features.extract(params["bert"], config, batch, [-1, -2])
    assert feats.shape == (1, 16, 2 * config.hidden_size) and np.isfinite(feats).all()

    c = glue_config.get_config("sst2")
    data = str(write_sst2(tmp_path / "glue"))
    c.update(dict(init_checkpoint=str(workdir), data_dir=data, max_seq_length=32,
                  global_batch_size=8, num_epochs=1, max_train_examples=16,
                  max_eval_examples=16))  # fmt: skip
    run_settings.finetune(c, str(tmp_path / "ft"))
    assert json.loads((tmp_path / "ft" / "results.json").read_text())["checkpoint"] == str(workdir)

    for fmt in ("hf", "tf"):
        proc = subprocess.run(
            [sys.executable, "-m", "bert_jax", "convert", f"--src={workdir}", f"--dst={tmp_path / fmt}",
             f"--dst_format={fmt}"],
            capture_output=True, text=True, cwd=ROOT, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 1, proc.stderr[-2000:]
        (line,) = [ln for ln in proc.stderr.splitlines() if "cannot represent" in ln]
        assert "pre_layer_norm=True, gated_ffn=True, position_embedding_type=rotary, use_bias=False" in line
        assert "--dst_format=bert_jax" in line and not (tmp_path / fmt).exists()
    convert.save_checkpoint(str(tmp_path / "exported"), params, config, "bert_jax")
    again, config_again = convert.load_checkpoint(str(tmp_path / "exported"))
    assert config_again == config
    flat, flat_again = convert.flatten(params), convert.flatten(again)
    assert flat.keys() == flat_again.keys() and all(np.array_equal(flat[k], flat_again[k]) for k in flat)
