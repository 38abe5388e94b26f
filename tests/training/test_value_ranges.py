"""Every setting checked against its range (declared beside its field) when the command's
edge resolves the config, in one line naming key and value; and read once per job."""

import re
import subprocess
import sys

import ml_collections
import pytest

from bert_jax.commands import run_settings
from bert_jax.training import run_config
from configs import finetune as finetune_config
from configs import pretrain as pretrain_config
from tests.conftest import ROOT

PRETRAIN_BAD = [
    ("global_batch_size", 0, "config.global_batch_size=0: must be a positive integer"),
    ("num_train_steps", -5, "config.num_train_steps=-5: must be a positive integer"),
    ("learning_rate", 0.0, "config.learning_rate=0.0: must be a positive number"),
    ("learning_rate", float("nan"), "config.learning_rate=nan: must be a positive number"),
    ("grad_accum_steps", 0, "config.grad_accum_steps=0: must be a positive integer"),
    ("grad_accum_steps", 3, "config.global_batch_size=8 does not split into config.grad_accum_steps=3"),
    ("log_every_steps", 0, "config.log_every_steps=0: must be a positive integer"),
    ("eval_steps", -1, "config.eval_steps=-1: must be an integer >= 0"),
    ("phase2_fraction", 1.0, "config.phase2_fraction=1.0: must be a number in [0, 1)"),
    ("max_seq_length", 4096, "config.max_seq_length=4096 is longer than the position table"),
    ("data.masked_lm_prob", 1.5, "config.data.masked_lm_prob=1.5: must be a number in (0, 1]"),
    ("data.masked_lm_prob", 0.0, "config.data.masked_lm_prob=0.0: must be a number in (0, 1]"),
    (
        "data.random_token_prob",
        0.5,
        "config.data.mask_token_prob=0.8 + config.data.random_token_prob=0.5 exceed 1",
    ),
    ("model.hidden_dropout_prob", 1.0, "config.model.hidden_dropout_prob=1.0: must be a number in [0, 1)"),
    ("compute_dtype", "fp8", "config.compute_dtype='fp8': must be one of float32, bfloat16, float16"),
    ("dropout_rng", "philox", "config.dropout_rng='philox': must be one of hash, hash16, threefry"),
    ("remat_policy", "some", "config.remat_policy='some': must be one of none, full, dots"),
]


def _set(config, dotted, value):
    *parents, leaf = dotted.split(".")
    node = config
    for p in parents:
        node = node[p]
    node[leaf] = value


@pytest.mark.parametrize(("key", "value", "message"), PRETRAIN_BAD)
def test_pretraining_values_out_of_range_are_refused(key, value, message) -> None:
    c = pretrain_config.get_config("tiny")
    _set(c, key, value)
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        run_settings.pretrain_settings(c)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("num_epochs", -1, "config.num_epochs=-1: must be a positive integer"),
        ("global_batch_size", 0, "config.global_batch_size=0: must be a positive integer"),
        ("model.hidden_dropout_prob", 1.5, "config.model.hidden_dropout_prob=1.5: must be a number in [0,"),
        ("model.vocab_pad_multiple", -8, "config.model.vocab_pad_multiple=-8: must be an integer >= 0"),
        ("warmup_proportion", 2.0, "config.warmup_proportion=2.0: must be a number in [0, 1]"),
        ("weight_grad_matmul", "copy", "config.weight_grad_matmul='copy': must be one of auto,"),
    ],
)
def test_finetuning_values_out_of_range_are_refused(key, value, message) -> None:
    c = finetune_config.get_config("bbc")
    _set(c, key, value)
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        run_settings.finetune_settings(c)


def test_every_preset_is_in_range() -> None:
    for preset in ("tiny", "demo", "mini", "base", "large", "cramming", "mosaicbert", "modernbert"):
        run_settings.pretrain_settings(pretrain_config.get_config(preset))
    run_settings.finetune_settings(finetune_config.get_config("bbc"))


def test_a_config_for_the_other_job_is_named_as_such(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"is a fine-tuning config .*run `bert-jax finetune`"):
        run_config.check(finetune_config.get_config("bbc"), "pretrain")
    with pytest.raises(ValueError, match=r"is a pre-training config .*run `bert-jax pretrain`"):
        run_config.check(pretrain_config.get_config("tiny"), "finetune")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bert_jax",
            "pretrain",
            "--config=configs/bbc.py",
            f"--workdir={tmp_path / 'w'}",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert "is a fine-tuning config" in line and not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    ("old", "value", "new"),
    [
        ("batch_size", 16, "global_batch_size"),
        ("dropout", 0.2, "model.hidden_dropout_prob and --config.model.attention_probs_dropout_prob"),
        ("vocab_file", "v.txt", "data.vocab_file"),
        ("do_lower_case", False, "data.do_lower_case"),
        ("vocab_pad_multiple", 128, "model.vocab_pad_multiple"),
    ],
)
def test_fine_tuning_takes_pre_trainings_names_and_refuses_the_old_ones(old, value, new) -> None:
    """One name per setting: a config file that still sets the old name is refused naming
    the new one, and so is an override (`--finetune_set`, `set_keys`)."""
    c = finetune_config.get_config("bbc")
    c[old] = value  # a user's own config file written for the old names
    message = f"^config.{old} was removed: set --config.{re.escape(new)} instead$"
    with pytest.raises(ValueError, match=message):
        run_config.check(c, "finetune")
    with pytest.raises(KeyError, match=f"it is now {re.escape(repr(new))}"):
        run_config.set_keys(finetune_config.get_config("bbc"), {old: value})
    # The new names are the pre-training job's.
    pre = pretrain_config.get_config("tiny")
    for key in new.split(" and --config."):
        *parents, leaf = key.split(".")
        assert leaf in (pre[parents[0]] if parents else pre), key
        assert leaf in (c[parents[0]] if parents else c), key


def test_an_old_fine_tuning_flag_is_one_line_naming_the_new_one(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "finetune", "--config=configs/bbc.py", "--config.batch_size=8",
         f"--workdir={tmp_path / 'w'}"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert "'batch_size' (from --config.batch_size=8) was removed: set --config.global_batch_size" in line
    assert not (tmp_path / "w").exists()


def test_every_fine_tuning_config_resolves_to_typed_settings() -> None:
    """Every task file's config passes the checks and becomes the typed record the library
    reads (QA settings exactly for the QA tasks; the eval batch resolved, never 0)."""
    from configs import downstream, glue

    tasks = [*glue.TASKS, "bbc", "squad1.1", "squad2.0", "conll2003", "swag", *downstream.TASKS]
    for task in tasks:
        settings = run_settings.finetune_settings(finetune_config.get_config(task))
        assert settings.task == task and settings.eval_batch >= 1, task
        qa = task.startswith("squad") or task in downstream.QA
        assert (settings.qa is not None) == qa, task


def test_an_unknown_or_mistyped_key_is_one_line_naming_it() -> None:
    """What a Python API user's config (not locked as the command line's) can hold."""
    c = pretrain_config.get_config("tiny")
    with c.unlocked():
        c.learning_rat = 1e-3
    with pytest.raises(
        ValueError,
        match=r"^config.learning_rat is not a setting of this job \(did you mean 'learning_rate'\?\)$",
    ):
        run_settings.pretrain_settings(c)
    c = pretrain_config.get_config("tiny")
    with c.unlocked():
        c.zzz = 1  # like no key: the first known keys, not the record's own `config`
    with pytest.raises(ValueError, match=r"^config.zzz is not a setting of this job \(known: adam_b1, ") as e:
        run_settings.pretrain_settings(c)
    assert "config," not in str(e.value)
    written = pretrain_config.get_config("tiny").to_dict()  # a config built from a user's dict
    written["data"]["nsp"] = "yes"
    with pytest.raises(ValueError, match=r"^config.data.nsp='yes': must be True or False$"):
        run_settings.pretrain_settings(ml_collections.ConfigDict(written))
    written = finetune_config.get_config("bbc").to_dict()
    written["num_epochs"] = 2.5
    with pytest.raises(ValueError, match=r"^config.num_epochs=2.5: must be an integer$"):
        run_settings.finetune_settings(ml_collections.ConfigDict(written))


def test_each_job_resolves_and_checks_once(tmp_path, monkeypatch) -> None:
    """A whole pre-training run (tiny, synthetic) reads its config once: one check of the
    job and removed names, one typed record per block; the library below reads none."""
    from bert_jax.training import resolver

    calls: list[str] = []
    check, resolve = run_config.check, resolver.resolve
    monkeypatch.setattr(run_config, "check", lambda *a, **k: calls.append("check") or check(*a, **k))
    monkeypatch.setattr(
        resolver, "resolve", lambda cls, *a, **k: calls.append(cls.__name__) or resolve(cls, *a, **k)
    )
    c = pretrain_config.get_config("tiny")
    c.data.source, c.num_train_steps, c.eval_every_steps = "synthetic", 2, 0
    result = run_settings.pretrain(c, str(tmp_path / "run"))
    assert result.step == 2
    assert calls == ["check", "DataSettings", "VocabSize", "PretrainSettings"]
