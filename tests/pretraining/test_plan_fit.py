"""`plan_fit`: which settings a phase that does not fit is compiled with, in which order,
and when the search stops (the compiles themselves are `test_plan.py`'s)."""

import pytest

from bert_jax.pretraining import plan_fit

GIB = 1024**3


def _room(temp_gib, state_gib=0.5, batch=256, shards=4, capacity_gib=16):
    return plan_fit.Room(
        temp_bytes=int(temp_gib * GIB),
        state_bytes=int(state_gib * GIB),
        capacity_bytes=capacity_gib * GIB,
        global_batch_size=batch,
        batch_shards=shards,
    )


def test_candidates_start_at_the_accumulation_the_memory_suggests_then_remat_cheapest_first() -> None:
    # 33 GiB of activations beside 0.5 of state in 16: halves leave 16.5 (too much), quarters 8.25.
    assert plan_fit.candidates("none", 1, _room(33)) == [
        ("none", 4),
        ("none", 8),
        ("dots", 1),
        ("selective", 1),
    ]
    # A run already in 2 micro-batches doubles from there; a policy already on is not retried.
    assert plan_fit.candidates("dots", 2, _room(33)) == [
        ("dots", 8),
        ("dots", 16),
        ("selective", 2),
        ("dots_no_batch", 2),
    ]
    assert len(plan_fit.candidates("none", 1, _room(1000))) <= plan_fit.MAX_TRIES


def test_candidates_skip_splits_the_batch_axes_cannot_cover() -> None:
    # 64 rows over 16 batch shards: at most 4 micro-batches of 16; 33 GiB needs 4, 8 is not tried.
    room = _room(33, batch=64, shards=16)
    assert plan_fit.candidates("none", 1, room) == [
        ("none", 4),
        ("dots", 1),
        ("selective", 1),
        ("dots_no_batch", 1),
    ]
    # 200 GiB would need 16: no split of 64 rows over 16 shards gets there, only remat is left.
    assert plan_fit.candidates("none", 1, _room(200, batch=64, shards=16)) == [
        ("dots", 1),
        ("selective", 1),
        ("dots_no_batch", 1),
        ("full", 1),
    ]
    # The state alone fills the chip: nothing to try.
    assert plan_fit.candidates("none", 1, _room(5, state_gib=17)) == []


def test_search_compiles_in_order_until_one_fits_and_names_the_phases_keys() -> None:
    compiled = []

    def try_setting(remat, accum):
        compiled.append((remat, accum))
        hbm = int((20 if remat == "none" else 10) * GIB / accum)
        return hbm, hbm <= 16 * GIB, 1.5

    trials = plan_fit.search(2, ("none", 1), _room(80), try_setting, lambda remat, accum: 0.25)
    # 80 GiB needs 8 micro-batches (10 GiB each beside the state): tried first, and it fits.
    assert compiled == [("none", 8)]
    assert trials[-1].fits and trials[-1].keys == {"phase2_grad_accum_steps": 8}
    assert trials[-1].est_step_time_s == 0.25

    compiled.clear()
    refuse_accumulation = lambda remat, accum: (
        int((40 if remat != "full" else 12) * GIB),
        remat == "full",
        2.0,
    )
    trials = plan_fit.search(1, ("none", 1), _room(33), refuse_accumulation, lambda r, a: 0.5)
    assert [(t.remat_policy, t.grad_accum_steps) for t in trials] == [
        ("none", 4),
        ("none", 8),
        ("dots", 1),
        ("selective", 1),
    ]
    assert not any(t.fits for t in trials) and all(t.est_step_time_s == 0.0 for t in trials)
    assert trials[2].keys == {"remat_policy": "dots"}  # phase 1's keys are the run's


@pytest.mark.parametrize(
    "phase, keys",
    [(1, ("remat_policy", "grad_accum_steps")), (2, ("phase2_remat_policy", "phase2_grad_accum_steps"))],
)
def test_keys_name_only_what_changes(phase, keys) -> None:
    assert plan_fit.keys_for(phase, "full", 1, ("none", 1)) == {keys[0]: "full"}
    assert plan_fit.keys_for(phase, "none", 4, ("none", 1)) == {keys[1]: 4}
    assert plan_fit.keys_for(phase, "full", 2, ("none", 1)) == {keys[0]: "full", keys[1]: 2}
