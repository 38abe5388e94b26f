"""`bert-jax SUBCOMMAND [--flags]`: one console command, one module per subcommand.

Each subcommand lives in `bert_jax/commands/<name>.py` and exposes `define_flags()` and
`main(argv)`. Only the chosen subcommand's flags are defined, so `bert-jax SUB --help`
lists exactly that subcommand's flags (plus absl's own). Errors a user's input causes
(files, flags, config keys, data, checkpoints) print one line and exit with 1, here and
nowhere else; ``BERT_JAX_DEBUG=1`` shows their traceback. A run that diverged, ran out of
memory or lost a peer process exits with its own code (`bert_jax.training.exit_codes`),
so that a restart loop restarts only what a restart can fix.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from absl import app, flags

from bert_jax.storage import emulator, files
from bert_jax.training import exit_codes, hardware, run_config
from bert_jax.training.run_config import REMOVED_KEYS, config_file

# name -> (module, one-line description)
COMMANDS: dict[str, tuple[str, str]] = {
    "convert": (
        "bert_jax.commands.convert",
        "Convert checkpoints: Hugging Face / original TF / bert_jax.",
    ),
    "pretrain": ("bert_jax.commands.pretrain", "Pre-train BERT (MLM + NSP); rerun to resume."),
    "finetune": (
        "bert_jax.commands.finetune",
        "Fine-tune on a task (GLUE, SQuAD, CoNLL-2003 NER, SWAG, BBC News, the offline suite); --sweep.",
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
    "fill-mask": (
        "bert_jax.commands.fill_mask",
        "A checkpoint's most likely tokens at each [MASK] of a text (its MLM head).",
    ),
    "predict": (
        "bert_jax.commands.predict",
        "A fine-tuned classifier's labels, or a tagger's tags and entities, for new text.",
    ),
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


DEBUG_ENV = "BERT_JAX_DEBUG"  # =1: errors show their traceback instead of one line

# What a user's input can cause (files, flags, configs, data, checkpoints): reported as one
# line and exit code 1. Anything else is a bug and keeps its traceback.
USER_ERRORS = (ValueError, OSError)


def fail(name: str, message: str, code: int = exit_codes.USER_ERROR) -> NoReturn:
    text = " ".join(message.split())
    print(f"bert-jax {name}: error: {text}  [{DEBUG_ENV}=1 for the traceback]", file=sys.stderr)
    sys.exit(code)


def exit_code_for(error: BaseException) -> int:
    """The exit status of an error that ends a command (`exit_codes`): divergence and out of
    memory have their own, any other user error is 1."""
    if exit_codes.out_of_memory(error):
        return exit_codes.OUT_OF_MEMORY
    loop = sys.modules.get("bert_jax.training.loop")  # not loaded: nothing diverged
    if loop is not None and isinstance(error, loop.DivergedError):
        return exit_codes.DIVERGED
    return exit_codes.USER_ERROR


def fail_at_once(name: str, error: BaseException, code: int = exit_codes.PEER_LOST) -> NoReturn:
    """A lost peer (or a bucket that stopped answering): one line, then exit with `code`
    without the interpreter's shutdown, whose JAX distributed shutdown would wait for a
    peer that is gone or stuck (minutes)."""
    line = f"bert-jax {name}: error: {exit_codes.first_line(error)}  [{DEBUG_ENV}=1 for the traceback]"
    print(line, file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code)


def flag_error_message(error: Exception, args: list[str]) -> str:
    """One line for a flag or config error, naming the flag, the config key or the file."""
    text = str(error).strip()
    missing_file = re.search(r"No such file or directory: '([^']+)'", text)
    if missing_file:
        return f"config file {missing_file.group(1)} does not exist"
    if isinstance(error, (AttributeError, KeyError)):  # ml_collections: a key it lacks
        # Its message may be the repr of "'key'\nDid you mean ...": the key and the hint.
        plain = text.encode().decode("unicode_escape") if "\\" in text else text
        names = re.findall(r"'([\w.]+)'", plain) or [plain.strip("\"' ")]
        key = names[0]
        hint = re.search(r'Did you mean "([\w.]+)"', plain)
        for arg in args:
            name = arg.lstrip("-").split("=", 1)[0]
            flag, _, path = name.partition(".")
            if path and key in path.split("."):
                if path in REMOVED_KEYS:
                    return f"config key {path!r} (from {arg}) was removed: set --{flag}.{REMOVED_KEYS[path]}"
                parts = path.split(".")
                if hint:  # ml_collections' spelling of the one name it lacks, as a whole key
                    parts[parts.index(key)] = hint.group(1)
                    near = [".".join(parts)]
                else:
                    near = nearby_keys(path, _config_spec(flag, args))
                suggestion = f"; did you mean {' or '.join(repr(k) for k in near)}?" if near else ""
                return f"unknown config key {path!r} (from {arg}): --{flag} has no such field{suggestion}"
        return f"unknown config key {key!r}" + (f"; did you mean {hint.group(1)!r}?" if hint else "")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    last = lines[-1] if lines else text  # a config file's own error is the last line
    return re.sub(r"^\w+(Error|Exception): ", "", last)


def _config_spec(flag: str, args: list[str]) -> str | None:
    """The ``PATH[:ARG]`` given as ``--flag`` (the config file a key was set in)."""
    for arg in args:
        if arg.startswith(f"--{flag}="):
            return arg.split("=", 1)[1]
    return None


def nearby_keys(path: str, spec: str | None, most: int = 2) -> list[str]:
    """Keys of the config `spec` (as loaded, before any override) that a mistyped dotted
    `path` probably meant: those with its last name under another block
    (``training.num_train_steps`` → ``num_train_steps``), else the closest spellings of the
    whole path. Empty when the config cannot be loaded."""
    if not spec:
        return []
    try:
        keys = list(run_config.flat(run_config.load_config(spec).to_dict()))
    except Exception:  # the config's own error is reported where it is used
        return []
    leaf = path.rsplit(".", 1)[-1]
    same_leaf = [k for k in keys if k.rsplit(".", 1)[-1] == leaf]
    return same_leaf[:most] or difflib.get_close_matches(path, keys, n=most, cutoff=0.75)


def guarded(name: str, main: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
    """`main` with the user errors it raises turned into one line (see USER_ERRORS)."""

    def run_main(argv: list[str]) -> Any:
        try:
            return main(argv)
        except exit_codes.PeerLost as e:
            if os.environ.get(DEBUG_ENV):
                raise
            fail_at_once(name, e)
        except files.BucketUnreachableError as e:  # past the retry bound: 74, restartable
            if os.environ.get(DEBUG_ENV):
                raise
            fail_at_once(name, e, exit_codes.BUCKET_UNREACHABLE)
        except USER_ERRORS as e:
            if os.environ.get(DEBUG_ENV):
                raise
            fail(name, str(e) or type(e).__name__, exit_code_for(e))
        except (RuntimeError, MemoryError) as e:  # out of memory: one line; anything else is a bug
            if os.environ.get(DEBUG_ENV) or not exit_codes.out_of_memory(e):
                raise
            fail(name, exit_codes.first_line(e), exit_codes.OUT_OF_MEMORY)
        except KeyboardInterrupt:  # a second Ctrl-C (the first saves: `training.loop`)
            if os.environ.get(DEBUG_ENV):
                raise
            print(f"bert-jax {name}: interrupted", file=sys.stderr, flush=True)
            sys.exit(exit_codes.INTERRUPTED)

    return run_main


def quiet_start(argv: list[str]) -> None:
    """A clean run prints only its own lines, on CPU, GPU and TPU alike.

    - The platform is chosen before JAX starts a backend: on a machine with no TPU or GPU
      device, only the CPU (else an installed libtpu probes for a TPU and prints a dozen
      lines of its own errors). Where there is one, JAX's detection is left alone.
      ``JAX_PLATFORMS`` set by the user wins.
    - TensorFlow's C++ start-up logs (oneDNN notices, CUDA probing, "failed call to
      cuInit") are off (``TF_CPP_MIN_LOG_LEVEL=3``; TensorFlow's real errors still raise),
      unless ``--verbosity``/``-v`` is given or ``BERT_JAX_DEBUG=1``.

    Environment variables, so that worker processes (`prepare-data`) inherit them.
    """
    verbose = os.environ.get(DEBUG_ENV) or any(a.startswith(("--verbosity", "-v")) for a in argv[2:])
    hardware.quiet_platform(verbose=bool(verbose))


def _config_paths(args: list[str]) -> list[str]:
    """``--config=PATH[:ARG]`` with a relative PATH looked for as `bert_jax.load_config`
    looks: in the working folder, then in the repository (`run_config.config_file`), so
    ``--config=configs/pretrain.py:demo`` works from any folder. A PATH found in neither is
    left for the flag to refuse."""
    out = []
    for arg in args:
        if arg.startswith("--config="):
            path, colon, rest = arg.removeprefix("--config=").partition(":")
            try:
                arg = f"--config={config_file(path)}{colon}{rest}"
            except FileNotFoundError:
                pass
        out.append(arg)
    return out


def run(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    quiet_start(argv)
    emulator.apply_from_environment()
    if len(argv) < 2 or argv[1] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0 if len(argv) >= 2 else 2)
    name = argv[1]
    if name not in COMMANDS:
        print(f"bert-jax: unknown subcommand {name!r}\n\n{usage()}", file=sys.stderr)
        sys.exit(exit_codes.USAGE)
    module = importlib.import_module(COMMANDS[name][0])
    module.define_flags()
    if any(a in ("-h", "--help", "--helpshort") for a in argv[2:]):
        # absl's own --help lists only the flags of `__main__`: list the subcommand's.
        doc = (module.__doc__ or "").strip()
        print(f"usage: bert-jax {name} [--flag=value ...]\n\n{doc}\n\nflags:")
        shared = [
            m
            for m in flags.FLAGS.flags_by_module_dict()
            if m.startswith("bert_jax.") and m != module.__name__
        ]
        print("\n\n".join(flags.FLAGS.module_help(m) for m in [module.__name__, *sorted(shared)]))
        print(f"\nErrors print one line; {DEBUG_ENV}=1 shows their traceback.")
        sys.exit(0)
    args = [f"bert-jax {name}", *_config_paths(argv[2:])]
    if os.environ.get(DEBUG_ENV):
        app.run(module.main, argv=args)
        return
    try:  # parse (and load config files) here, so that their errors are one line too
        remaining = flags.FLAGS(args)
        for flag in flags.FLAGS:  # a config file that failed to load raises on first use
            getattr(flags.FLAGS[flag].value, "keys", None)
    except Exception as e:  # flag values, config files (they run user code), config keys
        fail(name, flag_error_message(e, args))
    app.run(guarded(name, module.main), argv=args, flags_parser=lambda _: remaining)


if __name__ == "__main__":
    run()
