"""A run's saved steps by their paths: ``WORKDIR/best`` (the best evaluation's weights),
``WORKDIR/checkpoints`` (the latest) and ``WORKDIR/checkpoints/<step>`` load as
checkpoints wherever one is read (convert, fine-tuning, features, fill-mask), with the
workdir's config and vocabulary."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import bert_jax
from bert_jax import convert
from bert_jax.commands import checkpoint_text, run_settings
from bert_jax.data import tokenization
from bert_jax.pretraining import model_file
from bert_jax.training import checkpoints, run_config
from bert_jax.training.engine import TrainState
from configs import bbc as bbc_config
from tests.helpers import task_data


def _state(step: int, seed: int) -> TrainState:
    params = task_data.tiny_params(seed)
    return TrainState(
        jnp.asarray(step), params, optax.sgd(0.1).init(params), jax.random.key_data(jax.random.key(0))
    )


def _equal(a: dict, b: dict) -> bool:
    fa, fb = convert.flatten(a), convert.flatten(b)
    return fa.keys() == fb.keys() and all(np.array_equal(fa[k], fb[k]) for k in fa)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> str:
    """Steps 3 (seed 0's weights, the best evaluation) and 7 (seed 1's), the vocabulary beside."""
    folder = tmp_path_factory.mktemp("run")
    model_file.write(str(folder), task_data.TINY, scanned=False)
    ckpt = checkpoints.Checkpointer(str(folder), async_save=False)
    for step, seed, accuracy in ((3, 0, 0.5), (7, 1, 0.4)):
        ckpt.save(step, _state(step, seed))
        ckpt.maybe_save_best(step, _state(step, seed), {"mlm_accuracy": accuracy})
    ckpt.close()
    convert.write_tokenizer_files(str(folder), tokenization.default_vocab_file(), True, task_data.TINY)
    return str(folder)


@pytest.mark.parametrize(
    "where, seed", [("", 1), ("best", 0), ("checkpoints", 1), ("checkpoints/3", 0), ("checkpoints/7", 1)]
)
def test_each_saved_step_loads_by_its_path(workdir, where, seed, capsys) -> None:
    path = f"{workdir}/{where}" if where else workdir
    params, config = convert.load_checkpoint(path)
    assert config == task_data.TINY and _equal(params, task_data.tiny_params(seed))
    said = capsys.readouterr().out
    step = {0: 3, 1: 7}[seed]
    if where.startswith("checkpoints/"):
        assert f"{workdir}: the weights of step {step} ({where})" in said
    else:
        assert (
            f"{workdir}: the weights of its {'best' if where == 'best' else 'latest'} checkpoint, step {step}"
            in said
        )
    assert convert.checkpoint_config(path) == task_data.TINY
    assert tokenization.vocab_beside(path) == f"{workdir}/vocab.txt"  # the workdir's


def test_a_step_not_saved_is_one_line_naming_the_steps_there(workdir) -> None:
    with pytest.raises(
        FileNotFoundError, match=r"checkpoints/5 does not exist \(the steps saved there: 3, 7\)"
    ):
        checkpoint_text.local_checkpoint(f"{workdir}/checkpoints/5")
    with pytest.raises(ValueError, match=r"is not a checkpoint"):
        convert.load_checkpoint(f"{workdir}/nothing_here")


def test_the_best_step_exports_gives_features_and_fine_tunes(workdir, tmp_path) -> None:
    """`convert --src=WORKDIR/best` writes the best step's weights; features read it; a
    fine-tuning run starts from it (the results naming the path as given)."""
    params, config = convert.load_checkpoint(f"{workdir}/best")
    out = convert.save_checkpoint(str(tmp_path / "hf"), params, config, "hf")
    again, _ = convert.load_checkpoint(out)
    assert _equal({"bert": again["bert"]}, {"bert": task_data.tiny_params(0)["bert"]})
    batch = tokenization.load_tokenizer(tokenization.vocab_beside(f"{workdir}/best")).encode_pairs(
        ["a b"], None, 8
    )
    got = bert_jax.extract_features(params["bert"], config, batch, [-1])
    assert got.shape == (1, 8, config.hidden_size)
    c = run_config.set_keys(
        bbc_config.get_config(), {**task_data.TINY_BBC_RUN, "init_checkpoint": f"{workdir}/best"}
    )
    result = run_settings.finetune(c, str(tmp_path / "run"))
    assert result.step == 2 and not result.stopped
    assert (
        json.loads((tmp_path / "run" / "results.json").read_text())["config"]["init_checkpoint"]
        == f"{workdir}/best"
    )
