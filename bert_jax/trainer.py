"""The pre-training loop: data → jitted step → metrics, eval, checkpoints, preemption.

`train_and_evaluate(config, workdir)` is what `bert-jax pretrain` runs. Running it again
with the same workdir resumes from the latest checkpoint, with exactly the batches an
uninterrupted run would have seen (the input pipeline is positioned by step).

The paper's two-phase schedule (90% of steps at sequence 128, then 512) is
``config.phase2_fraction`` > 0: the second phase re-creates the data iterator at
``phase2_max_seq_length`` and the jitted step recompiles for the new shapes; parameters
(including the 512-row position table) and optimizer state carry over untouched.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from bert_jax import checkpointing, hardware, sharding, synthetic_data, train
from bert_jax.metrics_logging import MetricsLogger

PREEMPTED_EXIT_CODE = 143  # as a process ended by SIGTERM: a restart loop starts it again


@dataclasses.dataclass(frozen=True)
class Phase:
    start: int  # first global step of the phase
    end: int  # one past its last step
    max_seq_length: int
    max_predictions_per_seq: int


def phases(config: ml_collections.ConfigDict) -> list[Phase]:
    total = int(config.num_train_steps)
    frac = float(config.get("phase2_fraction", 0.0))
    first = Phase(0, total, int(config.max_seq_length), int(config.max_predictions_per_seq))
    if frac <= 0:
        return [first]
    split = round(total * (1 - frac))
    return [
        dataclasses.replace(first, end=split),
        Phase(
            split,
            total,
            int(config.phase2_max_seq_length),
            int(config.phase2_max_predictions_per_seq),
        ),
    ]


def data_iterator(
    config: ml_collections.ConfigDict,
    *,
    split: str,
    max_seq_length: int,
    max_predictions_per_seq: int,
    start_step: int = 0,
    global_batch_size: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local batches from the configured source, positioned at `start_step`."""
    batch = int(global_batch_size or config.global_batch_size)
    if batch % jax.process_count():
        raise ValueError(f"global_batch_size={batch} is not divisible by {jax.process_count()} processes")
    if config.data.source == "synthetic":
        return synthetic_data.create_iterator(
            global_batch_size=batch,
            max_seq_length=max_seq_length,
            max_predictions_per_seq=max_predictions_per_seq,
            vocab_size=int(config.model.vocab_size),
            seed=int(config.seed) + (0 if split == "train" else 10_000),
            start_step=start_step,
            process_index=jax.process_index(),
            process_count=jax.process_count(),
            num_batches=None if split == "train" else int(config.get("eval_steps", 0) or 4),
        )
    from bert_jax import input_pipeline

    return input_pipeline.create_pretrain_iterator(
        config.data,
        global_batch_size=batch,
        max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        seed=int(config.seed),
        split=split,
        start_step=start_step,
        process_index=jax.process_index(),
        process_count=jax.process_count(),
    )


def check_vocab(config: ml_collections.ConfigDict) -> None:
    """A model whose embedding table is smaller than the vocabulary would index past it."""
    if config.data.get("objective", "mlm") == "ltr" and not config.model.causal_attention:
        raise ValueError(
            "config.data.objective='ltr' needs --config.model.causal_attention=True "
            "(a bidirectional model would see the tokens it predicts)"
        )
    if config.data.source == "synthetic":
        return
    from bert_jax import input_pipeline

    vocab = input_pipeline.vocab_size_of(config.data)
    if vocab > config.model.vocab_size:
        raise ValueError(
            f"the vocabulary has {vocab} tokens but config.model.vocab_size is "
            f"{config.model.vocab_size}: set --config.model.vocab_size={vocab}"
        )


_CPU_PEAK: list[float] = []


def device_peak_flops() -> float:
    """Peak FLOP/s of one local device: from the table, or measured once on CPU."""
    device = jax.local_devices()[0]
    peak = hardware.peak_flops_for_device_kind(device.device_kind)
    if peak is not None:
        return peak
    if not _CPU_PEAK:
        n = 2048
        a = jnp.ones((n, n), jnp.float32)
        f = jax.jit(lambda x: x @ x)
        f(a).block_until_ready()
        start = time.perf_counter()
        reps = 5
        for _ in range(reps):
            f(a).block_until_ready()
        _CPU_PEAK.append(2 * n**3 * reps / (time.perf_counter() - start))
    return _CPU_PEAK[0]


class _Preemption:
    """SIGTERM (a TPU maintenance event or `launch/tpu_pod.py stop`) → save, then exit."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def should_stop(self, step: int) -> bool:
        if jax.process_count() > 1:
            # All hosts must agree on the step at which they save.
            from jax.experimental import multihost_utils

            try:
                return bool(multihost_utils.reached_preemption_sync_point(step)) or self.requested
            except Exception:
                return self.requested
        return self.requested

    def restore(self) -> None:
        signal.signal(signal.SIGTERM, self._previous)


def evaluate(
    setup: train.Setup, state: train.TrainState, config: ml_collections.ConfigDict, phase: Phase
) -> tuple[dict[str, float], np.ndarray]:
    """Eval metrics over the held-out split, and the masked target ids seen (for baselines)."""
    sums: dict[str, float] = {}
    targets = []
    for local in data_iterator(
        config,
        split="eval",
        max_seq_length=phase.max_seq_length,
        max_predictions_per_seq=phase.max_predictions_per_seq,
        global_batch_size=eval_batch_size(config),
    ):
        batch = setup.global_batch(local, phase.max_predictions_per_seq)
        out = setup.eval_step(state.params, batch)
        for k, v in jax.device_get(out).items():
            sums[k] = sums.get(k, 0.0) + float(v)
        targets.append(masked_targets(batch))
    if not sums:
        raise ValueError("the eval split is empty: no held-out examples to evaluate on")
    metrics = {k: float(v) for k, v in train.finalize_metrics(sums, setup.nsp).items()}
    metrics["num_predictions"] = sums["mlm_weight"]
    return metrics, np.concatenate(targets) if targets else np.zeros((0,), np.int32)


def eval_batch_size(config: ml_collections.ConfigDict) -> int:
    return int(config.get("eval_batch_size", 0) or config.global_batch_size)


def check_data(config: ml_collections.ConfigDict) -> None:
    """Opens the train and held-out data of every phase (preparing a built-in source on
    first use), so that a run whose data cannot serve it is refused before it starts."""
    for phase in phases(config):
        for split in ("train", "eval"):
            it = data_iterator(
                config,
                split=split,
                max_seq_length=phase.max_seq_length,
                max_predictions_per_seq=phase.max_predictions_per_seq,
                global_batch_size=eval_batch_size(config) if split == "eval" else None,
            )
            next(iter(it))
            getattr(it, "close", lambda: None)()


def masked_targets(batch: train.Batch) -> np.ndarray:
    """The masked target ids of a global batch (every host gets all of them)."""
    from jax.experimental import multihost_utils

    ids, w = (
        np.asarray(multihost_utils.process_allgather(batch[k], tiled=True))
        for k in ("masked_lm_ids", "masked_lm_weights")
    )
    return ids[w > 0]


def unigram_baseline(
    setup: train.Setup,
    config: ml_collections.ConfigDict,
    phase: Phase,
    eval_targets: np.ndarray,
    batches: int,
) -> tuple[int, float]:
    """Accuracy of always predicting the most frequent masked target of the training data."""
    it = data_iterator(
        config,
        split="train",
        max_seq_length=phase.max_seq_length,
        max_predictions_per_seq=phase.max_predictions_per_seq,
    )
    seen = [
        masked_targets(setup.global_batch(local, phase.max_predictions_per_seq))
        for _, local in zip(range(batches), it, strict=False)
    ]
    values, counts = np.unique(np.concatenate(seen), return_counts=True)
    top = int(values[np.argmax(counts)])
    acc = float(np.mean(eval_targets == top)) if eval_targets.size else 0.0
    return top, acc


def keep_vocab(config: ml_collections.ConfigDict, workdir: str) -> None:
    """Copies the tokenizer's vocabulary into the workdir (``vocab.txt``, or ``spm.model``
    for SentencePiece), so the workdir is a complete checkpoint for `finetune`, `features`
    and `convert` without remembering which vocab it was trained with."""
    if config.data.source == "synthetic" or jax.process_index() != 0:
        return
    import tensorflow as tf

    from bert_jax import input_pipeline

    src = input_pipeline.tokenizer_of(config.data).vocab_file
    name = "spm.model" if config.data.get("tokenizer", "wordpiece") == "sentencepiece" else "vocab.txt"
    dst = os.path.join(workdir, name)
    if not tf.io.gfile.exists(dst):
        tf.io.gfile.makedirs(workdir)
        tf.io.gfile.copy(src, f"{dst}.tmp", overwrite=True)
        tf.io.gfile.rename(f"{dst}.tmp", dst, overwrite=True)  # readers never see half a vocab


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, Any]:
    """Trains (or resumes) to `config.num_train_steps`; returns the final eval metrics."""
    if "://" not in workdir:  # orbax wants absolute paths; gs:// and the like stay as they are
        workdir = os.path.abspath(workdir)
    # Everything that can refuse the run comes before anything is written to the workdir.
    check_vocab(config)
    mesh = sharding.make_mesh(tuple(config.mesh_shape))
    setup = train.Setup(config, mesh)
    checkpointing.check_model_config(workdir, setup.model_config)
    check_data(config)
    ckpt = checkpointing.Checkpointer(
        workdir,
        keep=int(config.keep_checkpoints),
        async_save=bool(config.get("async_checkpointing", True)),
    )
    total = int(config.num_train_steps)
    logger: MetricsLogger | None = None
    preemption = _Preemption()
    peak = device_peak_flops() * jax.device_count()
    eval_every = int(config.eval_every_steps)
    ckpt_every = int(config.checkpoint_every_steps)
    log_every = int(config.log_every_steps)
    last_eval: dict[str, float] = {}
    # Stop (with a checkpoint) at this step, e.g. to fit a job into a fixed time slot.
    stop_after = int(config.get("stop_after_step", 0)) or -1
    try:
        with jax.set_mesh(mesh):
            restored = ckpt.restore_latest(setup.abstract_state)
            if restored is not None:
                state, latest = restored
                print(f"resumed from {workdir}/checkpoints/{latest}", flush=True)
            else:
                state, latest = setup.init_state(int(config.seed)), None
            # The run is accepted: from here on it writes to the workdir.
            checkpointing.write_model_config(workdir, setup.model_config)
            keep_vocab(config, workdir)
            logger = MetricsLogger(workdir, total)
            step = int(jax.device_get(state.step))
            last_saved = latest
            for phase in phases(config):
                if step >= phase.end:
                    continue
                it = data_iterator(
                    config,
                    split="train",
                    max_seq_length=phase.max_seq_length,
                    max_predictions_per_seq=phase.max_predictions_per_seq,
                    start_step=step - phase.start,
                )
                flops = train.model_flops_per_step(
                    setup.model_config,
                    int(config.global_batch_size),
                    phase.max_seq_length,
                    phase.max_predictions_per_seq,
                    setup.nsp,
                )
                tokens = int(config.global_batch_size) * phase.max_seq_length
                window_start, window_steps = time.perf_counter(), 0
                first_step_of_run = step
                while step < phase.end:
                    batch = setup.global_batch(next(it), phase.max_predictions_per_seq)
                    state, metrics = setup.train_step(state, batch)
                    step += 1
                    window_steps += 1
                    is_log_step = step % log_every == 0 or step == phase.end
                    if window_steps == 1 and step == first_step_of_run + 1 and not is_log_step:
                        # Exclude compilation from the first throughput window.
                        jax.block_until_ready(metrics)
                        window_start, window_steps = time.perf_counter(), 0
                    if is_log_step:
                        host = {k: float(v) for k, v in jax.device_get(metrics).items()}
                        elapsed = time.perf_counter() - window_start
                        host["tokens_per_sec"] = tokens * window_steps / elapsed
                        host["mfu"] = flops * window_steps / elapsed / peak
                        host["max_seq_length"] = phase.max_seq_length
                        logger.write(step, host)
                        logger.progress(step, host)
                        window_start, window_steps = time.perf_counter(), 0
                    if step % ckpt_every == 0:
                        ckpt.save(step, state)
                        last_saved = step
                    if eval_every and (step % eval_every == 0 or step == total):
                        last_eval, _ = evaluate(setup, state, config, phase)
                        logger.write(step, last_eval, split="eval")
                        ckpt.maybe_save_best(step, state, last_eval)
                    if step == stop_after or preemption.should_stop(step):
                        if last_saved != step:
                            ckpt.save(step, state, force=True)
                        ckpt.wait()
                        if step == stop_after:
                            print(f"stopped at step {step} (stop_after_step); rerun to continue", flush=True)
                            return {"stopped_at": step}
                        print(f"preempted: saved step {step} to {workdir}/checkpoints; exiting", flush=True)
                        sys.exit(PREEMPTED_EXIT_CODE)
            if last_saved != step:
                ckpt.save(step, state, force=True)
            final_phase = phases(config)[-1]
            final, eval_targets = evaluate(setup, state, config, final_phase)
            if not last_eval or last_eval.get("mlm_accuracy") != final["mlm_accuracy"]:
                logger.write(step, final, split="eval")
            ckpt.maybe_save_best(step, state, final)
    finally:
        preemption.restore()
        ckpt.close()
        if logger is not None:
            logger.close()
    baseline_batches = int(config.get("baseline_batches", 0))
    if baseline_batches:
        with jax.set_mesh(mesh):
            top, base_acc = unigram_baseline(setup, config, final_phase, eval_targets, baseline_batches)
        final["unigram_baseline_accuracy"] = base_acc
        final["unigram_baseline_token"] = top
    if jax.process_index() == 0:
        lines = [
            f"held-out MLM accuracy: {final['mlm_accuracy']:.4f} "
            f"({int(final['num_predictions'])} masked tokens)",
        ]
        if "unigram_baseline_accuracy" in final:
            lines.append(
                f"unigram baseline (always the most frequent masked token, id "
                f"{final['unigram_baseline_token']}): {final['unigram_baseline_accuracy']:.4f}"
            )
        if setup.nsp:  # without NSP its head is untrained and its accuracy meaningless
            lines.append(f"held-out NSP accuracy: {final['nsp_accuracy']:.4f}")
        lines += [
            f"checkpoints: {workdir}/checkpoints (best: {workdir}/best)",
            f"TensorBoard: tensorboard --logdir {workdir}/tensorboard",
            f"metrics: {workdir}/metrics.jsonl",
        ]
        print("\n".join(lines), flush=True)
    return final
