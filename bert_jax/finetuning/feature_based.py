"""The feature-based approach of Table 7 (§5.3): a BiLSTM trained on frozen BERT features.

The pre-trained encoder is not trained: each batch's hidden states of the chosen layers
(``0`` the embeddings, ``-1`` the last layer, ``all`` every Transformer layer; counted as
in `bert_jax.model.features`) are computed under `jax.lax.stop_gradient` and fed to
`bilstm.FeatureBiLSTM` (a two-layer BiLSTM and a classifier), which alone is trained
(Adam). The task decides what is predicted and how it is scored, as in fine-tuning:
CoNLL-2003 NER (the paper's) tags each word's first WordPiece and scores entity F1;
a sentence(-pair) classification task (e.g. BBC News topics, the offline stand-in)
classifies the BiLSTM's sentence vector (`bilstm.sentence_vector`) and scores its own
metric; a span-extraction task (SQuAD and the offline QA sets) gets a start and an end
logit per token from the BiLSTM and is scored by the official script, as fine-tuning's
span head is. As in fine-tuning, dev is scored every epoch and the task's other eval
splits (the offline suite's test split, keys ``test/...``) at each epoch that is the best
so far on dev. ``results.json`` has the fine-tuning job's shape (``main_metric``,
``best``, ``epochs``); a run whose ``results.json`` exists is not repeated by the
ablation runner.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from bert_jax import convert
from bert_jax.data import tokenization
from bert_jax.finetuning.batches import bucket_length, cut_to_length, epoch_batch
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.model import features
from bert_jax.model.bilstm import FeatureBiLSTM
from bert_jax.model.encoder import BertModel
from bert_jax.storage import atomic_files
from bert_jax.tasks import classification, ner, squad
from bert_jax.tasks.base import Task
from bert_jax.tasks.registry import get_task
from bert_jax.training.metric_writer import format_eta


def supports(task_name: str) -> bool:
    """Whether the feature-based approach serves the task: NER, sentence(-pair)
    classification and regression, or span extraction (not multiple choice)."""
    task = get_task(task_name)
    return isinstance(task, ner.NerTask | classification.ClassificationTask | squad.SquadTask)


@dataclasses.dataclass(frozen=True)
class FeatureBiLSTMSettings:
    """The BiLSTM on frozen features and how it trains (the paper's §5.3: two layers of 768
    per direction on BERT-Base's states; an ablation table's ``feature_bilstm`` block)."""

    lstm_size: int
    lstm_layers: int
    learning_rate: float
    num_epochs: int
    global_batch_size: int

    @classmethod
    def from_config(cls, config: ml_collections.ConfigDict | dict[str, Any]) -> FeatureBiLSTMSettings:
        return cls(
            lstm_size=int(config["lstm_size"]),
            lstm_layers=int(config["lstm_layers"]),
            learning_rate=float(config["learning_rate"]),
            num_epochs=int(config["num_epochs"]),
            global_batch_size=int(config["global_batch_size"]),
        )


def _model(task: Task, settings: FeatureBiLSTMSettings, combine: str) -> FeatureBiLSTM:
    size, layers = settings.lstm_size, settings.lstm_layers
    if isinstance(task, ner.NerTask):
        return FeatureBiLSTM(len(ner.TAGS), size, layers, combine)
    if isinstance(task, classification.ClassificationTask):
        return FeatureBiLSTM(task.spec.num_labels, size, layers, combine, per_token=False)
    if isinstance(task, squad.SquadTask):  # a start and an end logit per token
        return FeatureBiLSTM(2, size, layers, combine)
    raise ValueError(
        f"task {task.name}: the feature-based approach serves NER, classification and span extraction only"
    )


def task_outputs(task: Task, logits: Any) -> Any:
    """The BiLSTM's logits in the form the task's loss and scorer take (a span task: the
    start and the end logits, each [B, S])."""
    if isinstance(task, squad.SquadTask):
        return logits[..., 0], logits[..., 1]
    return logits


def layer_indices(spec: str, num_layers: int) -> list[int]:
    """``"-1,-2"`` → hidden-state indices (0 the embeddings, L the last layer)."""
    layers = features.parse_layers(spec.split(","), num_layers)
    index = [layer if layer >= 0 else num_layers + 1 + layer for layer in layers]
    if any(not 0 <= i <= num_layers for i in index):
        raise ValueError(f"layers {spec} out of range for a {num_layers}-layer model")
    return index


def _functions(encoder: BertModel, model: FeatureBiLSTM, task: Task, index: list[int], tx: Any) -> tuple:
    """(states, step, predict): the frozen encoder's chosen layers, the jitted training
    step of the BiLSTM and its jitted logits. The encoder's parameters are an argument of
    the compiled functions, not constants in them."""

    def states(bert: Any, ids: jax.Array, mask: jax.Array, seg: jax.Array) -> jax.Array:
        _, _, hidden = encoder.apply({"params": bert}, ids, mask, seg, output_hidden_states=True)
        return jax.lax.stop_gradient(jnp.stack([hidden[i].astype(jnp.float32) for i in index], axis=2))

    def logits(params: Any, bert: Any, batch: dict[str, jax.Array]) -> jax.Array:
        feats = states(bert, batch["input_ids"], batch["input_mask"], batch["segment_ids"])
        return model.apply({"params": params}, feats, batch["input_mask"])

    def loss_fn(params: Any, bert: Any, batch: dict[str, jax.Array]) -> jax.Array:
        return task.loss(task_outputs(task, logits(params, bert, batch)), batch)

    @jax.jit
    def step(
        params: Any, opt_state: Any, bert: Any, batch: dict[str, jax.Array]
    ) -> tuple[Any, Any, jax.Array]:
        loss, grads = jax.value_and_grad(loss_fn)(params, bert, batch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return states, step, jax.jit(logits)


def train(
    config: ml_collections.ConfigDict,
    settings: FeatureBiLSTMSettings,
    layers: str,
    combine: str,
    workdir: str,
) -> dict[str, Any]:
    """Trains the BiLSTM on the features of the config's ``init_checkpoint`` for its ``task``
    (the task's fine-tuning config: data, lengths, casing, seed, subsets); returns the best
    epoch's scores and writes ``results.json``."""
    os.makedirs(workdir, exist_ok=True)
    run = FinetuneSettings.from_config(config)
    checkpoint = run.init_checkpoint
    loaded, bert_config = convert.load_checkpoint(checkpoint)
    tok = tokenization.load_tokenizer(
        run.vocab_file or tokenization.vocab_beside(checkpoint), run.do_lower_case
    )
    task = get_task(run.task)
    model = _model(task, settings, combine)
    train_split = task.load(run.data, tok, "train")
    dev, *others = [task.load(run.data, tok, name) for name in task.eval_splits]
    index = layer_indices(layers, bert_config.num_hidden_layers)
    tx = optax.adam(settings.learning_rate)
    encoder = BertModel(bert_config, add_pooler=False)
    states, step, predict = _functions(encoder, model, task, index, tx)
    sample = {k: jnp.asarray(v[:1]) for k, v in train_split.arrays.items()}
    inputs = (sample["input_ids"], sample["input_mask"], sample["segment_ids"])
    bert_params = jax.device_put(loaded["bert"])
    if run.random_init:  # the baseline pre-trained features are measured against
        print("random_init: features of the checkpoint's architecture and vocabulary, freshly initialised")
        key = jax.random.fold_in(jax.random.key(run.seed), 1)  # not the BiLSTM's key
        bert_params = nn.meta.unbox(encoder.init(key, *inputs))["params"]
    feats = states(bert_params, *inputs)
    params = model.init(jax.random.key(run.seed), feats, sample["input_mask"])["params"]
    opt_state = tx.init(params)
    buckets, max_len = run.length_buckets, run.max_seq_length
    batch_size, seed = min(settings.global_batch_size, len(train_split)), run.seed
    epochs, best, num_epochs, t0 = [], None, settings.num_epochs, time.time()

    def logits_of(params: Any, batch: dict[str, np.ndarray]) -> jax.Array:
        return predict(params, bert_params, batch)

    for epoch in range(1, num_epochs + 1):
        start, losses, tokens = time.time(), [], 0
        for s in range(len(train_split) // batch_size):
            rows = epoch_batch(train_split, seed=seed, epoch=epoch, index=s, batch_size=batch_size)
            rows = cut_to_length(rows, bucket_length(rows["input_mask"], buckets, max_len))
            params, opt_state, loss = step(params, opt_state, bert_params, rows)
            losses.append(loss)
            tokens += int(rows["input_mask"].sum())
        metric, out_dir = task.main_metric, os.path.join(workdir, "eval", f"epoch{epoch}")
        scores = _score(task, logits_of, params, dev, run.eval_batch_size, out_dir)
        is_best = best is None or scores[metric] >= best[metric]  # ties go to the later epoch
        if is_best:  # the other splits (test) are scored for a best epoch only
            for split in others:
                values = _score(task, logits_of, params, split, run.eval_batch_size, out_dir)
                scores.update({f"{split.name}/{k}": v for k, v in values.items()})
        entry = {"epoch": epoch, "train_loss": float(np.mean(jax.device_get(losses))),
                 "seconds": time.time() - start, **scores}  # fmt: skip
        epochs.append(entry)
        eta = (num_epochs - epoch) * (time.time() - t0) / epoch
        print(
            f"features {layers} ({combine}) epoch {epoch}/{num_epochs}: "
            f"train loss {entry['train_loss']:.4f}  {metric} {scores[metric]:.4f}  "
            f"tok/s {tokens / entry['seconds']:,.0f}  eta {format_eta(eta)}",
            flush=True,
        )
        if is_best:
            best = {"epoch": epoch, **scores}
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
        "eval_rows": {split.name: len(split) for split in (dev, *others)},
        "main_metric": task.main_metric,
        "epochs": epochs,
        "best": best,
    }
    atomic_files.write_json(os.path.join(workdir, "results.json"), results, indent=2)
    return best


def _score(task: Task, predict: Any, params: Any, split: Any, batch_size: int, out_dir: str) -> dict:
    """The task's scores of the split (its prediction files under ``out_dir/<split>/``)."""
    logits = _predict(predict, params, split, batch_size)
    return task.score(task_outputs(task, logits), split, os.path.join(out_dir, split.name))


def _predict(predict: Any, params: Any, split: Any, batch_size: int) -> np.ndarray:
    """Logits of every row; the last batch padded so one compiled shape serves the split."""
    arrays, n, chunks = split.arrays, len(split), []
    for start in range(0, n, batch_size):
        batch = {k: arrays[k][start : start + batch_size] for k in ("input_ids", "input_mask", "segment_ids")}
        pad = batch_size - len(batch["input_ids"])
        if pad:
            batch = {k: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}
        chunks.append(np.asarray(predict(params, batch))[: batch_size - pad])
    return np.concatenate(chunks)
