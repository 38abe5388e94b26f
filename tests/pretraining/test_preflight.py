"""Before step 1 a run compiles every phase's step and checks it against one device's
memory (here an injected limit between phase 1's and phase 2's needs): a phase 2 the user
set up that does not fit is refused in one line naming `plan`'s fix, as an out-of-memory
exit, with nothing written; a preset's phase 2 trains with that fix (one warning line); the
loop compiles none of the steps the check compiled."""

import re

import jax
import numpy as np
import pytest

from bert_jax.commands import cli, run_settings
from bert_jax.pretraining import preflight, pretrain
from bert_jax.training import engine, exit_codes, sharding
from tests.conftest import tiny_two_phase

BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # JAX's event for each XLA compile


def _config(**overrides):
    # The MLM logits at 20 positions: phase 2 needs ~2x phase 1's memory.
    return tiny_two_phase(**{"global_batch_size": 32, "phase2_max_predictions_per_seq": 20, **overrides})


def _job(config) -> pretrain.Pretraining:
    settings = run_settings.pretrain_settings(config)
    return pretrain.Pretraining(settings, sharding.make_mesh(settings.training.mesh_shape))


@pytest.fixture(scope="module")
def between() -> int:
    """A device memory between what phase 1 (sequence 32) and phase 2 (64) need."""
    job = _job(_config())
    first, second = (preflight.phase_fit(job, n, p, None) for n, p in enumerate(job.run.phases(), 1))
    assert first.peak_bytes < second.peak_bytes
    return (first.peak_bytes + second.peak_bytes) // 2


def test_a_phase2_set_by_the_user_that_does_not_fit_is_refused_before_step_1(
    between, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv(preflight.MEMORY_VARIABLE, str(between))
    workdir = tmp_path / "run"
    with pytest.raises(preflight.PhaseOutOfMemory) as err:
        run_settings.pretrain(_config(phase2_grad_accum_steps=1), str(workdir))
    message = str(err.value)
    assert "\n" not in message and message.startswith("phase 2 (sequence 64, steps 2-4) needs")
    assert "would run out of memory; `bert-jax plan` finds --config.phase2_grad_accum_steps=2 fits" in message
    assert cli.exit_code_for(err.value) == exit_codes.OUT_OF_MEMORY
    assert not workdir.exists() or not list(workdir.iterdir())  # nothing written, no step taken


def test_a_presets_phase2_that_does_not_fit_trains_with_plans_fix(
    between, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv(preflight.MEMORY_VARIABLE, str(between))
    traced = []
    step = engine.train_step

    def spy(state, batch, *, objective, grad_accum_steps, **kw):
        traced.append((batch["input_ids"].shape[1], grad_accum_steps))
        return step(state, batch, objective=objective, grad_accum_steps=grad_accum_steps, **kw)

    monkeypatch.setattr(engine, "train_step", spy)
    result = run_settings.pretrain(_config(), str(tmp_path / "run"))
    assert result.step == 4
    out = capsys.readouterr().out.splitlines()
    warnings = [ln for ln in out if ln.startswith("warning: phase")]
    assert len(warnings) == 1 and "training it with --config.phase2_grad_accum_steps=2" in warnings[0]
    # Each phase's compile says what it compiles before it starts and what it needs after it
    # (phase 2 above the limit: then the warning).
    gib = f"{between / 1024**3:.2f}"
    compiles = [ln for ln in out if "compil" in ln]
    for n, (length, line) in enumerate(zip((32, 64), compiles[::2], strict=True), start=1):
        what = rf"32 x {length} \(\d+ predictions\), remat none, 1 micro-batch"
        assert re.fullmatch(rf"compiling phase {n}'s step: {what} \.\.\.", line), out
    for line in compiles[1::2]:
        assert re.fullmatch(rf"  compiled in \d+\.\d s: \d+\.\d\d of {gib} GiB per device", line), out
    assert len(compiles) == 4, out
    assert out.index(compiles[3]) < out.index(warnings[0])
    # Then the state's initialisation, said before and after, before any step's line.
    begins = out.index("initialising the model and optimizer state (seed 42) ...")  # the preset's
    assert re.fullmatch(r"  initialised in \d+\.\d s", out[begins + 1]), out
    assert out.index(warnings[0]) < begins < min(i for i, ln in enumerate(out) if ln.startswith("step "))
    assert sorted(set(traced)) == [(32, 1), (64, 1), (64, 2)]  # (64, 1): the check's, not run
    assert list((tmp_path / "run" / "compilation_cache").iterdir())  # the check's programs, kept


def test_the_loop_compiles_none_of_the_steps_the_check_compiled(monkeypatch) -> None:
    job = preflight.check(_job(_config()), capacity=None)
    states, batches = [], []
    for number, phase in enumerate(job.run.phases(), 1):
        states.append(job.phase_engine(number).init_state(0))
        rows = next(iter(job.batches(phase, phase.start)))
        batches.append(jax.block_until_ready(rows))
    compiled = []

    def listener(event: str, seconds: float, **kw) -> None:
        if event == BACKEND_COMPILE:
            compiled.append(kw.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        for number, (state, batch) in enumerate(zip(states, batches, strict=True), 1):
            _, metrics = job.phase_engine(number).train_step(state, batch)
            assert np.isfinite(float(metrics["loss"]))
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert compiled == []  # both phases' steps: compiled once, by the check
