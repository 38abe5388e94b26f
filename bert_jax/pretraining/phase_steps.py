"""How each pre-training phase's train step saves memory: its remat policy and gradient accumulation.

Phase 1 runs with the run's ``remat_policy`` and ``grad_accum_steps``. Phase 2 (the last
``phase2_fraction`` of steps at ``phase2_max_seq_length``) holds about four times the
activations per row at sequence 512 as at 128, so it may set its own:
``phase2_remat_policy`` ("" = the run's) and ``phase2_grad_accum_steps`` (0 = the run's).
Neither changes the parameters, the optimizer state or the gradient of a step: only what
the step keeps in memory (and, for remat, recomputes).
"""

from __future__ import annotations

import ml_collections

from bert_jax.model.numerics import REMAT_POLICIES

# The keys that set a phase's step, by phase (1 or 2).
KEYS = {1: ("remat_policy", "grad_accum_steps"), 2: ("phase2_remat_policy", "phase2_grad_accum_steps")}


def settings(config: ml_collections.ConfigDict, phase: int) -> tuple[str, int]:
    """(remat policy, gradient-accumulation steps) of phase 1 or 2."""
    remat, accum = str(config.remat_policy), int(config.grad_accum_steps)
    if phase == 2:
        remat = str(config.phase2_remat_policy) or remat
        accum = int(config.phase2_grad_accum_steps) or accum
    return remat, accum


def step_config(config: ml_collections.ConfigDict, phase: int) -> ml_collections.ConfigDict:
    """The config the phase's step is built from: `config` itself when the phase runs with
    the run's settings, else a copy with the phase's as ``remat_policy``/``grad_accum_steps``."""
    remat, accum = settings(config, phase)
    if (remat, accum) == settings(config, 1):
        return config
    out = config.copy_and_resolve_references()
    out.remat_policy, out.grad_accum_steps = remat, accum
    return out


def check(config: ml_collections.ConfigDict) -> None:
    """Refuses, in one line naming the key, a policy that does not exist or an accumulation
    that does not split the global batch (before the run starts, not when phase 2 does)."""
    batch = int(config.global_batch_size)
    for phase, (remat_key, accum_key) in KEYS.items():
        remat = str(config[remat_key])
        if remat not in REMAT_POLICIES and not (phase == 2 and remat == ""):
            raise ValueError(f"config.{remat_key}={remat!r} is not one of {', '.join(REMAT_POLICIES)}")
        accum = int(config[accum_key])
        if accum < (0 if phase == 2 else 1) or (accum and batch % accum):
            raise ValueError(
                f"config.{accum_key}={accum} must split config.global_batch_size={batch} into equal "
                "micro-batches" + (" (0: grad_accum_steps)" if phase == 2 else "")
            )
