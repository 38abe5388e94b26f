"""Pre-training continued from a checkpoint (``init_checkpoint``): the run starts from its
weights, model and vocabulary, heads it lacks fresh (one line each), scanned or not."""

import json
import shutil

import jax
import numpy as np
import pytest

from bert_jax import convert
from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from tests.conftest import tiny_pretraining

# A step this small leaves every weight where it started (AdamW moves each by ~the rate).
STILL = dict(
    num_train_steps=1, learning_rate=1e-12, weight_decay=0.0, eval_every_steps=0, checkpoint_every_steps=1
)


def _flat(path: str) -> dict[str, np.ndarray]:
    params, _ = convert.load_checkpoint(path, vocab_pad_multiple=1)
    return {"/".join(str(getattr(k, "key", k)) for k in p): np.asarray(v) for p, v in
            jax.tree_util.tree_flatten_with_path(params)[0]}  # fmt: skip


def _assert_same_weights(got: dict, want: dict, keys: list[str]) -> None:
    assert keys and all(k in got for k in keys), sorted(set(keys) - set(got))
    for k in keys:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("layer_loop", ["unroll", "scan"])
def test_a_run_starts_from_a_pre_training_checkpoint_its_heads_included(tmp_path, layer_loop) -> None:
    """A pre-training workdir of another model size (H 64) as the start of a run whose
    preset is H 128: the run's model is the checkpoint's, its encoder, masked-LM and
    next-sentence heads start where the checkpoint's are."""
    vocab = tokenization.default_vocab_file()
    first = tiny_pretraining(num_train_steps=2, eval_every_steps=0, **{"data.vocab_file": vocab})
    first.model.update(hidden_size=64, intermediate_size=128, num_attention_heads=2)
    run_settings.pretrain(first, str(tmp_path / "first"))
    named = {"data.vocab_file": vocab}  # a synthetic run keeps no vocabulary in its workdir
    then = tiny_pretraining(init_checkpoint=str(tmp_path / "first"), layer_loop=layer_loop, **STILL, **named)
    run_settings.pretrain(then, str(tmp_path / "then"))
    model = json.loads((tmp_path / "then" / "bert_config.json").read_text())
    assert model["hidden_size"] == 64 and model["scan_layers"] is (layer_loop == "scan")
    got, want = _flat(str(tmp_path / "then")), _flat(str(tmp_path / "first"))
    assert sorted(got) == sorted(want)
    _assert_same_weights(got, want, list(want))


def test_a_bare_encoder_gets_fresh_heads_and_a_learned_vocabulary_is_refused(
    tmp_path, tiny_checkpoint, capsys
) -> None:
    """A `transformers` BertModel folder (no pre-training heads) starts the run's encoder;
    the masked-LM and next-sentence heads start fresh, one warning line each; its
    vocabulary is the run's. A vocabulary to learn on the corpus is refused in one line."""
    folder = tmp_path / "hf"  # as a transformers folder is: the weights and the vocabulary
    shutil.copytree(tiny_checkpoint, folder)
    shutil.copy(tokenization.default_vocab_file(), folder / "vocab.txt")
    tiny_checkpoint = str(folder)
    c = tiny_pretraining(init_checkpoint=tiny_checkpoint, **STILL)
    settings = run_settings.pretrain_settings(c)
    assert settings.model == convert.checkpoint_config(tiny_checkpoint).replace(
        vocab_pad_multiple=settings.model.vocab_pad_multiple
    )
    assert settings.data.vocab_file == str(folder / "vocab.txt")
    capsys.readouterr()
    run_settings.pretrain(c, str(tmp_path / "run"))
    warnings = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: {tiny_checkpoint} has no masked-LM head: it starts freshly initialised",
        f"warning: {tiny_checkpoint} has no next-sentence head: it starts freshly initialised",
    ]
    got, want = _flat(str(tmp_path / "run")), _flat(tiny_checkpoint)
    _assert_same_weights(got, want, [k for k in want if k.startswith("bert/")])
    assert any(k.startswith("mlm/") for k in got) and any(k.startswith("nsp/") for k in got)
    learned = tiny_pretraining(init_checkpoint=tiny_checkpoint, **{"data.learned_vocab_size": 500})
    with pytest.raises(
        ValueError, match=r"keeps the checkpoint's vocabulary: unset config\.data\.learned_vocab_size"
    ):
        run_settings.pretrain_settings(learned)
