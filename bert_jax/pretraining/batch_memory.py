"""A pre-training run's batches, checked at start against the memory of this host and of
its devices (`training.memory_fit`): a batch that could never fit is refused in one line
naming its config key, before data is prepared or anything is written."""

from __future__ import annotations

import jax
from jax.sharding import Mesh

from bert_jax.pretraining.settings import PretrainSettings
from bert_jax.training import engine, memory_fit


def check(run: PretrainSettings, mesh: Mesh) -> None:
    """Every phase's training batch (per micro-batch) and evaluation batch: this host's
    rows, and one layer's activations on each device of `mesh`."""
    model, numerics = run.model, run.training.numerics
    scores = memory_fit.materializes_scores(model, numerics, engine.platform(mesh))
    for number, phase in enumerate(run.phases(), 1):
        accum = run.phase_step(number).grad_accum_steps
        for key, batch, micro in (
            ("global_batch_size", run.global_batch_size, accum),
            ("eval_batch_size", run.eval_batch, 1),
        ):
            tokens = phase.max_seq_length
            setting, rows = f"config.{key}={batch}", f"{batch:,} rows of {tokens} tokens"
            host_rows = batch // jax.process_count()
            memory_fit.refuse_above(
                setting, f"a batch of {rows}", memory_fit.batch_host_bytes(host_rows, tokens),
                memory_fit.HOST, f"lower --config.{key}",
            )  # fmt: skip
            need = memory_fit.layer_device_bytes(
                batch // micro, tokens, model.hidden_size, model.num_attention_heads,
                numerics.dtype.itemsize, scores, mesh.size,
            )  # fmt: skip
            more = " or raise --config.grad_accum_steps" if key == "global_batch_size" else ""
            memory_fit.refuse_above(
                setting, f"one layer of activations for {rows}", need, memory_fit.DEVICE,
                f"lower --config.{key}{more}",
            )  # fmt: skip
