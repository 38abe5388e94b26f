"""What would make a phase that does not fit fit: candidate settings, compiled until one fits.

A phase's step saves memory by gradient accumulation (``grad_accum_steps``: the same
global batch in k micro-batches, the same FLOPs, about 1/k of the activations) or by
rematerialisation (``remat_policy``: activations recomputed in the backward pass, more
FLOPs). The candidates, cheapest first and at most `MAX_TRIES`:

1. the smallest accumulation (a power of two times the phase's) whose activations, scaled
   from the compiler's figure for the phase, fit beside the state, and twice that;
2. the remat policies that keep less than the phase's, from the least recomputation to
   the most (``dots``, ``selective``, ``dots_no_batch``, ``full``: BERT-Base's step at 512
   on v5e:2x2 does 0.5%, 2.1%, 3.7% and 32% more FLOPs than with none, and keeps 17.7,
   14.2, 11.4 and 4.9 GiB a chip of 33.5);
3. ``full`` remat with that accumulation.

Each is compiled for the slice (`plan`); the first that fits is the answer. Only settings
that split the global batch into micro-batches the mesh's batch axes divide are tried.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from bert_jax.pretraining.settings import PHASE_KEYS

MAX_TRIES = 4
# Least to most recomputation (and least to most memory saved).
REMAT_ORDER = ("none", "dots", "selective", "dots_no_batch", "full")


@dataclasses.dataclass
class Trial:
    """One setting compiled for a phase that did not fit. Bytes are per chip."""

    keys: dict[str, object]  # the config keys that set it, e.g. {"phase2_grad_accum_steps": 4}
    remat_policy: str
    grad_accum_steps: int
    hbm_per_chip_bytes: int
    fits: bool
    est_step_time_s: float  # 0.0 when it does not fit (not estimated)
    compile_time_s: float


@dataclasses.dataclass(frozen=True)
class Room:
    """What a phase's step needs and has, per device, as the compiler reported it."""

    temp_bytes: int  # activations and temporaries of the step as it is
    state_bytes: int  # arguments (state and batch) and outputs not aliased to them
    capacity_bytes: int  # HBM of one device
    global_batch_size: int
    batch_shards: int  # devices the batch is split over (the mesh's data x fsdp)


def _accumulation(accum: int, room: Room) -> int | None:
    """The smallest power-of-two multiple of `accum` whose activations (scaled down from
    the phase's) fit beside the state; None when no split of the batch gets there."""
    free = room.capacity_bytes - room.state_bytes
    k = accum * 2
    while _splits(k, room):
        if room.temp_bytes * accum / k <= free:
            return k
        k *= 2
    return None


def _splits(k: int, room: Room) -> bool:
    """Whether k micro-batches are equal and each still covers every batch shard."""
    batch = room.global_batch_size
    return batch % k == 0 and (batch // k) % room.batch_shards == 0


def candidates(remat: str, accum: int, room: Room) -> list[tuple[str, int]]:
    """(remat policy, accumulation) settings to compile, cheapest first (module docstring)."""
    if room.state_bytes >= room.capacity_bytes:
        return []  # the state alone does not fit: only more chips help
    out: list[tuple[str, int]] = []
    k = _accumulation(accum, room)
    if k is not None:
        out.append((remat, k))
        if _splits(2 * k, room):
            out.append((remat, 2 * k))
    out += [(p, accum) for p in REMAT_ORDER[REMAT_ORDER.index(remat) + 1 :]]
    if k is not None and remat != "full":
        out.append(("full", k))
    return out[:MAX_TRIES]


def keys_for(phase: int, remat: str, accum: int, current: tuple[str, int]) -> dict[str, object]:
    """The config keys (and values) that give phase `phase` this setting instead of `current`."""
    remat_key, accum_key = PHASE_KEYS[phase]
    keys: dict[str, object] = {}
    if remat != current[0]:
        keys[remat_key] = remat
    if accum != current[1]:
        keys[accum_key] = accum
    return keys


def search(
    phase: int,
    current: tuple[str, int],
    room: Room,
    try_setting: Callable[[str, int], tuple[int, bool, float]],
    step_time: Callable[[str, int], float],
) -> list[Trial]:
    """Compiles the candidates in order until one fits; returns every trial (the last one
    fits if any does). `try_setting(remat, accum)` compiles the phase's step with them and
    returns (HBM per chip, fits, compile seconds); `step_time(remat, accum)` estimates it."""
    trials = []
    for remat, accum in candidates(*current, room):
        hbm, fits, seconds = try_setting(remat, accum)
        trials.append(
            Trial(
                keys=keys_for(phase, remat, accum, current),
                remat_policy=remat,
                grad_accum_steps=accum,
                hbm_per_chip_bytes=hbm,
                fits=fits,
                est_step_time_s=step_time(remat, accum) if fits else 0.0,
                compile_time_s=seconds,
            )
        )
        if fits:
            break
    return trials
