"""Time to quality: wall time for one model and recipe to reach a held-out MLM loss, in
bert_jax and in two PyTorch peers, on this machine, in the same run.

The model and recipe are a bert_jax pre-training config (default `configs/pretrain.py:demo`:
its size, switches, optimizer, schedule, masking rate and data). The contenders:

- ``bert_jax``: the engine's train step, masks drawn on the device;
- ``transformers``: the library as a user runs it: `BertForMaskedLM` (or, for a model with
  pre-LN + GeGLU + rotary positions + no biases, `ModernBertForMaskedLM` configured to the
  same shape with global attention only), `DataCollatorForLanguageModeling` masking each
  batch, full-vocabulary logits, `torch.optim.AdamW`, gradient clipping;
- ``lean_torch``: `bench/lean_torch_bert.py`, the same recipe in plain PyTorch with the
  output layer at the masked positions only ("sparse prediction", as Cramming and
  MosaicBERT train): the fastest straightforward PyTorch of it.

All three read the same unmasked training rows (bert_jax's pipeline, exported once) in the
same order, with the same masking rate and 80/10/10 mix (each draws its own masks), the
same optimizer settings and the same learning-rate schedule, and are scored every
``--eval_every`` steps on the same held-out masked rows: the loss on the changed tokens
(shown as [MASK] or a random token). The target is ``--target_nats`` under the unigram
model's loss on those tokens. Only training is timed (evaluation pauses the clock); each
contender runs in its own subprocess, the contenders take turns for ``--rounds`` rounds,
and each one's best round counts.

    .venv/bin/python bench/time_to_quality.py [--config=demo] [--target_nats=1.0] [--rounds=1]

Prints each contender's time, steps and tokens to the target, then
``ratio_time_to_quality=<x>`` (the faster peer's time over bert_jax's) as its last line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bert_jax.commands import run_settings
from bert_jax.training import resolver

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(ROOT))

CONTENDERS = ("bert_jax", "transformers", "lean_torch")


def _config(preset: str):
    """The preset's config as its settings record it (``model.vocab_size`` written in)."""
    import ml_collections

    from configs import pretrain as pretrain_config

    c = pretrain_config.get_config(preset)
    c.eval_batch_size = c.global_batch_size
    return ml_collections.ConfigDict(run_settings.pretrain_settings(c).config)


def export_data(preset: str, max_steps: int, out: Path) -> dict:
    """The training rows of `max_steps` steps, the masked held-out rows and the unigram
    baseline on their changed tokens, from bert_jax's pipeline (run once, untimed)."""
    import jax

    from bert_jax.data import run_vocabulary
    from bert_jax.pretraining import pretrain
    from bert_jax.training import sharding

    c = _config(preset)
    settings = run_settings.pretrain_settings(c)
    pretrain.check_run(settings)  # learns the vocabulary where the preset learns one
    run = pretrain.Pretraining(settings, sharding.make_mesh((1, 1, 1), jax.devices()[:1]))
    phase = settings.phases()[0]
    it = pretrain.data_iterator(
        settings,
        split="train",
        max_seq_length=phase.max_seq_length,
        max_predictions_per_seq=phase.max_predictions_per_seq,
    )
    rows = [next(it) for _ in range(max_steps)]
    train = {k: np.stack([r[k] for r in rows]) for k in rows[0]}
    evals, counts = [], np.zeros(settings.model.vocab_size, np.float64)
    with jax.set_mesh(run.mesh):
        for local in pretrain.data_iterator(
            settings,
            split="eval",
            max_seq_length=phase.max_seq_length,
            max_predictions_per_seq=phase.max_predictions_per_seq,
        ):
            evals.append(jax.device_get(run.global_batch(local, phase.max_predictions_per_seq)))
        for k in range(min(50, max_steps)):  # the unigram model: the training targets' frequencies
            masked = jax.device_get(
                run.global_batch({key: v[k] for key, v in train.items()}, phase.max_predictions_per_seq)
            )
            np.add.at(counts, masked["masked_lm_ids"][masked["masked_lm_weights"] > 0], 1)
    held = {k: np.concatenate([e[k] for e in evals]) for k in evals[0]}
    shown = np.take_along_axis(held["input_ids"], held["masked_lm_positions"], axis=1)
    changed = (held["masked_lm_weights"] > 0) & (shown != held["masked_lm_ids"])
    targets = held["masked_lm_ids"][changed]
    unigram = min(
        float(-np.mean(np.log((counts[targets] + k) / (counts.sum() + k * counts.size))))
        for k in (1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)
    )
    np.savez(out / "train.npz", **train)
    np.savez(out / "eval.npz", **held)
    tok = run_vocabulary.tokenizer_of(run.data)
    info = {
        "unigram_loss": unigram,
        "vocab_file": tok.vocab_file,
        "special": {
            "pad": tok.special.pad,
            "cls": tok.special.cls,
            "sep": tok.special.sep,
            "mask": tok.special.mask,
        },
        "changed_tokens": int(changed.sum()),
    }
    (out / "info.json").write_text(json.dumps(info))
    return info


def _schedule(c):
    from bert_jax.training import optimizer
    from bert_jax.training.settings import TrainingSettings

    return optimizer.learning_rate_schedule(
        float(c.learning_rate),
        resolver.resolve(TrainingSettings, c, partial=True).optimization.warmup(int(c.num_train_steps)),
        int(c.num_train_steps),
        kind=c.lr_schedule,
        decay_fraction=float(c.lr_decay_fraction),
    )


def _train_loop(step, evaluate, target: float, args, train: dict) -> dict:
    """Steps until the held-out loss reaches `target`; only the steps are timed."""
    trained, curve, reached, steps = 0.0, [], False, 0
    while steps < args.max_steps and not reached:
        start = time.perf_counter()
        step(steps)
        trained += time.perf_counter() - start
        steps += 1
        if steps % args.eval_every == 0:
            loss = evaluate()
            curve.append((steps, round(loss, 4), round(trained, 1)))
            print(
                f"  step {steps}: held-out changed-token loss {loss:.3f} ({trained:.0f} s)", file=sys.stderr
            )
            reached = loss <= target
    tokens = steps * train["input_ids"][0].size
    rate = tokens / trained
    return dict(
        reached=reached, seconds=trained, steps=steps, curve=curve, tokens=tokens, tokens_per_sec=rate
    )


def run_bert_jax(c, train, held, target, args) -> dict:
    import jax

    from bert_jax.pretraining import pretrain
    from bert_jax.training import sharding

    mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
    run = pretrain.Pretraining(run_settings.pretrain_settings(c), mesh)
    p = run.run.phases()[0].max_predictions_per_seq
    with jax.set_mesh(run.mesh):
        state = {"s": run.engine.init_state(int(c.seed) + args.init_seed)}
        eval_batch = run.engine.place(held, process_local=True)

    def step(k: int) -> None:
        with jax.set_mesh(run.mesh):
            state["s"], metrics = run.train_step(
                state["s"], run.global_batch({n: v[k] for n, v in train.items()}, p)
            )
        jax.block_until_ready(metrics["loss"])

    def evaluate() -> float:
        sums = jax.device_get(run.engine.eval_step(state["s"].params, eval_batch))
        return float(sums["mlm_changed_loss_sum"] / sums["mlm_changed_weight"])

    return _train_loop(step, evaluate, target, args, train)


def _torch_eval(logits_at, held) -> float:
    """Changed-token loss of a torch model given ``logits_at(ids, positions) -> [B, P, V]``."""
    import torch

    total, weight = 0.0, 0.0
    with torch.no_grad():
        for i in range(0, len(held["input_ids"]), 64):
            sl = slice(i, i + 64)
            ids = torch.from_numpy(held["input_ids"][sl].astype(np.int64))
            pos = torch.from_numpy(held["masked_lm_positions"][sl].astype(np.int64))
            labels = torch.from_numpy(held["masked_lm_ids"][sl].astype(np.int64))
            shown = np.take_along_axis(held["input_ids"][sl], held["masked_lm_positions"][sl], 1)
            w = held["masked_lm_weights"][sl] * (shown != held["masked_lm_ids"][sl])
            logits = logits_at(ids, pos)
            losses = torch.nn.functional.cross_entropy(
                logits.flatten(0, 1), labels.flatten(), reduction="none"
            )
            total += float((losses.numpy() * w.flatten()).sum())
            weight += float(w.sum())
    return total / weight


def _torch_optimizer(model, c):
    import torch

    from bench.lean_torch_bert import adamw

    opt = adamw(model, float(c.learning_rate), float(c.adam_b2), float(c.adam_eps), float(c.weight_decay))
    schedule = _schedule(c)
    peak = float(c.learning_rate)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: float(schedule(k)) / peak)
    return opt, sched


def run_transformers(c, train, held, target, args, info) -> dict:
    import torch
    import transformers

    from bench import peers
    from bert_jax.model.config import BertConfig

    torch.manual_seed(int(c.seed) + args.init_seed)
    m = BertConfig.from_dict(c.model)
    modern = dict(pre_layer_norm=True, gated_ffn=True, position_embedding_type="rotary", use_bias=False)
    if not m.switches_on():
        model = transformers.BertForMaskedLM(peers.hf_config(m))
    elif all(getattr(m, k) == v for k, v in modern.items()):
        s = info["special"]
        hf = transformers.ModernBertConfig(
            vocab_size=m.vocab_size,
            hidden_size=m.hidden_size,
            num_hidden_layers=m.num_hidden_layers,
            num_attention_heads=m.num_attention_heads,
            intermediate_size=m.intermediate_size,
            hidden_activation="gelu",
            max_position_embeddings=m.max_position_embeddings,
            norm_eps=m.layer_norm_eps,
            norm_bias=True,
            global_rope_theta=m.rotary_base,
            global_attn_every_n_layers=1,
            attention_bias=False,
            mlp_bias=False,
            classifier_bias=False,
            decoder_bias=True,
            attention_dropout=m.attention_probs_dropout_prob,
            embedding_dropout=m.hidden_dropout_prob,
            mlp_dropout=m.hidden_dropout_prob,
            pad_token_id=s["pad"],
            cls_token_id=s["cls"],
            sep_token_id=s["sep"],
            bos_token_id=s["cls"],
            eos_token_id=s["sep"],
            initializer_range=m.initializer_range,
        )
        hf._attn_implementation = "sdpa"  # PyTorch's fused attention (no flash-attn on CPU)
        model = transformers.ModernBertForMaskedLM(hf)
    else:
        raise SystemExit(f"no transformers model has the switches {m.switches_on()}")
    model.train()
    tokenizer = transformers.BertTokenizerFast(vocab_file=info["vocab_file"], do_lower_case=True)
    collator = transformers.DataCollatorForLanguageModeling(
        tokenizer, mlm_probability=float(c.data.masked_lm_prob)
    )
    opt, sched = _torch_optimizer(model, c)

    def step(k: int) -> None:
        ids, mask = train["input_ids"][k], train["input_mask"][k]
        rows = [{"input_ids": r[m > 0].tolist()} for r, m in zip(ids, mask, strict=True)]
        batch = collator(rows)
        loss = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
        ).loss
        _update(model, loss, opt, sched, float(c.grad_clip_norm))

    def logits_at(ids, pos):
        out = _in_eval_mode(model, lambda: model(input_ids=ids).logits)
        return torch.gather(out, 1, pos[..., None].expand(-1, -1, out.shape[-1]))

    return _train_loop(step, lambda: _torch_eval(logits_at, held), target, args, train)


def _update(model, loss, opt, sched, clip: float) -> None:
    """One optimizer step of a torch contender: backward, global-norm clipping, AdamW, schedule."""
    import torch

    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    sched.step()


def _in_eval_mode(model, fn):
    model.eval()
    try:
        return fn()
    finally:
        model.train()


def _mask_rows(ids, rate, max_pred, special, vocab, gen):
    """80/10/10 masking of `rate` of each row's non-special tokens, at most `max_pred`."""
    import torch

    cand = (ids != special["pad"]) & (ids != special["cls"]) & (ids != special["sep"])
    k = torch.clamp(torch.round(cand.sum(1) * rate), 1, max_pred)
    scores = torch.rand(ids.shape, generator=gen).masked_fill(~cand, 2.0)
    pos = scores.argsort(1)[:, :max_pred]
    weights = (torch.arange(max_pred)[None] < k[:, None]).float()
    labels = torch.gather(ids, 1, pos)
    action = torch.rand(pos.shape, generator=gen)
    random = torch.randint(0, vocab, pos.shape, generator=gen)
    new = torch.where(action < 0.8, special["mask"], torch.where(action < 0.9, random, labels))
    masked = ids.clone().scatter_(1, pos, torch.where(weights > 0, new, labels))
    return masked, pos, labels, weights


def run_lean_torch(c, train, held, target, args, info) -> dict:
    import torch

    from bench.lean_torch_bert import LeanBertForMaskedLM
    from bert_jax.model.config import BertConfig

    torch.manual_seed(int(c.seed) + args.init_seed)
    m = BertConfig.from_dict(c.model)
    model = LeanBertForMaskedLM(m, int(c.max_seq_length)).train()
    opt, sched = _torch_optimizer(model, c)
    gen = torch.Generator().manual_seed(int(c.seed) + args.init_seed)
    max_pred = int(c.max_predictions_per_seq)

    def step(k: int) -> None:
        ids = torch.from_numpy(train["input_ids"][k].astype(np.int64))
        rate = float(c.data.masked_lm_prob)
        masked, pos, labels, weights = _mask_rows(ids, rate, max_pred, info["special"], m.vocab_size, gen)
        total, weight = model(masked, pos, labels, weights)
        _update(model, total / weight.clamp(min=1.0), opt, sched, float(c.grad_clip_norm))

    def logits_at(ids, pos):
        return _in_eval_mode(model, lambda: model.logits(ids, pos))

    return _train_loop(step, lambda: _torch_eval(logits_at, held), target, args, train)


def worker(name: str, data_dir: Path, args) -> dict:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    info = json.loads((data_dir / "info.json").read_text())
    train = dict(np.load(data_dir / "train.npz"))
    held = dict(np.load(data_dir / "eval.npz"))
    c = _config(args.config)
    target = info["unigram_loss"] - args.target_nats
    if name == "bert_jax":
        return run_bert_jax(c, train, held, target, args)
    runner = run_transformers if name == "transformers" else run_lean_torch
    return runner(c, train, held, target, args, info)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="demo", help="a configs/pretrain.py preset")
    parser.add_argument("--target_nats", type=float, default=1.0)
    parser.add_argument("--max_steps", type=int, default=3000)
    parser.add_argument("--eval_every", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--init_seed", type=int, default=0, help="added to the config's seed for the models' initialisation"
    )
    parser.add_argument("--only", default="", help="comma-separated contenders")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--data", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print("RESULT " + json.dumps(worker(args.worker, Path(args.data), args)), flush=True)
        return
    from bench.pretrain_throughput import cpu_description

    names = [n for n in (args.only.split(",") if args.only else CONTENDERS)]
    with tempfile.TemporaryDirectory() as tmp:
        info = export_data(args.config, args.max_steps, Path(tmp))
        target = info["unigram_loss"] - args.target_nats
        print(f"cpu: {cpu_description()}")
        print(f"config: configs/pretrain.py:{args.config}; held-out changed tokens: {info['changed_tokens']}")
        print(f"unigram loss {info['unigram_loss']:.3f} nats; target {target:.3f} (-{args.target_nats} nats)")
        best: dict[str, dict] = {}
        for r in range(args.rounds):
            for name in names:
                result = _run_worker(name, tmp, args)
                state = "reached" if result["reached"] else "NOT reached"
                print(
                    f"round {r + 1} {name}: {state} in {result['seconds']:.0f} s, {result['steps']} steps, "
                    f"curve {result['curve']}",
                    flush=True,
                )
                if name not in best or _better(result, best[name]):
                    best[name] = result
    print(f"\n{'':<14}{'reached':>8}{'seconds':>9}{'steps':>7}{'Mtokens':>9}{'tokens/s':>10}")
    for name, r in best.items():
        row = f"{r['reached']!s:>8}{r['seconds']:>9.0f}{r['steps']:>7}{r['tokens'] / 1e6:>9.2f}"
        print(f"{name:<14}{row}{r['tokens_per_sec']:>10,.0f}")
    ours = best.get("bert_jax")
    peers = {n: r for n, r in best.items() if n != "bert_jax" and r["reached"]}
    if ours and ours["reached"] and peers:
        for n, r in peers.items():
            print(f"tokens_to_target_{n}_over_bert_jax={r['tokens'] / ours['tokens']:.2f}")
        fastest = min(r["seconds"] for r in peers.values())
        print(f"ratio_time_to_quality={fastest / ours['seconds']:.2f}")


def _better(a: dict, b: dict) -> bool:
    """Reached beats not reached; then the shorter time."""
    return (a["reached"], -a["seconds"]) > (b["reached"], -b["seconds"])


def _run_worker(name: str, data_dir: str, args) -> dict:
    flags = ["--config", args.config, "--target_nats", str(args.target_nats)]
    flags += ["--max_steps", str(args.max_steps), "--eval_every", str(args.eval_every)]
    flags += ["--init_seed", str(args.init_seed)]
    cmd = [sys.executable, __file__, "--worker", name, "--data", data_dir, *flags]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=os.environ)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not line:
        raise RuntimeError(f"{name} failed:\n{proc.stderr[-3000:]}")
    return json.loads(line[0][7:])


if __name__ == "__main__":
    main()
