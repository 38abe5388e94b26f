"""The `bert-jax` command: subcommands, their flags, and errors for misuse."""

import json
import os
import subprocess
import sys

from tests.conftest import ROOT


def bert_jax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_jax", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def bert_jax_ids(text: str) -> list[int]:
    from bert_jax.data import tokenization

    return tokenization.load_tokenizer().tokenize([text])[0]


def test_help_lists_every_subcommand() -> None:
    proc = bert_jax("--help")
    assert proc.returncode == 0
    for sub in ("pretrain", "plan", "convert", "features", "tokenize"):
        assert f"  {sub} " in proc.stdout


def test_subcommand_help_lists_its_flags() -> None:
    proc = bert_jax("convert", "--help")
    assert proc.returncode == 0
    for flag in ("--src", "--dst", "--dst_format"):
        assert flag in proc.stdout
    proc = bert_jax("pretrain", "--help")
    assert "--workdir" in proc.stdout and "--config" in proc.stdout


def test_unknown_subcommand_and_missing_flags_fail_clearly() -> None:
    proc = bert_jax("pretrian")
    assert proc.returncode == 2 and "unknown subcommand 'pretrian'" in proc.stderr
    proc = bert_jax("convert")
    assert proc.returncode == 1 and "Flag --dst must have a value" in proc.stderr  # one line


def test_tokenize_writes_one_id_list_per_line(tmp_path) -> None:
    text = tmp_path / "in.txt"
    # Separators that `str.splitlines` would split on stay inside their line; CRLF ends one.
    text.write_bytes("Hello world!\r\nUnaffable\nform\ffeed \x1c u\u2028v \u0085 lone\rcr\n".encode())
    out = tmp_path / "out.jsonl"
    proc = bert_jax("tokenize", f"--input={text}", f"--output={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 3 and rows[:2] == [[7592, 2088, 999], [14477, 20961, 3468]]
    assert rows[2] == bert_jax_ids("form\ffeed \x1c u\u2028v \u0085 lone\rcr")


def test_user_errors_are_one_line_with_exit_code_1(tmp_path) -> None:
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n")  # no [MASK]
    text = tmp_path / "in.txt"
    text.write_text("hello\n")
    cases = [
        (
            [
                "pretrain",
                "--config=configs/pretrain.py:tiny",
                "--config.model.no_such_key=1",
                f"--workdir={tmp_path}/a",
            ],
            "unknown config key 'model.no_such_key'",
        ),
        (
            ["pretrain", "--config=configs/nofile.py", f"--workdir={tmp_path}/b"],
            "config file configs/nofile.py does not exist",
        ),
        (
            ["pretrain", "--config=configs/pretrain.py:nope", f"--workdir={tmp_path}/c"],
            "unknown preset 'nope'",
        ),
        (["tokenize", f"--input={tmp_path}/missing.txt", f"--output={tmp_path}/o.jsonl"], "missing.txt"),
        (
            ["tokenize", f"--input={text}", f"--output={tmp_path}/o.jsonl", f"--vocab_file={vocab}"],
            "lacks the special token(s) [MASK]",
        ),
        (["convert", f"--src={tmp_path}", f"--dst={tmp_path}/out"], "is not a checkpoint"),
        (
            [
                "pretrain",
                "--config=configs/pretrain.py:tiny",
                "--config.num_train_step=5",
                f"--workdir={tmp_path}/d",
            ],
            "unknown config key 'num_train_step' (from --config.num_train_step=5): --config has no such "
            "field; did you mean 'num_train_steps'?",
        ),
        (
            ["pretrain", "--config=configs/pretrain.py:tiny", f"--workdir={text}"],
            f"--workdir {text} is a file, not a folder",
        ),
        (
            ["finetune", "--config=configs/bbc.py", f"--workdir={text}"],
            f"--workdir {text} is a file, not a folder",
        ),
    ]
    for args, expected in cases:
        proc = bert_jax(*args)
        mine = [ln for ln in proc.stderr.splitlines() if ln.startswith("bert-jax ")]
        assert proc.returncode == 1, (args, proc.stderr[-2000:])
        assert len(mine) == 1 and expected in mine[0] and "Traceback" not in proc.stderr, (
            args,
            proc.stderr[-2000:],
        )
        assert mine[0].startswith(f"bert-jax {args[0]}: error: ")
    # The debug switch shows where it came from.
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", *cases[3][0]],
        capture_output=True, text=True, cwd=ROOT, timeout=300, env={**os.environ, "BERT_JAX_DEBUG": "1"},
    )  # fmt: skip
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_a_clean_run_prints_only_its_own_lines(tmp_path) -> None:
    """On a machine with no accelerator, with libtpu installed (the test extra) and nothing
    set in the environment: no TPU probing, no TensorFlow or XLA start-up logs."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "TF_CPP_MIN_LOG_LEVEL")}
    args = ["pretrain", "--config=configs/pretrain.py:tiny", f"--workdir={tmp_path}"]
    args += ["--config.num_train_steps=2", "--config.eval_every_steps=0", "--config.eval_steps=1"]
    args += [f"--config.data.cache_dir={tmp_path / 'cache'}"]  # prepared here: its progress bar shows
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    others = [ln for ln in proc.stderr.replace("\r", "\n").splitlines() if ln and "prepare-data" not in ln]
    assert others == [], proc.stderr[-3000:]  # only the preparation's progress bar
    assert proc.stdout.splitlines()[0].startswith("preparing wiki_excerpt data")
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith("step ")], proc.stdout
