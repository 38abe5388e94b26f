"""The `bert-jax` command: subcommands, their flags, and errors for misuse."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bert_jax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bert_jax", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


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
    assert proc.returncode != 0 and "--src" in proc.stderr


def test_tokenize_writes_one_id_list_per_line(tmp_path) -> None:
    text = tmp_path / "in.txt"
    text.write_text("Hello world!\nUnaffable\n")
    out = tmp_path / "out.jsonl"
    proc = bert_jax("tokenize", f"--input={text}", f"--output={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == [[7592, 2088, 999], [14477, 20961, 3468]]
