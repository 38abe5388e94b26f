"""`bert-jax SUBCOMMAND [--flags]`: one console command, one module per subcommand.

Each subcommand lives in `bert_jax/commands/<name>.py` and exposes `define_flags()` and
`main(argv)`. Only the chosen subcommand's flags are defined, so `bert-jax SUB --help`
lists exactly that subcommand's flags (plus absl's own).
"""

from __future__ import annotations

import importlib
import sys

from absl import app, flags

# name -> (module, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "convert": (
        "bert_jax.commands.convert",
        "Convert checkpoints: Hugging Face / original TF / bert_jax.",
    ),
    "pretrain": ("bert_jax.commands.pretrain", "Pre-train BERT (MLM + NSP); rerun to resume."),
    "finetune": (
        "bert_jax.commands.finetune",
        "Fine-tune on a task (GLUE, SQuAD, CoNLL-2003 NER, SWAG, BBC News); --sweep for the grid.",
    ),
    "ablate": (
        "bert_jax.commands.ablate",
        "Pre-train (and fine-tune) every row of one of the paper's ablation tables; report.",
    ),
    "eval-squad": (
        "bert_jax.commands.eval_squad",
        "SQuAD v1.1/v2.0 EM/F1 of a predictions file (the official scripts' JSON).",
    ),
    "plan": ("bert_jax.commands.plan", "Compile the train step for a TPU topology; memory/time."),
    "prepare-data": (
        "bert_jax.commands.prepare_data",
        "Text → prepared (unmasked) pre-training instances, in parallel; train with source=prepared.",
    ),
    "create-data": (
        "bert_jax.commands.create_data",
        "Text → TFRecords of pre-training examples (original format).",
    ),
    "build-vocab": ("bert_jax.commands.build_vocab", "Learn a WordPiece vocab or a SentencePiece model."),
    "tokenize": ("bert_jax.commands.tokenize", "WordPiece ids of each line of a text file (JSONL)."),
    "features": (
        "bert_jax.commands.features",
        "Extract per-token hidden states of a checkpoint to .npy.",
    ),
}


def usage() -> str:
    width = max(len(n) for n in COMMANDS)
    lines = [
        "usage: bert-jax SUBCOMMAND [--flag=value ...]",
        "",
        "BERT pre-training and fine-tuning in JAX/Flax. Subcommands:",
    ]
    lines += [f"  {name.ljust(width)}  {desc}" for name, (_, desc) in COMMANDS.items()]
    lines += ["", "`bert-jax SUBCOMMAND --help` lists a subcommand's flags."]
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0 if len(argv) >= 2 else 2)
    name = argv[1]
    if name not in COMMANDS:
        print(f"bert-jax: unknown subcommand {name!r}\n\n{usage()}", file=sys.stderr)
        sys.exit(2)
    module = importlib.import_module(COMMANDS[name][0])
    module.define_flags()
    if any(a in ("-h", "--help", "--helpshort") for a in argv[2:]):
        # absl's own --help lists only the flags of `__main__`: list the subcommand's.
        doc = (module.__doc__ or "").strip()
        print(f"usage: bert-jax {name} [--flag=value ...]\n\n{doc}\n\nflags:")
        print(flags.FLAGS.module_help(module.__name__))
        sys.exit(0)
    app.run(module.main, argv=[f"bert-jax {name}", *argv[2:]])


if __name__ == "__main__":
    run()
