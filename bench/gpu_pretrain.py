"""Pre-training step on one NVIDIA GPU: bert_jax against PyTorch (eager and `torch.compile`).

The full step (forward, backward, gradient clipping, AdamW update), bfloat16 compute, on
the shapes the recipes pre-train at (`SHAPES`):

- ``128``: BERT-Base (`configs/pretrain.py:base`), batch 256 x 128, MLM at 20 positions +
  NSP, the paper's recipe (dropout 0.1 in attention and hidden layers);
- ``128-nodrop``: the same with no dropout (the recipe of Cramming and ModernBERT);
- ``512``: BERT-Base's phase 2, batch 64 x 512, 80 predictions, the paper's recipe;
- ``modernbert-1024``: ModernBERT-base (`configs/pretrain.py:modernbert-base`), batch 32
  x 1,024, 30% masking, no NSP, local/global attention (window 128 in two layers of three).

Contenders, each in its own process, taking turns for ``--rounds`` rounds (best round each):

- ``bert_jax``: its `Pretraining` step from the shape's run preset, as a user gets it
  (`attention_kernel=auto`, the preset's dtype and layer scan); ``--set KEY=VALUE``
  changes its run config; ``--variant NAME:KEYS`` adds a bert_jax contender with other
  keys or XLA flags (``xla_flags=...``), to measure a change before making it a default;
- ``torch``: `transformers`' `BertForPreTraining` / `ModernBertForMaskedLM`
  (`sparse_prediction=True`, as ModernBERT trains) of the same shape and dropout, SDPA
  attention, bfloat16 autocast, fused AdamW, clipping at 1.0: what a user of that library
  runs;
- ``torch_compile``: the same model under `torch.compile` (default mode).

Every step's loss is read to the host, once the next step is queued (``--read_loss late``,
as a training loop that logs every step can; ``each``: before the next step is queued, which
leaves the device idle while the host reads the value and queues the next step), the same
for every contender.

MFU is each contender's model FLOPs (bert_jax and the sparse ModernBERT head: MLM logits
at the masked positions only; `BertForPreTraining`: at every position) over the bfloat16
matmul rate measured in the same run (8192^3, XLA) and over the GPU's dense bf16 peak.

    python bench/gpu_pretrain.py [--steps 10] [--rounds 1] [--only 512,modernbert-1024]
                                 [--contenders bert_jax,torch] [--set KEY=VALUE] [--tiny]
                                 [--variant NAME:KEY=VALUE[;KEY=VALUE]] [--read_loss late|each]

``--tiny`` runs every shape at a tiny width, length and batch (a CPU check that the
script and each contender work; its figures mean nothing). The last lines are
``ratio_<shape>=<x>`` (bert_jax's tokens/s over the best PyTorch contender's) and
``mfu_<shape>=<x>`` (bert_jax's MFU against the measured matmul rate); each shape's two
also follow its table, so a run stopped by a time limit keeps those of the shapes it ended.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import workers  # noqa: E402


class Shape(NamedTuple):
    preset: str  # configs/pretrain.py
    batch: int
    seq: int
    masked: int  # predictions per sequence
    changes: dict[str, Any]  # run-config keys on top of the preset
    title: str


_NO_DROPOUT = {"model.hidden_dropout_prob": 0.0, "model.attention_probs_dropout_prob": 0.0}
SHAPES = {
    "128": Shape("base", 256, 128, 20, {}, "BERT-Base, paper recipe (dropout 0.1)"),
    "128-nodrop": Shape("base", 256, 128, 20, _NO_DROPOUT, "BERT-Base, no dropout"),
    "512": Shape("base", 64, 512, 80, {}, "BERT-Base phase 2, paper recipe (dropout 0.1)"),
    "modernbert-1024": Shape("modernbert-base", 32, 1024, 308, {}, "ModernBERT-base, 30% masking, no NSP"),
}
CONTENDERS = ("bert_jax", "torch", "torch_compile")
READ_LOSS = {"late": "once the next step is queued", "each": "before the next step"}
TORCH = ("torch", "torch_compile")
# --tiny: every shape at this width (a check of the script, not a measurement).
_TINY_MODEL = {
    "model.hidden_size": 64,
    "model.num_hidden_layers": 3,
    "model.num_attention_heads": 2,
    "model.intermediate_size": 128,
    "model.vocab_size": 1024,
}


def run_config(shape: Shape, tiny: bool, changes: dict[str, Any]):
    """The shape's run config: its preset, one device, synthetic rows, one (micro-)batch."""
    from bert_jax.training import run_config as rc
    from configs import pretrain as pretrain_config

    batch, seq, masked = shape.batch, shape.seq, shape.masked
    if tiny:
        batch, seq, masked = 2, shape.seq // 4, -(-shape.masked // 4)
    c = pretrain_config.get_config(shape.preset)
    rc.set_keys(c, {**shape.changes, **(_TINY_MODEL if tiny else {})})
    keys = {
        "data.source": "synthetic",
        "global_batch_size": batch,
        "max_seq_length": seq,
        "max_predictions_per_seq": masked,
        "model.max_position_embeddings": max(seq, c.model.max_position_embeddings),
        "grad_accum_steps": 1,
        "phase2_fraction": 0.0,
        "phase2_grad_accum_steps": 0,
        "mesh_shape": (1, 1, 1),
        "warmup_steps": 10,
        "warmup_proportion": 0.0,
    }
    rc.set_keys(c, {**keys, **changes})
    return c


def _bert_jax_step(c) -> tuple[Any, float]:
    from bench import peers
    from bert_jax.commands import run_settings

    return peers.bert_jax_step(run_settings.pretrain_settings(c))


def _torch_step(c, compiled: bool) -> tuple[Any, float]:
    import torch

    from bench import peers
    from bert_jax.commands import run_settings
    from bert_jax.convert import layout
    from bert_jax.model import flops

    settings = run_settings.pretrain_settings(c)
    config, nsp = settings.model, settings.data.nsp
    batch, seq, masked = c.global_batch_size, c.max_seq_length, c.max_predictions_per_seq
    data = peers.random_batch(config, batch, seq, masked)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    step = peers.torch_step(config, data, device=device, bf16=True, compiled=compiled)
    if layout.hf_family(config) == "modernbert":  # the sparse head: logits at the masked positions
        model_flops = flops.model_flops_per_step(config, batch, seq, masked, nsp=nsp)
    else:
        model_flops = peers.full_vocab_flops_per_token(config, seq) * batch * seq
    return step, model_flops


def run_one(name: str, shape: str, steps: int, tiny: bool, changes: dict, read_late: bool = True) -> dict:
    from bench import peers

    c = run_config(SHAPES[shape], tiny, changes if name == "bert_jax" else {})
    start = time.perf_counter()
    step, model_flops = _bert_jax_step(c) if name == "bert_jax" else _torch_step(c, name == "torch_compile")
    float(step())  # the first step compiles
    first = time.perf_counter() - start
    seconds = peers.time_steps(step, warmup=2, iters=steps, read_late=read_late)
    tokens = c.global_batch_size * c.max_seq_length
    return {
        "tokens_per_sec": tokens / seconds,
        "flops_per_sec": model_flops / seconds,
        "loss": float(step()),
        "first_step_s": first,
        "batch": c.global_batch_size,
        "seq": c.max_seq_length,
    }


def measured_bf16_peak(n: int = 8192) -> tuple[float, str]:
    """bfloat16 matmul FLOP/s of this device (XLA, n^3, best of 3 x 10) and its kind."""
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.bfloat16)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(10):
            out = f(a)
        out.block_until_ready()
        best = max(best, 2 * n**3 * 10 / (time.perf_counter() - start))
    return best, jax.devices()[0].device_kind


def _run_worker(
    name: str, shape: str, args: argparse.Namespace, changes: dict, xla_flags: str = ""
) -> dict | None:
    argv = [sys.executable, __file__, "--worker", name, shape, "--steps", str(args.steps)]
    argv += ["--set_json", json.dumps(changes), "--read_loss", args.read_loss]
    argv += ["--tiny"] if args.tiny else []
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {xla_flags}".strip()}
    try:
        return workers.run(argv, env=env, what=f"{name} on {shape}")
    except workers.WorkerFailed as e:
        print(e, flush=True)
        if name == "peak":
            raise SystemExit(1) from e
        return None


def parse_keys(texts: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` texts as a dict (values as Python literals, else strings)."""
    out = {}
    for text in texts:
        key, _, value = text.partition("=")
        try:
            out[key.strip()] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key.strip()] = value
    return out


def main() -> None:
    sys.stdout.reconfigure(line_buffering=True)  # each table as it is measured (also through tee)
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--only", default=",".join(SHAPES), help="shapes, comma-separated")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run-config key for bert_jax, e.g. attention_kernel=xla",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE[;KEY=VALUE]",
        help="one more bert_jax contender with these run-config keys on top of --set (xla_flags=... "
        "adds XLA flags), e.g. xla_attention:attention_kernel='xla'",
    )
    parser.add_argument(
        "--read_loss",
        choices=tuple(READ_LOSS),
        default="late",
        help="every step's loss is read: once the next step is queued (late), or before it (each)",
    )
    parser.add_argument("--tiny", action="store_true", help="tiny shapes: a check of the script")
    parser.add_argument("--set_json", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--worker", nargs=2, metavar=("NAME", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, shape = args.worker
        if name == "peak":
            result = measured_bf16_peak(1024 if args.tiny else 8192)
        else:
            changes = json.loads(args.set_json)
            result = run_one(name, shape, args.steps, args.tiny, changes, args.read_loss == "late")
        workers.report(result)
        return
    shapes, contenders = args.only.split(","), args.contenders.split(",")
    for value, known, what in ((shapes, SHAPES, "--only"), (contenders, CONTENDERS, "--contenders")):
        if unknown := [v for v in value if v not in known]:
            parser.error(f"{what}: unknown {', '.join(unknown)} (known: {', '.join(known)})")
    from bert_jax.training import hardware

    # Every contender in its own process: JAX takes most of the GPU's memory for its pool.
    changes = parse_keys(args.set)
    variants = {}  # name: (run-config keys, XLA flags)
    for text in args.variant:
        name, _, keys = text.partition(":")
        extra = parse_keys([k for k in keys.split(";") if k])
        flags = str(extra.pop("xla_flags", ""))
        variants[name] = ({**changes, **extra}, flags)
    measured, kind = _run_worker("peak", "-", args, {})
    spec = hardware.peak_flops_for_device_kind(kind) or measured
    print(f"{kind}: bf16 matmul measured {measured / 1e12:.0f} TFLOP/s, dense peak {spec / 1e12:.0f}")
    lines = []
    for shape in shapes:
        results: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name in [*contenders, *variants]:
                if name in variants:
                    keys, flags = variants[name]
                    r = _run_worker("bert_jax", shape, args, keys, flags)
                else:
                    r = _run_worker(name, shape, args, changes)
                if r and r["tokens_per_sec"] > results.get(name, {}).get("tokens_per_sec", -1.0):
                    results[name] = r
        if not results:
            continue
        ran = next(iter(results.values()))
        title = f"{SHAPES[shape].title}, batch {ran['batch']} x seq {ran['seq']}"
        print(f"\n{shape}: {title}; best of {args.rounds}; losses read {READ_LOSS[args.read_loss]}")
        print(f"{'':<15}{'tokens/s':>12}{'TFLOP/s':>9}{'MFU':>7}{'of measured':>13}{'loss':>8}{'first s':>9}")
        for name, r in results.items():
            print(
                f"{name:<15}{r['tokens_per_sec']:>12,.0f}{r['flops_per_sec'] / 1e12:>9.1f}"
                f"{r['flops_per_sec'] / spec:>7.1%}{r['flops_per_sec'] / measured:>13.1%}{r['loss']:>8.3f}"
                f"{r['first_step_s']:>9.1f}",
                flush=True,
            )
        torch_best = max((r["tokens_per_sec"] for n, r in results.items() if n in TORCH), default=0.0)
        ours = []
        if "bert_jax" in results and torch_best:
            ours.append(f"ratio_{shape}={results['bert_jax']['tokens_per_sec'] / torch_best:.2f}")
        if "bert_jax" in results:
            ours.append(f"mfu_{shape}={results['bert_jax']['flops_per_sec'] / measured:.3f}")
        # Also as each shape ends: a call stopped by a time limit keeps the shapes it finished.
        print("\n".join(ours), flush=True)
        lines += ours
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
