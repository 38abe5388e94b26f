"""The feature-based approach of Table 7 (§5.3): a BiLSTM trained on frozen BERT features.

The pre-trained encoder is not trained: each batch's hidden states of the chosen layers
(``0`` the embeddings, ``-1`` the last layer, ``all`` every Transformer layer; counted as
in `bert_jax.model.features`) are computed under `jax.lax.stop_gradient` and fed to
`bilstm.FeatureBiLSTM` (a two-layer BiLSTM and a classifier), which alone is trained
(Adam), through the loop every job runs (`feature_training.py`: checkpoints, exact resume,
``stop_after_step``, SIGTERM save, the progress line). The task decides what is predicted
and how it is scored, as in fine-tuning:
CoNLL-2003 NER (the paper's) tags each word's first WordPiece and scores entity F1;
a sentence(-pair) classification task (e.g. BBC News topics, the offline stand-in)
classifies the BiLSTM's sentence vector (`bilstm.sentence_vector`) and scores its own
metric; a span-extraction task (SQuAD and the offline QA sets) gets a start and an end
logit per token from the BiLSTM and is scored by the official script, as fine-tuning's
span head is. As in fine-tuning, dev is scored every epoch and the task's other eval
splits (the offline suite's test split, keys ``test/...``) at each epoch that is the best
so far on dev. ``results.json`` has the fine-tuning job's shape (``main_metric``,
``best``, ``epochs``); a run whose ``results.json`` exists is not repeated by the
ablation runner, and its checkpoints are removed once it is written.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from typing import Any

import flax.linen as nn
import jax

from bert_jax import convert
from bert_jax.data import tokenization
from bert_jax.finetuning.batches import shape_words
from bert_jax.finetuning.feature_training import FeatureEpochEnd, FeatureTraining, FrozenFeatures
from bert_jax.finetuning.outputs import EpochHistory
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.model import features, param_shapes
from bert_jax.model.bilstm import FeatureBiLSTM
from bert_jax.model.encoder import BertModel
from bert_jax.setting_fields import POSITIVE, POSITIVE_INT, setting
from bert_jax.storage import atomic_files
from bert_jax.tasks import classification, ner, squad
from bert_jax.tasks.base import Task
from bert_jax.tasks.registry import get_task
from bert_jax.training.hooks import default_hooks
from bert_jax.training.loop import StopRequested, TrainingRun
from bert_jax.training.results import JobResult


def supports(task_name: str) -> bool:
    """Whether the feature-based approach serves the task: NER, sentence(-pair)
    classification and regression, or span extraction (not multiple choice)."""
    task = get_task(task_name)
    return isinstance(task, ner.NerTask | classification.ClassificationTask | squad.SquadTask)


@dataclasses.dataclass(frozen=True)
class FeatureBiLSTMSettings:
    """The BiLSTM on frozen features and how it trains (the paper's §5.3: two layers of 768
    per direction on BERT-Base's states; an ablation table's ``feature_bilstm`` block)."""

    lstm_size: int = setting(768, POSITIVE_INT)
    lstm_layers: int = setting(2, POSITIVE_INT)
    learning_rate: float = setting(1e-3, POSITIVE)
    num_epochs: int = setting(3, POSITIVE_INT)
    global_batch_size: int = setting(32, POSITIVE_INT)


def _model(task: Task, settings: FeatureBiLSTMSettings, combine: str) -> FeatureBiLSTM:
    size, layers = settings.lstm_size, settings.lstm_layers
    if isinstance(task, ner.NerTask):
        return FeatureBiLSTM(len(task.label_names), size, layers, combine)
    if isinstance(task, classification.ClassificationTask):
        return FeatureBiLSTM(task.spec.num_labels, size, layers, combine, per_token=False)
    if isinstance(task, squad.SquadTask):  # a start and an end logit per token
        return FeatureBiLSTM(2, size, layers, combine)
    raise ValueError(
        f"task {task.name}: the feature-based approach serves NER, classification and span extraction only"
    )


def layer_indices(spec: str, num_layers: int) -> list[int]:
    """``"-1,-2"`` → hidden-state indices (0 the embeddings, L the last layer)."""
    layers = features.parse_layers(spec.split(","), num_layers)
    index = [layer if layer >= 0 else num_layers + 1 + layer for layer in layers]
    if any(not 0 <= i <= num_layers for i in index):
        raise ValueError(f"layers {spec} out of range for a {num_layers}-layer model")
    return index


def train(
    run: FinetuneSettings,
    settings: FeatureBiLSTMSettings,
    layers: str,
    combine: str,
    workdir: str,
) -> JobResult:
    """Trains (or resumes) the BiLSTM on the features of the run's ``init_checkpoint`` for
    its ``task`` (the task's fine-tuning settings: data, lengths, casing, seed, subsets,
    checkpoints); writes ``results.json`` and returns the last step and the best epoch's
    scores (``stopped`` when ``stop_after_step`` ended the run first)."""
    os.makedirs(workdir, exist_ok=True)
    checkpoint = run.init_checkpoint
    run = run.for_checkpoint(checkpoint)
    loaded, bert_config = convert.load_checkpoint(checkpoint)
    tok = tokenization.load_tokenizer(
        run.data.vocab_file or tokenization.vocab_beside(checkpoint), run.data.do_lower_case
    )
    task = get_task(run.task)
    data = run.task_data.local()  # a data_dir in a bucket: its local copy
    train_split = task.load(data, tok, "train")
    evals = [task.load(data, tok, name) for name in task.eval_splits]
    if jax.process_index() == 0:
        print(f"rows: {', '.join(split.described() for split in (train_split, *evals))}", flush=True)
    index = tuple(layer_indices(layers, bert_config.num_hidden_layers))
    model = FrozenFeatures(
        bert_config, index, _model(task, settings, combine), span=isinstance(task, squad.SquadTask)
    )
    job = FeatureTraining(
        run,
        task,
        train_split,
        model,
        batch_size=settings.global_batch_size,
        learning_rate=settings.learning_rate,
    )
    try:
        history = _train_in_loop(job, loaded, evals, workdir, f"{layers} ({combine})", settings.num_epochs)
    except StopRequested as stop:
        return JobResult.stopped_at(stop.step)
    best = {k: v for k, v in history.best().items() if k not in ("train_loss", "seconds")}
    results = {
        "task": task.name,
        "approach": "features",
        "checkpoint": checkpoint,
        "layers": layers,
        "combine": combine,
        "seed": run.seed,
        "random_init": run.random_init,
        "bilstm": dataclasses.asdict(settings),
        "train_rows": len(train_split),
        "eval_rows": {split.name: len(split) for split in evals},
        "main_metric": task.main_metric,
        "epochs": history.epochs,
        "best": best,
    }
    if jax.process_index() == 0:
        atomic_files.write_json(os.path.join(workdir, "results.json"), results, indent=2)
        shutil.rmtree(os.path.join(workdir, "checkpoints"), ignore_errors=True)  # the run is complete
    return JobResult(step=job.steps_per_epoch * settings.num_epochs, metrics=best)


def _train_in_loop(
    job: FeatureTraining, loaded: dict[str, Any], evals: list[Any], workdir: str, label: str, num_epochs: int
) -> EpochHistory:
    """Trains (or resumes) `job` for `num_epochs` in `workdir`; returns its epochs' history."""
    run, total = job.run, job.steps_per_epoch * num_epochs
    with TrainingRun(workdir, run.training, total_steps=total) as loop:
        state, resumed = loop.restore_or_init(
            job.engine,
            lambda: job.engine.init_state(run.seed, job.initial_params(_encoder(run, loaded, job))),
        )
        history = EpochHistory(workdir, job.task.main_metric, fresh=not resumed)
        end_of_epoch = FeatureEpochEnd(
            job, evals, history, workdir=workdir, label=label, num_epochs=num_epochs
        )
        hooks = [*default_hooks(run.training, total_steps=total), *end_of_epoch.hooks()]
        batches = job.batches(int(jax.device_get(state.step)))
        loop.steps(job.engine, state, batches, end=total, flops=job.flops, hooks=hooks, announce=shape_words)
    return history


def _encoder(run: FinetuneSettings, loaded: dict[str, Any], job: FeatureTraining) -> Any:
    """The frozen encoder's parameters (host arrays): the checkpoint's, or with
    ``random_init`` a fresh encoder of its shape (the baseline pre-trained features are
    measured against; its key is not the BiLSTM's)."""
    encoder = BertModel(job.model.config, add_pooler=False)
    if run.random_init:
        print("random_init: features of the checkpoint's architecture and vocabulary, freshly initialised")
        key = jax.random.fold_in(jax.random.key(run.seed), 1)
        return jax.device_get(nn.meta.unbox(encoder.init(key, *job.sample))["params"])
    shapes = nn.meta.unbox(jax.eval_shape(encoder.init, jax.random.key(0), *job.sample))["params"]
    return param_shapes.merge_params(shapes, loaded["bert"], run.init_checkpoint)
