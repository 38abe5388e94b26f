"""Pre-training (Devlin et al., 2019, §3.1 and §A.2): what `bert-jax pretrain` runs.

`train_and_evaluate(config, workdir)` trains `PretrainingObjective` (`objective.py`)
with the engine (`training/engine.py`, `training/loop.py`) on the configured data
(`data/sources.py`; masking on the devices, `data/masking.py`). Running it again with the
same workdir resumes from the latest checkpoint, with exactly the batches an
uninterrupted run would have seen (the input pipeline is positioned by step).

The paper's two-phase schedule (90% of steps at sequence 128, then 512) is
``config.phase2_fraction`` > 0: the second phase re-creates the data iterator at
``phase2_max_seq_length`` and the jitted step recompiles for the new shapes; parameters
(including the 512-row position table) and optimizer state carry over untouched. Every
phase's step is compiled before step 1 and checked against device memory (`preflight`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from bert_jax.data import masking, records, run_vocabulary, sources, tokenization
from bert_jax.data.settings import DataSettings
from bert_jax.model.flops import model_flops_per_step
from bert_jax.model.heads import BertForPreTraining
from bert_jax.pretraining import batch_memory, evaluation, init_checkpoint, model_file, model_vocab, preflight
from bert_jax.pretraining.objective import (
    BATCH_KEYS,
    Batch,
    PretrainingObjective,
    batch_shapes,
)
from bert_jax.pretraining.settings import Phase, PretrainSettings
from bert_jax.storage import atomic_files, files
from bert_jax.training import compile_cache, engine, multihost, run_config, sharding
from bert_jax.training.hooks import Hook, default_hooks
from bert_jax.training.loop import StopRequested, TrainingRun
from bert_jax.training.results import JobResult


class Pretraining:
    """The model, objective, engine and batch placement of one pre-training run on a mesh.

    Everything is derived from (settings, mesh); works on real devices and on a TPU
    topology description (`plan`) alike.
    """

    def __init__(self, run: PretrainSettings, mesh: Mesh) -> None:
        self.run, self.mesh = run, mesh
        self.settings = run.training
        self.model_config = run.model
        self.numerics = self.settings.numerics.for_platform(engine.platform(mesh))
        self.data = run.data
        self.nsp = self.data.nsp
        model = BertForPreTraining(self.model_config, self.numerics)
        self.objective = PretrainingObjective(model, self.nsp)
        tx, schedule = self.settings.optimization.build(run.num_train_steps)
        self.engine = engine.Engine(
            objective=self.objective,
            init_params=self.objective.init_params,
            tx=tx,
            schedule=schedule,
            mesh=mesh,
            rules=sharding.rules_with_overrides(self.settings.sharding_rules),
            grad_accum_steps=self.settings.grad_accum_steps,
        )

    @functools.lru_cache(maxsize=2)  # noqa: B019 (one engine per phase, per run)
    def phase_engine(self, phase: int) -> engine.Engine:
        """The engine of phase 1's or 2's step (`PretrainSettings.phase_step`: phase 2's own
        remat policy / accumulation, when set), built once: the preflight compiles with it
        and the loop runs it."""
        step_settings = self.run.for_phase(phase)
        return self.engine if step_settings is self.run else Pretraining(step_settings, self.mesh).engine

    @functools.lru_cache(maxsize=4)  # noqa: B019 (one masker per prediction count, per run)
    def masker(self, max_predictions: int) -> Any:
        """The data config's masking, jitted over the mesh."""
        spec, table = run_vocabulary.masking_spec(self.data, max_predictions)
        fn = functools.partial(masking.mask_batch, spec=spec, is_continuation=table)
        out = {
            k: sharding.batch_sharding(self.mesh, 1 if k == "next_sentence_labels" else 2) for k in BATCH_KEYS
        }
        return jax.jit(fn, out_shardings=out)

    def global_batch(self, local: dict[str, np.ndarray], max_predictions: int | None = None) -> Batch:
        """This host's rows → the global batch on the mesh.

        Unmasked rows (prepared data) are masked on the devices here, for `max_predictions`
        predictions per sequence; already masked rows (TFRecords, synthetic) pass through.
        """
        raw = "masked_lm_positions" not in local
        keys = masking.RAW_KEYS if raw else BATCH_KEYS
        out = self.engine.place({k: local[k] for k in keys}, process_local=True)
        if not raw:
            return out
        if max_predictions is None:
            raise ValueError("unmasked rows need max_predictions to be masked")
        return self.masker(max_predictions)(out)

    # What `plan` and the lowering tests read: the engine's state and step, for this objective.
    abstract_state = property(lambda self: self.engine.abstract_state)
    state_shardings = property(lambda self: self.engine.state_shardings)
    train_step = property(lambda self: self.engine.train_step)

    def abstract_batch(self, global_batch_size: int, max_seq_length: int, max_predictions: int) -> dict:
        """A masked global batch as sharded ShapeDtypeStructs."""
        return self.engine.abstract_batch(batch_shapes(global_batch_size, max_seq_length, max_predictions))

    def compile_train_step(self, global_batch_size: int, max_seq_length: int, max_predictions: int) -> Any:
        """Ahead-of-time compiled train step for abstract inputs (used by `plan`)."""
        return self.engine.compile_train_step(
            self.abstract_batch(global_batch_size, max_seq_length, max_predictions)
        )

    def eval_batches(self, phase: Phase) -> Iterator[Batch]:
        """The held-out split at the phase's length: one pass, fixed masks, global batches."""
        it = data_iterator(
            self.run,
            split="eval",
            max_seq_length=phase.max_seq_length,
            max_predictions_per_seq=phase.max_predictions_per_seq,
            global_batch_size=self.run.eval_batch,
        )
        return (self.global_batch(local, phase.max_predictions_per_seq) for local in it)

    def batches(self, phase: Phase, start_step: int) -> Iterator[Batch]:
        """Training batches of the phase from global step `start_step` on."""
        it = data_iterator(
            self.run,
            split="train",
            max_seq_length=phase.max_seq_length,
            max_predictions_per_seq=phase.max_predictions_per_seq,
            start_step=start_step - phase.start,
        )
        return (self.global_batch(local, phase.max_predictions_per_seq) for local in it)


def data_iterator(
    run: PretrainSettings,
    *,
    split: str,
    max_seq_length: int,
    max_predictions_per_seq: int,
    start_step: int = 0,
    global_batch_size: int | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """Host-local batches of the run's data (`sources.batches`), positioned at `start_step`."""
    return sources.batches(
        run.data,
        seed=run.seed,
        eval_steps=run.eval_steps,
        vocab_size=run.model.vocab_size,
        split=split,
        global_batch_size=global_batch_size or run.global_batch_size,
        max_seq_length=max_seq_length,
        max_predictions_per_seq=max_predictions_per_seq,
        start_step=start_step,
    )


def check_run(settings: PretrainSettings) -> None:
    """Everything about the run's settings that can refuse it, before anything is written:
    `check_recipe` (contradictory switches, before a vocabulary is learned), its batches
    against this host's and devices' memory (`batch_memory`), then the vocabulary
    (learned once where the data config learns one, its TFDS corpus built first on one host
    only, `run_vocabulary.vocab_file_of`; `model_vocab.check_run_size`: an explicit size
    the tokenizer's ids do not fit refused, one far larger said)."""
    check_recipe(settings)
    batch_memory.check(settings, sharding.make_mesh(settings.training.mesh_shape))
    run_vocabulary.vocab_file_of(settings.data, hosts=jax.process_count())  # learned here, if it is
    unused = model_vocab.check_run_size(settings.model.vocab_size, settings.data)
    if unused and jax.process_index() == 0:
        print(f"warning: {unused}", flush=True)


def check_recipe(run: PretrainSettings) -> None:
    """Refuses, with one line naming the keys, a recipe whose switches contradict each
    other; warns when the prediction budget caps the masking rate, as the original's
    `max_predictions_per_seq` silently does."""
    data = run.data
    if data.objective == "ltr" and not run.model.causal_attention:
        raise ValueError(
            "config.data.objective='ltr' needs --config.model.causal_attention=True "
            "(a bidirectional model would see the tokens it predicts)"
        )
    if data.full_sentences and data.nsp:
        raise ValueError(
            "config.data.full_sentences=True packs rows without sentence pairs: set --config.data.nsp=False"
        )
    for phase in run.phases():
        wanted = round((phase.max_seq_length - 2) * data.masked_lm_prob)
        if data.objective == "mlm" and phase.max_predictions_per_seq < wanted and jax.process_index() == 0:
            key = "max_predictions_per_seq" if phase.start == 0 else "phase2_max_predictions_per_seq"
            print(
                f"warning: config.data.masked_lm_prob={data.masked_lm_prob} masks up to {wanted} of "
                f"{phase.max_seq_length} tokens; config.{key}={phase.max_predictions_per_seq} caps it "
                f"(set --config.{key}={wanted} for the full rate)",
                flush=True,
            )


def check_data(run: PretrainSettings) -> bool:
    """Opens the train and held-out data of every phase (preparing a built-in source on
    first use), so that a run whose data cannot serve it is refused before it starts.
    Returns whether there is held-out data; without it the run trains without evaluation
    (as the original `run_pretraining.py` without ``--do_eval``), saying so in one line."""
    held_out = True
    for phase in run.phases():
        for split in ("train", "eval"):
            try:
                it = data_iterator(
                    run,
                    split=split,
                    max_seq_length=phase.max_seq_length,
                    max_predictions_per_seq=phase.max_predictions_per_seq,
                    global_batch_size=run.eval_batch if split == "eval" else None,
                )
                next(iter(it))
            except records.NoHeldOutData as e:
                held_out = False
                if jax.process_index() == 0:
                    print(
                        f"warning: {e}: training without held-out evaluation (no best/ checkpoint)",
                        flush=True,
                    )
                continue
            getattr(it, "close", lambda: None)()
    return held_out


def keep_vocab(data: DataSettings, workdir: str) -> None:
    """Copies the tokenizer's file into the workdir (``vocab.txt``, ``spm.model`` or
    ``tokenizer.json``: `tokenization.saved_name`) and, beside a vocab.txt or spm.model, the
    casing it was trained with (``tokenizer_config.json``: `tokenization.CASING_FILE`; a
    tokenizer.json holds its own), so the workdir is a complete checkpoint for `finetune`,
    `features` and `convert` without remembering which vocab it was trained with, or how."""
    if data.source == "synthetic" or jax.process_index() != 0:
        return
    src = run_vocabulary.tokenizer_of(data).vocab_file
    name = tokenization.saved_name(src)
    dst = files.join(workdir, name)
    if not files.exists(dst):
        files.copy_file(src, dst)  # whole: readers never see half a vocabulary
    record = files.join(workdir, tokenization.CASING_FILE)
    if name != "tokenizer.json" and not files.exists(record):
        atomic_files.write_json(record, {"do_lower_case": data.lower_case}, indent=2)


def saved_step(workdir: str) -> int:
    """The newest step saved in the workdir's ``checkpoints/`` by its folder's name (0 with
    none): the phases it ends after are done, and the memory check compiles none of them
    (a rerun of a finished run compiles no step). Should that step not restore (damaged:
    the run falls back to an older one), a phase left to train compiles at its first step,
    without the check."""
    names = (os.path.basename(p.rstrip("/")) for p in files.glob(files.join(workdir, "checkpoints", "*")))
    return max((int(n) for n in names if n.isdigit()), default=0)


RUN_CONFIG = "run_config.json"  # in the workdir: the config the run started with, as written
# Keys that say how a run is carried out (logging, saving, evaluating, kernels, layout,
# memory savers, the mesh), not what it trains: a resume may change them without a word.
NOT_COMPARED = (
    "preset", "log_every_steps", "checkpoint_every_steps", "keep_checkpoints", "async_checkpointing",
    "stop_after_step", "compilation_cache_dir", "eval_every_steps", "eval_steps", "eval_batch_size",
    "baseline_batches", "attention_kernel", "norm_kernel", "layer_loop", "remat_policy",
    "phase2_remat_policy", "weight_grad_matmul", "bias_grad", "mesh_shape", "sharding_rules",
    "grad_accum_steps", "phase2_grad_accum_steps", "data.cache_dir",
)  # fmt: skip


def keep_run_config(settings: PretrainSettings, workdir: str, shown: str, resumed_at: int | None) -> None:
    """Writes the config as written (`RUN_CONFIG`; process 0) where the workdir has none. A
    run resumed (at step `resumed_at`) with a config that trains otherwise than the one the
    workdir started with (a longer run, another learning rate: the schedule is recomputed
    from the new values) says so in one warning line naming the keys; it is not refused."""
    if jax.process_index() != 0:
        return
    path = files.join(workdir, RUN_CONFIG)
    recorded = files.read_json_if_exists(path)
    if recorded is None:
        atomic_files.write_json(path, settings.config, indent=1, sort_keys=True, default=str)
        return
    changes = run_config.changed_keys(recorded, settings.config, NOT_COMPARED)
    if resumed_at is not None and changes:
        more = f"; and {len(changes) - 4} more" if len(changes) > 4 else ""
        print(
            f"warning: {shown} started with another config ({'; '.join(changes[:4])}{more}); resumed at "
            f"step {resumed_at}, the run goes on with this one (its {RUN_CONFIG} keeps the first)",
            flush=True,
        )


def train_phases(job: Pretraining, loop: TrainingRun, state: Any, hooks: Sequence[Hook]) -> Any:
    """Trains every phase not yet done (each its own data and compiled shapes)."""
    batch = job.run.global_batch_size
    for phase in job.run.phases():
        step = int(jax.device_get(state.step))
        if step >= phase.end:
            continue
        step_engine = job.phase_engine(2 if phase.start else 1)  # the engine `preflight` compiled
        flops = model_flops_per_step(
            job.model_config, batch, phase.max_seq_length, phase.max_predictions_per_seq, job.nsp
        )
        state = loop.steps(
            step_engine,
            state,
            job.batches(phase, step),
            end=phase.end,
            flops=lambda _, flops=flops: flops,
            hooks=hooks,
            extra_metrics={"max_seq_length": phase.max_seq_length},
        )
    return state


def fresh_state(job: Pretraining) -> Any:
    """Step 0's state, a line before it and one with its time after (its program draws
    every parameter: BERT-Base's takes ~13 s on this project's CPU before step 1)."""
    say, start = jax.process_index() == 0, job.run.init_checkpoint
    if say:
        seed = job.settings.seed
        weights = f"from {start} and the optimizer state" if start else f"and optimizer state (seed {seed})"
        print(f"initialising the model {weights} ...", flush=True)
    began = time.perf_counter()
    params = init_checkpoint.starting_params(job, start, job.settings.seed) if start else None
    state = jax.block_until_ready(job.engine.init_state(job.settings.seed, params))
    if say:
        print(f"  initialised in {time.perf_counter() - began:.1f} s", flush=True)
    return state


def keep_layer_loop(settings: PretrainSettings, workdir: str, shown: str, mesh: Mesh) -> PretrainSettings:
    """The settings with ``layer_loop="auto"`` decided as the workdir's checkpoints were
    saved (scanned or unrolled; `model_file.layer_loop`, which refuses an explicit loop they
    do not have); one warning line where that is not the platform's choice."""
    numerics = settings.training.numerics
    loop = model_file.layer_loop(workdir, numerics.layer_loop)
    if loop == numerics.layer_loop:
        return settings
    platforms = numerics.for_platform(engine.platform(mesh)).layer_loop
    if loop != platforms and jax.process_index() == 0:
        kind = "scanned" if loop == "scan" else "unrolled"
        print(
            f"warning: layer_loop=auto: {shown} holds checkpoints of {kind} layers, so this run keeps "
            f"them {kind} (a new workdir gets layer_loop={platforms} here)",
            flush=True,
        )
    return settings.with_numerics(layer_loop=loop)


def train_and_evaluate(settings: PretrainSettings, workdir: str) -> JobResult:
    """Trains (or resumes) to ``num_train_steps``; returns the last step and the final
    held-out metrics (``held_out=False`` and no metrics when the data has no held-out split;
    ``stopped`` when ``stop_after_step`` ended the run first)."""
    shown = files.as_given(workdir)  # what the summary names: the workdir as the user gave it
    workdir = files.resolve(workdir)  # orbax wants absolute paths; gs:// stays as it is
    # Everything that can refuse the run comes before anything is written to the workdir.
    files.check_reachable(workdir, "--workdir", writable=True)  # before a vocabulary is learned
    check_run(settings)
    multihost.check_same_run(settings.config)
    mesh = sharding.make_mesh(settings.training.mesh_shape)
    phase_numbers = range(1, len(settings.phases()) + 1)
    sharding.check_batches(
        mesh,
        {"global_batch_size": settings.global_batch_size, "eval_batch_size": settings.eval_batch},
        {"global_batch_size": sorted({settings.phase_step(p).grad_accum_steps for p in phase_numbers})},
    )
    settings = keep_layer_loop(settings, workdir, shown, mesh)
    job = Pretraining(settings, mesh)
    model_file.check(workdir, job.model_config)
    held_out = check_data(settings)  # whether the data has a held-out split
    compile_cache.check(settings.compilation_cache_dir)
    with compile_cache.staged(settings.compilation_cache_dir, workdir) as compiled:
        # Every phase still to train compiled: refused, or fitted, if one would not fit.
        job = preflight.check(job, done=saved_step(workdir))
    settings = job.run
    final_phase = settings.phases()[-1]
    keys = ("mlm_accuracy", "nsp_accuracy") if job.nsp else ("mlm_accuracy",)
    try:
        total = settings.num_train_steps
        with contextlib.ExitStack() as stack:
            stack.callback(compiled.discard)  # refused below: the preflight's programs go too
            loop = stack.enter_context(
                TrainingRun(
                    workdir,
                    job.settings,
                    total_steps=total,
                    best_metric=keys[0],
                    restore_transform=model_file.restore_transform(workdir),
                )
            )
            state, resumed = loop.restore_or_init(job.engine, functools.partial(fresh_state, job))
            # The run is accepted: from here on it writes to the workdir, its compiled programs
            # included (a restart compiles nothing anew).
            model_file.write(workdir, job.model_config, job.numerics.scanned)
            keep_vocab(settings.data, workdir)
            keep_run_config(settings, workdir, shown, loop.last_saved if resumed else None)
            if resumed and loop.last_saved >= total and jax.process_index() == 0:
                print(
                    f"the run finished at step {loop.last_saved} (num_train_steps={total}): nothing to "
                    "train; its last step is evaluated (a larger num_train_steps trains further)",
                    flush=True,
                )
            stack.enter_context(compile_cache.use(settings.compilation_cache_dir, workdir))
            compiled.publish()  # the preflight's programs, into the run's cache
            periodic_eval = evaluation.PeriodicEval(job)
            ends = tuple(phase.end for phase in settings.phases())  # each phase's last step is logged
            hooks = default_hooks(job.settings, total_steps=total, console_keys=keys, ends=ends)
            state = train_phases(job, loop, state, [*hooks, periodic_eval.hook()] if held_out else hooks)
            step = loop.finish(state)
            if not held_out:
                evaluation.report_without_held_out(shown, step)
                return JobResult(step=step, held_out=False)
            # The last step's: evaluated once, by the hook (or now, if no step ran here).
            final, eval_targets = periodic_eval.final(loop.context(state))
    except StopRequested as stop:
        return JobResult.stopped_at(stop.step)
    if settings.baseline_batches:
        with jax.set_mesh(job.mesh):
            top, acc, loss = evaluation.unigram_baseline(
                job, final_phase, eval_targets, settings.baseline_batches
            )
        final["unigram_baseline_token"] = top
        if settings.data.source != "synthetic":
            final["unigram_baseline_piece"] = run_vocabulary.tokenizer_of(job.data).vocab[top]
        final["unigram_baseline_accuracy"], final["unigram_baseline_loss"] = acc, loss
    evaluation.report(final, workdir, job.nsp, shown)
    return JobResult(step=step, metrics=final)
