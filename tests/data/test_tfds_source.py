"""A TFDS corpus from a data folder of the user's: built once before the workers read it,
read from the folder by processes that do not know its builder (as TFDS's prepared
copies are), and one line for a dataset that is not there or that several hosts would
each build."""

import dataclasses
import os
import subprocess
import sys

import pytest

from bert_jax.data import corpora, prepare, prepared_cache, records, run_vocabulary
from bert_jax.data.settings import DataSettings
from tests.conftest import ROOT

tfds = pytest.importorskip("tensorflow_datasets")

ARTICLES = [
    f"Article {i} opens here. It has a second sentence about topic {i}.\n"
    f"A new paragraph of article {i} follows. It ends the article {i} text."
    for i in range(12)
]


class BertJaxTinyArticles(tfds.core.GeneratorBasedBuilder):
    """Twelve short articles as TFDS's Wikipedia gives them (a `text` feature, paragraphs
    separated by newlines)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self, features=tfds.features.FeaturesDict({"text": tfds.features.Text()})
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        for i, text in enumerate(ARTICLES):
            yield i, {"text": text}


NAME = "bert_jax_tiny_articles"
OPTS = prepare.Options(max_seq_length=32, dupe_factor=1, random_seed=1, eval_fraction=0.0)


def test_a_tfds_corpus_is_built_once_then_read_from_its_folder(tmp_path, capsys) -> None:
    data_dir = tmp_path / "tfds"
    inputs = prepare.list_inputs(tfds_name=NAME, tfds_num_shards=2, tfds_data_dir=str(data_dir))
    # Two worker processes (spawned: they do not know the builder): the parent builds it once.
    meta = prepare.prepare(inputs, str(tmp_path / "prepared"), OPTS, num_workers=2, progress=False)
    assert capsys.readouterr().out.count(f"building TFDS dataset {NAME} once") == 1
    assert meta["counts"]["documents"] == len(ARTICLES)
    assert meta["shards"][0]["input"] == f"tfds:{NAME}[train 1/2]"
    docs = corpora.load_documents("tfds", tfds_name=NAME, tfds_data_dir=str(data_dir))
    expected = [[s for p in a.split("\n") for s in corpora.split_sentences(p)] for a in ARTICLES]
    assert sorted(docs) == sorted(expected) and len(expected[0]) == 4
    # The command, in a process that knows only the folder; nothing is built again.
    env = dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3")
    out = tmp_path / "cli"
    args = [sys.executable, "-m", "bert_jax", "prepare-data", f"--tfds_name={NAME}", "--tfds_num_shards=2",
            f"--output_dir={out}", "--max_seq_length=32", "--dupe_factor=1", "--random_seed=1",
            "--eval_fraction=0"]  # fmt: skip
    proc = subprocess.run(
        [*args, f"--tfds_data_dir={data_dir}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "building TFDS" not in proc.stdout and records.read_metadata(str(out))["counts"] == meta["counts"]
    # Without the folder TFDS knows no such dataset: one line naming it, nothing written.
    proc = subprocess.run(
        [*args[:-5], f"--output_dir={tmp_path / 'none'}", "--max_seq_length=32"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    known = "not a name TFDS knows, nor prepared in TFDS's data folder"
    assert f"prepare-data: error: TFDS dataset '{NAME}' not found: {known}" in errors[-1]
    assert not (tmp_path / "none").exists()


def test_a_tfds_corpus_not_prepared_is_refused_where_several_hosts_would_build_it(tmp_path) -> None:
    empty = tmp_path / "empty"
    inputs = prepare.list_inputs(tfds_name=NAME, tfds_num_shards=2, tfds_data_dir=str(empty))
    with pytest.raises(
        ValueError, match=r"is not prepared in .*empty, and several hosts would each build it"
    ):
        prepare.prepare(inputs, str(tmp_path / "out"), OPTS, task_index=0, num_tasks=2, progress=False)
    assert not (empty / NAME).exists() and not (tmp_path / "out").exists()
    # Pre-training on two hosts from the same folder: each host's cache is refused alike.
    c = DataSettings(
        source="tfds", tfds_name=NAME, tfds_data_dir=str(empty), cache_dir=str(tmp_path / "cache")
    )
    with pytest.raises(ValueError, match="several hosts would each build it"):
        prepared_cache.open_prepared(c, "train", 32, 0, hosts=2)
    assert not (empty / NAME).exists() and not list((tmp_path / "cache").glob("prepared-*"))
    # A vocabulary learned on it alike (`pretrain.check_run` passes its host count).
    learned = dataclasses.replace(c, learned_vocab_size=200)
    with pytest.raises(ValueError, match="several hosts would each build it"):
        run_vocabulary.vocab_file_of(learned, hosts=2)
    assert not (empty / NAME).exists() and not list((tmp_path / "cache").glob("vocab-*"))
