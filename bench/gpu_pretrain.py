"""Pre-training step on one NVIDIA GPU: bert_jax vs transformers' PyTorch BERT, same run.

BERT-Base, full forward + backward + AdamW update of pre-training (MLM over 15% of the
positions + NSP), bfloat16 compute, on the paper's two phases: sequence 128 (batch 256) and
512 (batch 64). Contenders, each in its own subprocess, taking turns for ``--rounds``
rounds (best round each):

- ``bert_jax``: the paper's recipe (attention dropout 0.1, so the XLA attention);
- ``bert_jax_cudnn``: attention dropout 0, so `attention_kernel=auto` takes cuDNN's fused
  attention (the recipe ModernBERT and most recent encoders use);
- ``torch``: `transformers.BertForPreTraining`, SDPA attention, bfloat16 autocast, fused
  AdamW: what a user of that library runs (eager; MLM logits over every position).

MFU is each contender's model FLOPs (bert_jax: MLM logits on the masked positions only;
torch: at every position, as it computes them) over the GPU's dense bfloat16 peak
(`training.hardware`), and over the bfloat16 matmul rate measured in the same run.

    python bench/gpu_pretrain.py [--steps 10] [--rounds 2] [--only 128]

Prints a table per length, then ``ratio_<len>=<x>`` (bert_jax's best tokens/s over
torch's) as its last lines.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import workers  # noqa: E402

SHAPES = {"128": (256, 128, 20), "512": (64, 512, 77), "128x512": (512, 128, 20)}  # batch, length, masked
CONTENDERS = ("bert_jax", "bert_jax_cudnn", "torch")


def _bert_jax_step(batch: int, seq: int, masked: int, attention_dropout: float, changes: dict):
    from bench import peers
    from bert_jax.model.config import model_config_dict

    model = model_config_dict("base", attention_probs_dropout_prob=attention_dropout)
    changes = {"compute_dtype": "bfloat16", "attention_kernel": "auto", **changes}
    return peers.bert_jax_pretraining_step(model, batch, seq, masked, changes)


def _torch_step(batch: int, seq: int, masked: int):
    import numpy as np
    import torch
    import transformers

    from bench import peers
    from bert_jax.model.config import MODEL_PRESETS

    config = MODEL_PRESETS["base"]
    data = peers.random_batch(config, batch, seq, masked)
    torch.manual_seed(0)
    hf = peers.hf_config(config)
    hf._attn_implementation = "sdpa"
    model = transformers.BertForPreTraining(hf).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6, fused=True)
    as_long = lambda a: torch.from_numpy(a.astype(np.int64)).cuda()
    labels = np.full(data["input_ids"].shape, -100, np.int64)
    np.put_along_axis(labels, data["masked_lm_positions"], data["masked_lm_ids"], axis=1)
    inputs = {
        "input_ids": as_long(data["input_ids"]),
        "attention_mask": as_long(data["input_mask"]),
        "token_type_ids": as_long(data["segment_ids"]),
        "labels": as_long(labels),
        "next_sentence_label": as_long(data["next_sentence_labels"]),
    }

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)

    return step, peers.full_vocab_flops_per_token(config, seq) * batch * seq


def run_one(name: str, shape: str, steps: int, changes: dict) -> dict:
    from bench import peers

    batch, seq, masked = SHAPES[shape]
    if name == "torch":
        step, flops = _torch_step(batch, seq, masked)
    else:
        step, flops = _bert_jax_step(batch, seq, masked, 0.1 if name == "bert_jax" else 0.0, changes)
    seconds = peers.time_steps(step, warmup=3, iters=steps)
    return {"tokens_per_sec": batch * seq / seconds, "flops_per_sec": flops / seconds, "loss": step()}


def measured_bf16_peak() -> tuple[float, str]:
    """bfloat16 matmul FLOP/s of this GPU (XLA, 8192^3, best of 3 x 10) and its kind."""
    import jax
    import jax.numpy as jnp

    n = 8192
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


def _run_worker(name: str, shape: str, steps: int, changes: dict):
    argv = [sys.executable, __file__, "--worker", name, shape, "--steps", str(steps)]
    argv += ["--set_json", json.dumps(changes)]
    try:
        return workers.run(argv, what=f"{name} on {shape}")
    except workers.WorkerFailed as e:
        print(e, flush=True)
        if name == "peak":
            raise SystemExit(1) from e
        return {"tokens_per_sec": 0.0, "flops_per_sec": 0.0, "loss": float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=sorted(SHAPES), default=None)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run-config key for the bert_jax contenders, e.g. model.hidden_dropout_prob=0.0",
    )
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--set_json", default="{}", help=argparse.SUPPRESS)
    parser.add_argument("--worker", nargs=2, metavar=("NAME", "SHAPE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, shape = args.worker
        changes = json.loads(args.set_json)
        result = measured_bf16_peak() if name == "peak" else run_one(name, shape, args.steps, changes)
        workers.report(result)
        return
    from bert_jax.training import hardware

    # Every contender in its own process: JAX takes most of the GPU's memory for its pool.
    changes = {k: ast.literal_eval(v) for k, _, v in (s.partition("=") for s in args.set)}
    contenders = args.contenders.split(",")
    measured, kind = _run_worker("peak", "-", args.steps, {})
    spec = hardware.peak_flops_for_device_kind(kind) or measured
    print(f"{kind}: bf16 matmul measured {measured / 1e12:.0f} TFLOP/s, dense peak {spec / 1e12:.0f}")
    ratios = {}
    for shape in [args.only] if args.only else list(SHAPES):
        results: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name in contenders:
                r = _run_worker(name, shape, args.steps, changes)
                if r["tokens_per_sec"] > results.get(name, {}).get("tokens_per_sec", -1.0):
                    results[name] = r
        batch, seq, _ = SHAPES[shape]
        print(f"\nseq {seq}, batch {batch}, BERT-Base, bfloat16; best of {args.rounds} rounds")
        print(f"{'':<16}{'tokens/s':>12}{'TFLOP/s':>9}{'MFU':>7}{'of measured':>13}{'loss':>8}")
        for name, r in results.items():
            print(
                f"{name:<16}{r['tokens_per_sec']:>12,.0f}{r['flops_per_sec'] / 1e12:>9.1f}"
                f"{r['flops_per_sec'] / spec:>7.1%}{r['flops_per_sec'] / measured:>13.1%}{r['loss']:>8.3f}"
            )
        ours = [r["tokens_per_sec"] for n, r in results.items() if n != "torch"]
        if ours and "torch" in results:
            ratios[shape] = max(ours) / max(results["torch"]["tokens_per_sec"], 1e-9)
    print()
    for shape, ratio in ratios.items():
        print(f"ratio_{shape}={ratio:.2f}")


if __name__ == "__main__":
    main()
