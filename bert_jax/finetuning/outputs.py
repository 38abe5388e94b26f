"""What a fine-tuning run leaves behind: the best model (a complete checkpoint) and the
history of its epochs, both written so that a reader never sees half of them and a
resumed run finds them; `EpochEnd` writes them at each epoch's end."""

from __future__ import annotations

import json
import os
import shutil
import time
from typing import Any

import jax
import numpy as np
from flax import serialization

from bert_jax import convert
from bert_jax.convert import layout
from bert_jax.convert.bert_jax_format import HEAD_FILE
from bert_jax.data import tokenization
from bert_jax.model import param_shapes
from bert_jax.storage import atomic_files
from bert_jax.training.hooks import Hook, StepContext


class EpochHistory:
    """Every epoch's dev scores and the best so far, kept in ``epochs.json`` so that a
    resumed run knows them (an epoch evaluated again replaces its entry)."""

    def __init__(self, workdir: str, main_metric: str, *, fresh: bool) -> None:
        self.path, self.main_metric = os.path.join(workdir, "epochs.json"), main_metric
        self.epochs: list[dict[str, Any]] = []
        if not fresh and os.path.exists(self.path):
            with open(self.path) as f:
                self.epochs = json.load(f)

    def add(self, entry: dict[str, Any]) -> bool:
        """Records an epoch; True if it is the best so far (ties go to the later epoch)."""
        self.epochs = [e for e in self.epochs if e["epoch"] < entry["epoch"]] + [entry]
        if jax.process_index() == 0:
            write_json(self.path, self.epochs)
        return self.best()["epoch"] == entry["epoch"]

    def best(self) -> dict[str, Any]:
        best: dict[str, Any] = {}
        for e in self.epochs:
            if not best or e[self.main_metric] >= best[self.main_metric]:
                best = e
        return best


def write_json(path: str, value: Any) -> None:
    atomic_files.write_json(path, value, indent=2, default=str)


def save_model(folder: str, params: Any, inputs: Any, config: dict[str, Any], best: dict) -> None:
    """A fine-tuned model as a complete checkpoint: the encoder in the bert_jax export
    format (so `finetune`, `features` and `convert` read it), the task head
    (``head.msgpack``), the vocabulary and ``task.json`` (task, config, dev scores, the
    head's kind and labels).
    Written beside the folder and swapped in, so a reader never sees half a model."""
    tmp = f"{folder}.tmp"  # one name: a killed save's leftover is removed by the next
    shutil.rmtree(tmp, ignore_errors=True)
    encoder = dict(params["bert"])
    if "pooler" not in encoder:  # span / token heads: the pooler is the checkpoint's, unused
        encoder["pooler"] = inputs.pooler
    convert.save_bert_jax(tmp, {"bert": encoder}, inputs.bert_config)
    head = {k: v for k, v in params.items() if k != "bert"}
    with open(os.path.join(tmp, HEAD_FILE), "wb") as f:
        f.write(serialization.msgpack_serialize(jax.tree.map(np.asarray, head)))
    vocab = inputs.tokenizer.vocab_file
    shutil.copyfile(vocab, os.path.join(tmp, tokenization.saved_name(vocab)))
    # The head's kind and labels: `convert` writes it as its `transformers` class.
    kind = layout.task_head_name(inputs.task.model(inputs.bert_config))
    record = {"task": inputs.task.name, "best": best, "config": config}
    if kind is not None:
        record["head"] = {"kind": kind, "labels": list(inputs.task.label_names)}
    write_json(os.path.join(tmp, "task.json"), record)
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)


def load_saved_params(folder: str, inputs: Any) -> Any:
    """The encoder and head saved by `save_model`, shaped as the task model of `inputs`
    (`finetune.FinetuningInputs`)."""
    loaded, _ = convert.load_checkpoint(folder)
    with open(os.path.join(folder, HEAD_FILE), "rb") as f:
        head = serialization.msgpack_restore(f.read())
    missing = sorted(set(inputs.params) - {"bert"} - set(head))
    if missing:
        raise ValueError(f"{folder}/head.msgpack has no {missing}: saved for another task?")
    heads = {
        k: param_shapes.merge_params(inputs.params[k], head[k], f"{folder}/head.msgpack")
        for k in inputs.params
        if k != "bert"
    }
    return {"bert": param_shapes.merge_params(inputs.params["bert"], loaded["bert"], folder), **heads}


class EpochScoring:
    """Hooks of a run scored at each epoch's end: each step's loss recorded (`record`), and
    at the epoch's last step (`close`) its mean training loss (over the steps this process
    ran: a resumed epoch, those after the resume) and training seconds, the first eval
    split's scores (dev), the other splits' (a test split) only for an epoch that is the
    best so far on dev (ties: the later epoch), the one whose figures are reported; the
    epoch into the history; then `finish` (the console line, the saved model) of the
    subclass."""

    def __init__(self, steps_per_epoch: int, main_metric: str, history: EpochHistory, workdir: str) -> None:
        self.steps_per_epoch, self.main_metric = steps_per_epoch, main_metric
        self.history, self.workdir = history, workdir
        self.start, self.losses = time.time(), []

    def hooks(self) -> list[Hook]:
        return [Hook(self.record, reads_values=False), Hook(self.close, every=self.steps_per_epoch)]

    def record(self, ctx: StepContext) -> None:
        self.losses.append(ctx.metrics["loss"])

    def score(self, params: Any, out_dir: str, *, first: bool) -> dict[str, float]:
        """The first eval split's scores (`first`), or the other splits'."""
        raise NotImplementedError

    def finish(self, ctx: StepContext, figures: dict[str, Any], scores: dict[str, float], best: bool) -> None:
        """The subclass's own outputs of an epoch recorded in the history: `figures` (epoch,
        step, train_loss, seconds), its `scores`, and whether it is the `best` so far."""
        raise NotImplementedError

    def close(self, ctx: StepContext) -> None:
        epoch = ctx.step // self.steps_per_epoch
        train_loss = float(np.mean(jax.device_get(self.losses)))
        seconds = time.time() - self.start
        out_dir = os.path.join(self.workdir, "eval", f"epoch{epoch}")
        scores = self.score(ctx.state.params, out_dir, first=True)
        best = self.history.best()
        if not best or scores[self.main_metric] >= best[self.main_metric]:
            scores.update(self.score(ctx.state.params, out_dir, first=False))
        ctx.log(scores, split="dev")
        ctx.log({"epoch_train_loss": train_loss, "epoch_seconds": seconds})
        figures = {"epoch": epoch, "step": ctx.step, "train_loss": train_loss, "seconds": seconds}
        self.finish(ctx, figures, scores, self.history.add({**figures, **scores}))
        self.start, self.losses = time.time(), []


class EpochEnd(EpochScoring):
    """Fine-tuning's epoch ends (`EpochScoring`): a console line with every score, and the
    model saved when the epoch is the best (`ft`: the run's `finetune.Finetuning`)."""

    def __init__(self, ft: Any, history: EpochHistory, workdir: str) -> None:
        super().__init__(ft.steps_per_epoch, ft.inputs.task.main_metric, history, workdir)
        self.ft = ft
        config, task = ft.run, ft.inputs.task
        self.keep_best = bool(config.save_best_model or (config.predict_test and task.test_splits))

    def score(self, params: Any, out_dir: str, *, first: bool) -> dict[str, float]:
        dev, *others = self.ft.inputs.evals
        splits = [dev] if first else others
        return self.ft.evaluate(params, out_dir, splits) if splits else {}

    def finish(self, ctx: StepContext, figures: dict[str, Any], scores: dict[str, float], best: bool) -> None:
        inputs = self.ft.inputs
        print(
            f"{inputs.task.name} epoch {figures['epoch']}: train loss {figures['train_loss']:.4f} "
            f"({figures['seconds']:.0f}s)  " + "  ".join(f"{k} {v:.4f}" for k, v in scores.items()),
            flush=True,
        )
        if best and self.keep_best and jax.process_index() == 0:
            folder = os.path.join(self.workdir, "best_model")
            save_model(folder, jax.device_get(ctx.state.params), inputs, self.ft.run.config, scores)
