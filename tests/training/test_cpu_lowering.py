"""How the pre-training step lowers on XLA:CPU: every weight-gradient matmul row-major.

XLA:CPU gives a dot whose left operand is contracted along its rows (``x^T @ g``, every
weight gradient) to Eigen, built for jaxlib's AVX baseline, and row-major dots to
YNNPACK, which uses AVX-512 where the CPU has it (`ops.dense`). These tests read the
compiled program: with transposed copies no such dot is left at the top level of the
step, and with "direct" every layer has them (so the check can fail). "auto" on a CPU
mesh copies in layers at least 512 wide on both sides only.
"""

from __future__ import annotations

import re

import jax
import numpy as np

from bert_jax.commands import run_settings
from bert_jax.pretraining import pretrain
from bert_jax.training import sharding
from configs import pretrain as pretrain_config

# A 2-D dot (not a [1, n] matrix-vector product) contracting its left operand's rows.
_TRANSPOSED_LHS_DOT = re.compile(r"= f32\[(\d+),(\d+)\]\{[\d,]*\} dot\(.*lhs_contracting_dims=\{0\}")


def _transposed_lhs_dots(weight_grad_matmul: str, hidden: int = 128, min_width: int = 2) -> list[str]:
    c = pretrain_config.get_config("tiny")
    c.data.source = "synthetic"
    c.weight_grad_matmul = weight_grad_matmul
    c.model.hidden_size, c.model.intermediate_size = hidden, 4 * hidden
    mesh = sharding.make_mesh((1, 1, 1), jax.devices("cpu")[:1])  # "auto" follows the mesh
    setup = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    batch = setup.abstract_batch(8, 32, 5)
    with jax.set_mesh(mesh):
        hlo = setup.train_step.lower(setup.abstract_state, batch).compile().as_text()
    entry = hlo[hlo.index("\nENTRY ") :]
    entry = entry[: entry.index("\n}")]  # the step's own instructions, not fusion bodies
    found = []
    for line in entry.splitlines():
        m = _TRANSPOSED_LHS_DOT.search(line)
        if m and min(int(m.group(1)), int(m.group(2))) >= min_width:
            found.append(line.strip()[:160])
    return found


def test_weight_gradients_are_row_major_matmuls_on_cpu() -> None:
    assert _transposed_lhs_dots("transposed_copy") == []
    # 6 dense layers per encoder layer (query, key, value, output, intermediate, output)
    # in each of the tiny model's 2 layers, plus the heads.
    assert len(_transposed_lhs_dots("direct")) >= 12
    # "auto": a 512-wide model copies in every wide layer (the NSP head [512, 2] stays
    # direct); the 128-wide one keeps direct dots.
    assert _transposed_lhs_dots("auto", hidden=512, min_width=512) == []
    assert len(_transposed_lhs_dots("direct", hidden=512, min_width=512)) >= 12
    assert len(_transposed_lhs_dots("auto")) >= 12


def test_the_state_compiled_for_compile_time_is_bitwise_the_default_compiles(monkeypatch) -> None:
    """The initialisation compiles with `engine._RUN_ONCE_OPTIONS` on CPUs (LLVM -O1):
    the same bits as without them, so a seed gives the same run either way."""
    from bert_jax.training import engine

    assert engine._RUN_ONCE_OPTIONS["cpu"] == {"xla_backend_optimization_level": 1}
    c = pretrain_config.get_config("tiny")
    c.data.source = "synthetic"
    mesh = sharding.make_mesh((1, 1, 1), jax.devices("cpu")[:1])
    setup = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)

    def state() -> list[np.ndarray]:
        return [np.asarray(x) for x in jax.tree.leaves(setup.phase_engine(1).init_state(3))]

    fast = state()
    monkeypatch.setattr(engine, "_RUN_ONCE_OPTIONS", {})
    default = state()
    assert len(fast) == len(default) > 10
    for a, b in zip(fast, default, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
