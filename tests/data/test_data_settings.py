"""`DataSettings`: the typed ``data`` block, and the cache keys built from it (prepared
folders, learned vocabularies) unchanged from the ones the raw config block gave, so a
user's prepared data and learned vocabularies stay valid; the casing taken from beside the
vocabulary where not given."""

import dataclasses
import os

import ml_collections
import pytest

from bert_jax.commands import run_settings
from bert_jax.data import corpus_inputs, prepare, prepared_cache, run_vocabulary, tokenization, vocab_learning
from bert_jax.data.settings import DataSettings
from bert_jax.training import resolver
from configs import defaults
from configs import pretrain as pretrain_config

# The corpus' identity (paths, sizes, times) is pinned so that the keys below depend only on
# the data settings, on any machine.
STAMP = [["wiki_excerpt.txt", "", 1, 123456, 1700000000.0]]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "##s", "word"]

# Computed by the code that read the raw ConfigDict, before `DataSettings`: these names must
# never change (users' cached vocabularies and prepared folders are found by them).
DEMO_VOCAB_NAME = "vocab-c6d6d8cf4c75b985.txt"
DEMO_PREPARED_NAME = "prepared-ff0c1e046f2b3323"
DEFAULT_VOCAB_PREPARED_NAME = "prepared-eac950b78f35d299"


class _Prepared(Exception):
    """Raised instead of preparing: carries the folder the cache would prepare into."""


@pytest.fixture
def pinned(monkeypatch, tmp_path):
    """Pins the corpus stamp, learns a fixed vocabulary at once and prepares nothing."""
    learned = []

    def learn(sentences, size, lower):
        learned.append(size)
        return VOCAB

    def stop(inputs, directory, opts, name="", hosts=None):
        raise _Prepared(directory)

    monkeypatch.setattr(corpus_inputs, "stamp", lambda inputs: STAMP)
    monkeypatch.setattr(vocab_learning, "build_wordpiece_vocab", learn)
    monkeypatch.setattr(prepare, "prepare", stop)
    return str(tmp_path), learned


def _prepared_name(data: DataSettings, max_seq_length: int, seed: int) -> str:
    with pytest.raises(_Prepared) as e:
        prepared_cache.prepared_dir(data, max_seq_length, seed)
    return os.path.basename(str(e.value))


@pytest.mark.parametrize("preset", ["demo", "demo-modernbert"])
def test_the_demo_keeps_its_vocabulary_and_prepared_folder_names(preset, pinned) -> None:
    cache, learned = pinned
    config = pretrain_config.get_config(preset)
    config.data.cache_dir = cache
    data = resolver.resolve(DataSettings, config.data, "config.data")
    assert os.path.basename(run_vocabulary.vocab_file_of(data)) == DEMO_VOCAB_NAME
    assert learned == [8192]
    assert _prepared_name(data, int(config.max_seq_length), int(config.seed)) == DEMO_PREPARED_NAME
    assert learned == [8192]  # learned once, then read from the cache


def test_the_default_vocabulary_keeps_its_prepared_folder_name(pinned) -> None:
    cache, learned = pinned
    config = pretrain_config.get_config("demo")
    config.data.cache_dir, config.data.learned_vocab_size = cache, 0
    assert (
        _prepared_name(resolver.resolve(DataSettings, config.data, "config.data"), 128, 42)
        == DEFAULT_VOCAB_PREPARED_NAME
    )
    assert learned == []
    # Any flag of the preparation moves the folder: the key reads the settings.
    other = dataclasses.replace(resolver.resolve(DataSettings, config.data, "config.data"), dupe_factor=3)
    assert _prepared_name(other, 128, 42) != DEFAULT_VOCAB_PREPARED_NAME


def test_the_resolver_types_every_key_of_the_data_block() -> None:
    block = defaults.data()
    assert resolver.resolve(DataSettings, block, "config.data") == DataSettings()  # the file's defaults
    assert {f.name for f in dataclasses.fields(DataSettings)} == set(block.keys())
    data = resolver.resolve(DataSettings, ml_collections.ConfigDict({**block.to_dict(), "eval_fraction": 0}))
    assert type(data.eval_fraction) is float and data.eval_fraction == 0.0  # an integer is a number
    for key, value, must in (("tfds_num_shards", 8.0, "an integer"), ("nsp", 0, "True or False")):
        loose = ml_collections.ConfigDict({**block.to_dict(), key: value})
        with pytest.raises(ValueError, match=rf"^config\.data\.{key}={value!r}: must be {must}$"):
            resolver.resolve(DataSettings, loose, "config.data")
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.source = "text"  # type: ignore[misc]


def test_a_block_missing_a_key_is_named_in_one_line() -> None:
    block = defaults.data()
    del block["cache_dir"]
    with pytest.raises(ValueError, match=r"^config\.data\.cache_dir is missing"):
        resolver.resolve(DataSettings, block, "config.data")


def test_pretraining_takes_the_casing_recorded_beside_its_vocabulary(tmp_path) -> None:
    cased = tmp_path / "cased"
    cased.mkdir()
    vocab = cased / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    (cased / tokenization.CASING_FILE).write_text('{"do_lower_case": false}')

    def settings(**data):
        config = pretrain_config.get_config("demo")
        config.data.update(data)
        return run_settings.pretrain_settings(config)

    ran = settings(vocab_file=str(vocab), learned_vocab_size=0)
    assert ran.data.do_lower_case is False and ran.config["data"]["do_lower_case"] is False
    assert run_vocabulary.tokenizer_of(ran.data).do_lower_case is False
    assert settings(vocab_file=str(vocab), learned_vocab_size=0, do_lower_case=True).data.lower_case
    (cased / tokenization.CASING_FILE).unlink()  # nothing recorded: lower-case
    assert settings(vocab_file=str(vocab), learned_vocab_size=0).data.do_lower_case is True
    assert settings().data.do_lower_case is True  # the demo's learned vocabulary

    # prepare-data and create-data decide it alike.
    (cased / tokenization.CASING_FILE).write_text('{"do_lower_case": false}')
    assert prepare.Options(vocab_file=str(vocab)).resolved().do_lower_case is False
    assert prepare.Options(vocab_file=str(vocab), do_lower_case=True).resolved().do_lower_case is True
    assert prepare.Options().resolved().do_lower_case is True


def test_a_vocabulary_folder_is_resolved_to_its_file_once(tmp_path) -> None:
    """Pre-training, `prepare-data` and `create-data` take a folder as the vocabulary: the
    run and its config as written name the file in it, so the prepared data and a resume
    are those of the file given directly."""
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    config = pretrain_config.get_config("demo")
    config.data.update(vocab_file=str(tmp_path), learned_vocab_size=0)
    ran = run_settings.pretrain_settings(config)
    assert ran.data.vocab_file == ran.config["data"]["vocab_file"] == str(vocab)
    assert ran.data.tokenizer == ran.config["data"]["tokenizer"] == "wordpiece"
    given = prepare.Options(vocab_file=str(vocab)).resolved()
    assert prepare.Options(vocab_file=str(tmp_path)).resolved() == given
