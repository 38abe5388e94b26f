"""The command's edge: a run config (`ConfigDict`, as users write them) becomes the job's
typed settings here, once, and the library below takes only those.

Every command and the Python API (`bert_jax.pretrain`, `bert_jax.finetune`) go through
these functions: `run_config.check` (the config is for this job; no removed name), then the
resolver (`bert_jax.training.resolver`: each key typed, range-checked beside its field,
an unknown key named). A pre-training config's ``model.vocab_size=0`` becomes the
tokenizer's size here (`model_vocab.planned_size`), on the typed settings, a folder as
``data.vocab_file`` the tokenizer file in it, and a ``data.do_lower_case`` left unset the
casing recorded beside its vocabulary. A ``data.vocab_file`` in a bucket (or the
vocabulary of an ``init_checkpoint`` there) is read from a local copy
(`tokenization.local_vocabulary`), the config as written keeping its URL; an
``init_checkpoint`` there stays its URL, its files copied where they are read
(`convert.local_copy`: its config here, its weights where the run loads them).
"""

from __future__ import annotations

import dataclasses

import ml_collections

from bert_jax.ablations.spec import AblationTable
from bert_jax.data import tokenization
from bert_jax.data.settings import DataSettings
from bert_jax.finetuning import evaluation
from bert_jax.finetuning import finetune as finetuning
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.model.config import BertConfig
from bert_jax.pretraining import init_checkpoint, model_vocab
from bert_jax.pretraining import pretrain as pretraining
from bert_jax.pretraining.settings import PretrainSettings, VocabSize
from bert_jax.storage import files
from bert_jax.training import resolver, run_config
from bert_jax.training.results import JobResult


def pretrain_settings(config: ml_collections.ConfigDict) -> PretrainSettings:
    """The settings of a pre-training config, ``model.vocab_size`` 0 as the tokenizer's
    size known without reading data (a run then checks it, `model_vocab.check_run_size`)."""
    run_config.check(config, "pretrain")
    data = resolver.resolve(DataSettings, config.data, "config.data")
    init = config.get("init_checkpoint", "")
    if init:  # its vocabulary unless the run names one; its model (below)
        data = init_checkpoint.data_for(init, data)
    # The vocabulary's file (a folder given stands for the tokenizer file in it) and its
    # casing (as recorded beside it where not given) decided once; the config as written
    # says them too, as the run used them (a resume compares it; one in a bucket, its URL).
    vocab_file, kind = tokenization.vocab_in_folder(data.vocab_file, data.tokenizer)
    shown = data.vocab_file if files.is_remote(data.vocab_file) else vocab_file
    data = dataclasses.replace(data, vocab_file=vocab_file, tokenizer=kind)
    data = dataclasses.replace(data, do_lower_case=data.lower_case)
    written = config.to_dict()
    written["data"].update(vocab_file=shown, tokenizer=kind, do_lower_case=data.do_lower_case)
    if init:
        written["model"] = init_checkpoint.model_for(init, config.model.to_dict())
    else:
        size = resolver.resolve(VocabSize, config.model, "config.model", partial=True).vocab_size
        written["model"]["vocab_size"] = model_vocab.planned_size(size, data)
    model = resolver.read(BertConfig, written["model"], "config.model")
    return resolver.resolve(PretrainSettings, config, model=model, data=data, config=written)


def finetune_settings(config: ml_collections.ConfigDict) -> FinetuneSettings:
    """The settings of a fine-tuning config, a folder given as ``data.vocab_file`` taken
    as the tokenizer file in it, as pre-training takes one (the config as written names
    the file, as the run used it)."""
    run_config.check(config, "finetune")
    settings = resolver.resolve(FinetuneSettings, config, config=config.to_dict())
    vocab_file, _ = tokenization.vocab_in_folder(settings.data.vocab_file)
    if vocab_file == settings.data.vocab_file:
        return settings
    if files.is_remote(settings.data.vocab_file):  # read from its copy; written, its URL
        return dataclasses.replace(settings, data=dataclasses.replace(settings.data, vocab_file=vocab_file))
    return resolver.updated(settings, {"data.vocab_file": vocab_file})


def pretrain(config: ml_collections.ConfigDict, workdir: str) -> JobResult:
    """`bert-jax pretrain`: trains (or resumes) the run of `config` in `workdir`."""
    return pretraining.train_and_evaluate(pretrain_settings(config), workdir)


def finetune(config: ml_collections.ConfigDict, workdir: str, *, overwrite: bool = False) -> JobResult:
    """`bert-jax finetune`: fine-tunes (or resumes, or reads back) the run of `config`."""
    return finetuning.finetune(finetune_settings(config), workdir, overwrite=overwrite)


def evaluate(config: ml_collections.ConfigDict, workdir: str, *, overwrite: bool = False) -> JobResult:
    """`bert-jax finetune --evaluate`: the scores of ``config.init_checkpoint``'s own head
    on the task's evaluation splits, nothing trained (`finetuning.evaluation`)."""
    return evaluation.evaluate_checkpoint(finetune_settings(config), workdir, overwrite=overwrite)


def ablation_table(config: ml_collections.ConfigDict) -> AblationTable:
    """`bert-jax ablate`'s table, its pre-training rows and fine-tuning columns resolved here."""
    return AblationTable.from_config(config, pretrain_settings, finetune_settings)
