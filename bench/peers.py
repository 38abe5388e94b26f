"""Reference BERT training steps from `transformers` (PyTorch and Flax), for benchmarks.

Both peers run what a user of that library would run: `BertForPreTraining` with
AdamW, full forward + backward + update, MLM labels at 15% of positions (-100
elsewhere) plus the NSP label. They compute MLM logits over the full vocabulary at every
position, as the library does. The PyTorch peer also runs on a GPU (bfloat16 autocast,
`torch.compile`) and as `ModernBertForMaskedLM` for a ModernBERT config (`gpu_pretrain.py`).
`torch_classification_step` is the fine-tuning peer: `BertForSequenceClassification`
trained as the library's `Trainer` trains it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bert_jax.commands import run_settings
from bert_jax.model.config import BertConfig


def random_batch(
    config: BertConfig, batch: int, seq: int, num_masked: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """A pre-training batch in the original feature layout (bert_jax's input)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, config.vocab_size, (batch, seq), dtype=np.int32)
    positions = np.stack(
        [np.sort(rng.choice(np.arange(1, seq - 1), num_masked, replace=False)) for _ in range(batch)]
    ).astype(np.int32)
    return {
        "input_ids": ids,
        "input_mask": np.ones((batch, seq), np.int32),
        "segment_ids": (np.arange(seq)[None] >= seq // 2).astype(np.int32).repeat(batch, 0),
        "masked_lm_positions": positions,
        "masked_lm_ids": np.take_along_axis(ids, positions, axis=1),
        "masked_lm_weights": np.ones((batch, num_masked), np.float32),
        "next_sentence_labels": rng.integers(0, 2, (batch,), dtype=np.int32),
    }


def hf_config(config: BertConfig):
    """`transformers.BertConfig` of the same shape, dropout and LayerNorm epsilon (the
    converter's `config.json`), with SDPA attention."""
    import transformers

    from bert_jax.convert import hf_format

    return transformers.BertConfig(**hf_format.hf_config_dict(config), attn_implementation="sdpa")


def mlm_labels(batch: dict[str, np.ndarray]) -> np.ndarray:
    labels = np.full(batch["input_ids"].shape, -100, np.int64)
    np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], axis=1)
    return labels


def torch_step(
    config: BertConfig,
    batch: dict[str, np.ndarray],
    *,
    device: str = "cpu",
    bf16: bool = False,
    compiled: bool = False,
) -> Callable[[], Any]:
    """transformers' PyTorch pre-training model of ``config``'s family + torch.optim.AdamW
    (fused on CUDA), clipping at 1.0; returns a step fn (it queues one step and returns its
    loss, on the device). BERT: `BertForPreTraining` (MLM + NSP, logits at every
    position); ModernBERT: `ModernBertForMaskedLM` with
    ``sparse_prediction=True`` (logits at the masked positions, as ModernBERT trains), no
    NSP. SDPA attention; ``bf16``: bfloat16 autocast; ``compiled``: `torch.compile` of the
    model (default mode)."""
    import torch
    import transformers

    from bert_jax.convert import layout, modernbert_format

    torch.manual_seed(0)
    as_long = lambda a: torch.from_numpy(np.asarray(a, np.int64)).to(device)
    inputs = {
        "input_ids": as_long(batch["input_ids"]),
        "attention_mask": as_long(batch["input_mask"]),
        "labels": as_long(mlm_labels(batch)),
    }
    if layout.hf_family(config) == "modernbert":
        values = modernbert_format.hf_config(config, "ModernBertForMaskedLM")
        hf = transformers.ModernBertConfig(**values, sparse_prediction=True, attn_implementation="sdpa")
        model = transformers.ModernBertForMaskedLM(hf)
    else:
        model = transformers.BertForPreTraining(hf_config(config))
        inputs["token_type_ids"] = as_long(batch["segment_ids"])
        inputs["next_sentence_label"] = as_long(batch["next_sentence_labels"])
    model = model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6, fused=device == "cuda")
    forward = torch.compile(model) if compiled else model

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = forward(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.detach()

    return step


def flax_step(config: BertConfig, batch: dict[str, np.ndarray]) -> Callable[[], Any]:
    """transformers' FlaxBertForPreTraining + optax.adamw under jax.jit; returns a step fn (the
    loss on the device)."""
    import jax
    import jax.numpy as jnp
    import optax
    import transformers

    model = transformers.FlaxBertForPreTraining(hf_config(config), seed=0)
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-4, eps=1e-6, weight_decay=0.01))
    labels = jnp.asarray(mlm_labels(batch))
    inputs = {
        "input_ids": jnp.asarray(batch["input_ids"]),
        "attention_mask": jnp.asarray(batch["input_mask"]),
        "token_type_ids": jnp.asarray(batch["segment_ids"]),
    }
    nsp = jnp.asarray(batch["next_sentence_labels"])

    def loss_fn(params, rng):
        out = model(**inputs, params=params, dropout_rng=rng, train=True)
        weights = (labels >= 0).astype(jnp.float32)
        mlm = optax.softmax_cross_entropy_with_integer_labels(out.prediction_logits, jnp.maximum(labels, 0))
        mlm = (mlm * weights).sum() / weights.sum()
        nsp_loss = optax.softmax_cross_entropy_with_integer_labels(out.seq_relationship_logits, nsp).mean()
        return mlm + nsp_loss

    @jax.jit
    def train_step(params, opt_state, rng):
        rng, sub = jax.random.split(rng)
        loss, grads = jax.value_and_grad(loss_fn)(params, sub)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, rng, loss

    state = {"params": model.params, "opt": tx.init(model.params), "rng": jax.random.key(0)}

    def step() -> Any:
        state["params"], state["opt"], state["rng"], loss = train_step(
            state["params"], state["opt"], state["rng"]
        )
        return loss

    return step


def torch_classification_step(
    model_dir: str, num_labels: int, *, total_steps: int, warmup_steps: int, learning_rate: float = 5e-5
) -> Callable[[list[dict]], Any]:
    """transformers' PyTorch `BertForSequenceClassification` fine-tuned as its `Trainer` does.

    Loaded from the Hugging Face folder `model_dir` (a fresh classifier on its encoder);
    each step collates its features with `DataCollatorWithPadding` (the Trainer's default:
    each batch padded to its longest row), then forward + backward, gradient clipping at
    1.0, `torch.optim.AdamW` (fused, no decay on biases and LayerNorm weights, as the Trainer)
    and a linear warmup/decay schedule. Returns ``step(features) -> loss`` where each
    feature is a dict of unpadded ``input_ids``/``token_type_ids``/``attention_mask`` lists
    and an int ``labels``; ``step.collate`` is the collator.
    """
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification.from_pretrained(model_dir, num_labels=num_labels)
    model.train()
    collator = transformers.DataCollatorWithPadding(transformers.BertTokenizerFast.from_pretrained(model_dir))
    named = list(model.named_parameters())
    no_decay = [p for n, p in named if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in named if not (n.endswith("bias") or "LayerNorm" in n)]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=learning_rate,
        eps=1e-6,
        fused=True,  # the Trainer's default optimizer ("adamw_torch_fused") since torch 2.8
    )
    schedule = transformers.get_linear_schedule_with_warmup(opt, warmup_steps, total_steps)

    def step(features: list[dict]) -> Any:
        batch = collator(features)
        opt.zero_grad(set_to_none=True)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        return loss.detach()

    step.collate = collator  # type: ignore[attr-defined]  (timed on its own by the benchmark)
    return step


def bert_jax_pretraining_step(
    model: dict[str, Any], batch: int, seq: int, masked: int, changes: dict[str, Any] | None = None
) -> tuple[Callable[[], Any], float]:
    """bert_jax's pre-training step (MLM + NSP, AdamW) of `model` (a ``config.model`` dict)
    on one device over one random batch, with run-config `changes`; returns the step
    function and the step's model FLOPs (the MLM head on the masked positions only)."""
    from bert_jax.training import run_config
    from configs import pretrain as pretrain_config

    c = pretrain_config.get_config("tiny")
    c.model = model
    c.data.source = "synthetic"
    c.global_batch_size, c.max_seq_length, c.max_predictions_per_seq = batch, seq, masked
    c.warmup_steps = 10
    run_config.set_keys(c, changes or {})
    return bert_jax_step(run_settings.pretrain_settings(c))


def bert_jax_step(settings: Any) -> tuple[Callable[[], Any], float]:
    """bert_jax's pre-training step of `settings` (`PretrainSettings`) on one device over one
    random batch of the run's shape; returns the step function (the loss on the device) and
    the step's model FLOPs (the MLM head on the masked positions only)."""
    import jax

    from bert_jax.model import flops
    from bert_jax.pretraining import pretrain
    from bert_jax.training import sharding

    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    setup = pretrain.Pretraining(settings, mesh)
    batch, seq, masked = settings.global_batch_size, settings.max_seq_length, settings.max_predictions_per_seq
    data = random_batch(setup.model_config, batch, seq, masked)
    with jax.set_mesh(mesh):
        state = {"s": setup.engine.init_state(0)}
        placed = setup.global_batch(data)

    def step() -> Any:
        with jax.set_mesh(mesh):
            state["s"], metrics = setup.train_step(state["s"], placed)
        return metrics["loss"]

    return step, flops.model_flops_per_step(setup.model_config, batch, seq, masked, nsp=setup.nsp)


def time_steps(step: Callable[[], Any], warmup: int, iters: int, *, read_late: bool = True) -> float:
    """Seconds per step, after `warmup` untimed steps (compilation, allocator warm-up).

    `step` queues one training step and returns its loss on the device; every step's loss
    is read to the host. ``read_late``: a step's loss is read once the next step is queued,
    as a training loop that logs every step can (the device is not left idle while the host
    waits for the value and queues the next step); else before the next step is queued.
    """
    for _ in range(warmup):
        float(step())
    start = time.perf_counter()
    pending = None
    for _ in range(iters):
        loss = step()
        if not read_late:
            float(loss)
        elif pending is not None:
            float(pending)
        pending = loss
    float(pending)
    return (time.perf_counter() - start) / iters


def full_vocab_flops_per_token(config: BertConfig, seq: int) -> float:
    """Training FLOPs per token of a BERT that computes MLM logits at every position.

    6 x (matmul parameters) per token for forward + backward, plus the attention score and
    context matmuls (2 x 2 x S x H per layer forward, x3 for training).
    """
    h, f, v, n = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    per_layer = 4 * h * h + 2 * h * f
    matmul_params = n * per_layer + h * h + h * v  # layers + MLM transform + decoder
    attention = n * 2 * 2 * seq * h
    return 6 * matmul_params + 3 * attention
