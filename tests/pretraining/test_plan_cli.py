"""`bert-jax plan` prints only its own lines, with or without libtpu installed: none of
libtpu's start-up warnings, a topology it cannot describe in one line listing the shapes
it can, and a missing libtpu in one line saying how to install it. The tiny model's step
compiles in seconds; the real presets' plans are `test_plan.py`'s."""

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# As a user's shell has it: nothing set that quiets JAX, TensorFlow or libtpu.
QUIET_VARS = ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES")
ENV = {k: v for k, v in os.environ.items() if k not in QUIET_VARS}
PLAN = ["plan", "--config=configs/pretrain.py:tiny", "--config.model.hidden_dropout_prob=0"]
PLAN += ["--config.model.attention_probs_dropout_prob=0"]


def bert_jax(*args: str, prelude: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    code = f"import sys\n{prelude}\nfrom bert_jax.commands.cli import run\nrun(['bert-jax', *sys.argv[1:]])\n"
    argv = [sys.executable, "-c", code, *args]
    return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env or ENV, timeout=300)


def test_a_plan_prints_only_its_own_lines(tmp_path) -> None:
    # Twice under a JAX compilation cache the user set: a program compiled for chips this
    # process lacks cannot be loaded back (JAX warned on the second plan), so plan keeps
    # its compiles out of it.
    env = {**ENV, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax_cache")}
    for topology in ("v5e:2x2", "v5litepod-4"):  # the second as gcloud's accelerator type
        proc = bert_jax(*PLAN, f"--topology={topology}", env=env)
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-3000:]
        lines = proc.stdout.splitlines()
        # The compile says what it compiles before it starts and what it found after it; then
        # the report.
        assert (
            lines[0]
            == "compiling the step for v5e:2x2: 8 x 64 (10 predictions), remat none, 1 micro-batch ..."
        )
        assert re.fullmatch(r"  compiled in \d+\.\d s: 0\.\d\d GiB per chip, fits", lines[1]), proc.stdout
        assert lines[2] == "topology                   v5e:2x2 (4 chips used, TPU v5 lite)", proc.stdout
        assert lines[-1].startswith("compile time ")


def test_a_topology_libtpu_cannot_describe_is_one_line_listing_the_shapes() -> None:
    proc = bert_jax(*PLAN, "--topology=v5e:3x7")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "bert-jax plan: error: --topology v5e:3x7: libtpu describes slices of whole 2x2-chip hosts, so "
        "the first two sizes must be even, e.g. v5e:2x2, v5e:2x4, v5e:4x4, v5e:4x8, v5e:8x8, v5e:8x16, "
        "v5e:16x16  [BERT_JAX_DEBUG=1 for the traceback]"
    ]
    proc = bert_jax(*PLAN, "--topology=v4:2x3x4")
    assert proc.returncode == 1 and len(proc.stderr.splitlines()) == 1 and "v4:2x2x4, " in proc.stderr


def test_without_libtpu_one_line_says_how_to_install_it(monkeypatch) -> None:
    """libtpu absent (its module not found, JAX unable to describe a TPU slice): the one line
    that says how to install it. (Hiding libtpu from a subprocess by `sys.modules` alone was
    not reliable beside other plan tests, so the absence is simulated where plan looks.)"""
    import importlib.util

    from bert_jax.pretraining import plan_compile

    def no_tpu(**_):
        raise RuntimeError("Unable to initialize backend 'tpu'")

    monkeypatch.setattr(plan_compile.topologies, "get_topology_desc", no_tpu)
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "libtpu" else real_find_spec(name, *a)
    )
    with pytest.raises(plan_compile.NoTpuCompiler) as e:
        plan_compile.topology_devices("v5e:2x2")
    assert str(e.value) == (
        "plan compiles with the TPU compiler, libtpu, which is not installed: "
        "pip install -e '.[tpu]' (libtpu matching jax)"
    )
