"""SQuAD: reading, windows, span post-processing and the official EM/F1, on SQuAD-format
files built from real BBC News articles (answers are real spans with correct offsets)."""

from __future__ import annotations

import glob
import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bert_jax.commands import run_settings
from bert_jax.data import tokenization
from bert_jax.tasks import scorers, squad
from bert_jax.tasks.text import basic_tokenize, final_text
from tests.conftest import ROOT
from tests.helpers.task_data import bbc_articles, build_squad


def _task_data(config):
    """What the task reads of a fine-tuning config (resolved at the command's edge)."""
    return run_settings.finetune_settings(config).task_data


NLP_METRICS = Path(importlib.util.find_spec("nlp").origin).parent / "metrics"  # not imported


def _official(version: str):
    """The official evaluate script shipped verbatim in nlp==0.4.0, as a module."""
    pattern = "squad/*/evaluate.py" if version == "1.1" else "squad_v2/*/evaluate.py"
    path = sorted(glob.glob(str(NLP_METRICS / pattern)))[0]
    spec = importlib.util.spec_from_file_location(f"official_squad_{version}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


def _perturbed(dataset: dict, seed: int, allow_missing: bool) -> dict[str, str]:
    rng = random.Random(seed)
    preds = {}
    for article in dataset["data"]:
        for p in article["paragraphs"]:
            words = p["context"].split()
            for qa in p["qas"]:
                gold = qa["answers"][0]["text"] if qa["answers"] else ""
                other = " ".join(words[(i := rng.randrange(len(words) - 3)) : i + rng.randint(1, 3)])
                choice = rng.randrange(10)
                if choice == 9 and allow_missing:
                    continue
                preds[qa["id"]] = [
                    gold,
                    gold.upper(),
                    f"the {gold}",
                    f"{gold} {rng.choice(words)}",
                    " ".join(gold.split()[1:]),
                    other,
                    "",
                    f"{gold}.",
                    f"An {gold}!",
                    gold,
                ][choice]
    return preds


def _official_v2(module, data, preds, na_probs, thresh=1.0) -> dict:
    """The official v2.0 `main()` composition, on in-memory objects."""
    na = na_probs if na_probs is not None else {k: 0.0 for k in preds}
    has = module.make_qid_to_has_ans(data)
    exact_raw, f1_raw = module.get_raw_scores(data, preds)
    exact = module.apply_no_ans_threshold(exact_raw, na, has, thresh)
    f1 = module.apply_no_ans_threshold(f1_raw, na, has, thresh)
    out = module.make_eval_dict(exact, f1)
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [k for k, v in has.items() if v == wanted]
        if qids:
            module.merge_eval(out, module.make_eval_dict(exact, f1, qid_list=qids), prefix)
    if na_probs is not None:
        module.find_all_best_thresh(out, preds, exact_raw, f1_raw, na, has)
    return dict(out)


def test_squad_v1_scores_equal_the_official_script() -> None:
    official, _ = _official("1.1")
    dataset = build_squad(version_2=False)
    n_questions = sum(len(p["qas"]) for a in dataset["data"] for p in a["paragraphs"])
    assert n_questions >= 40
    for seed in range(25):
        preds = _perturbed(dataset, seed, allow_missing=True)
        ours = scorers.squad_v1(dataset["data"], preds)
        assert ours == official.evaluate(dataset["data"], preds)  # bit-identical
    gold = {
        qa["id"]: qa["answers"][0]["text"]
        for a in dataset["data"]
        for p in a["paragraphs"]
        for qa in p["qas"]
    }
    assert scorers.squad_v1(dataset["data"], gold) == {"exact_match": 100.0, "f1": 100.0}
    # Hand-checked values of the definitions (articles and punctuation are ignored).
    one = [{"paragraphs": [{"qas": [{"id": "a", "answers": [{"text": "the Big Apple"}]}]}]}]
    assert scorers.squad_v1(one, {"a": "big apple!"}) == {"exact_match": 100.0, "f1": 100.0}
    assert scorers.squad_v1(one, {"a": "apple pie"})["f1"] == pytest.approx(50.0)


def test_squad_v2_scores_equal_the_official_script() -> None:
    official, _ = _official("2.0")
    dataset = build_squad(version_2=True)
    rng = np.random.default_rng(0)
    for seed in range(25):
        preds = _perturbed(dataset, seed, allow_missing=False)
        na = {k: float(np.round(rng.random(), 1)) for k in preds}  # rounding makes ties
        thresh = [1.0, 0.5, 0.0][seed % 3]
        ours = scorers.squad_v2(dataset["data"], preds, na, thresh)
        assert ours == _official_v2(official, dataset["data"], preds, na, thresh)
        assert scorers.squad_v2(dataset["data"], preds) == _official_v2(
            official, dataset["data"], preds, None
        )
    preds = _perturbed(dataset, 0, allow_missing=True)
    with pytest.raises(ValueError, match="have no prediction"):
        scorers.squad_v2(dataset["data"], preds)


def _write(tmp_path: Path, name: str, obj) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return str(path)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )


def test_eval_squad_command_prints_the_official_json(tmp_path) -> None:
    for version in ("1.1", "2.0"):
        dataset = build_squad(version_2=version == "2.0")
        data = _write(tmp_path, f"dev-{version}.json", dataset)
        preds = _perturbed(dataset, 3, allow_missing=version == "1.1")
        pred = _write(tmp_path, f"pred-{version}.json", preds)
        extra = []
        if version == "2.0":
            na = {k: round(i * 0.37 % 1, 2) for i, k in enumerate(preds)}
            extra = [_write(tmp_path, "na.json", na)]
        _, script = _official(version)
        want = _run(script, data, pred, *(["--na-prob-file", extra[0]] if extra else []))
        got = _run("-m", "bert_jax", "eval-squad", f"--version={version}", data, pred,
                   *([f"--na_prob_file={extra[0]}"] if extra else []))  # fmt: skip
        assert want.returncode == 0 and got.returncode == 0, got.stderr[-2000:]
        assert got.stdout == want.stdout and got.stdout.startswith("{")


def test_eval_squad_names_the_file_each_error_is_about(tmp_path) -> None:
    empty = _write(tmp_path, "empty.json", {"version": "1.1", "data": []})
    pred = _write(tmp_path, "pred.json", {})
    got = _run("-m", "bert_jax", "eval-squad", empty, pred)
    assert got.returncode == 1 and f"error: DATA_FILE {empty} holds no questions" in got.stderr
    dataset = build_squad(version_2=True, n_articles=1)
    data = _write(tmp_path, "dev.json", dataset)
    ids = [qa["id"] for p in dataset["data"][0]["paragraphs"] for qa in p["qas"]]
    some = _write(tmp_path, "some.json", {ids[0]: ""})
    got = _run("-m", "bert_jax", "eval-squad", "--version=2.0", data, some)
    line = f"error: PRED_FILE {some}: {len(ids) - 1} question(s) have no prediction: "
    assert got.returncode == 1 and line in got.stderr and f"(of DATA_FILE {data})" in got.stderr
    whole = _write(tmp_path, "whole.json", dict.fromkeys(ids, ""))
    na = _write(tmp_path, "na.json", {ids[0]: 0.5})
    got = _run("-m", "bert_jax", "eval-squad", "--version=2.0", data, whole, f"--na_prob_file={na}")
    assert (
        got.returncode == 1 and f"error: --na_prob_file {na}: the no-answer probabilities lack" in got.stderr
    )
    assert len(got.stderr.strip().splitlines()) == 1


def test_wrong_answer_start_names_file_and_question(tmp_path) -> None:
    dataset = build_squad(version_2=False, n_articles=2)
    qa = dataset["data"][1]["paragraphs"][0]["qas"][1]
    qa["answers"][0]["answer_start"] += 2
    path = _write(tmp_path, "bad.json", dataset)
    with pytest.raises(ValueError, match=rf"bad\.json: question {qa['id']}: answer .* does not match"):
        squad.read_examples(path, version_2=False)
    # Scoring accepts what the official script accepts (it reads only the answer text).
    pred = _write(tmp_path, "p.json", {qa["id"]: qa["answers"][0]["text"]})
    want = _run(_official("1.1")[1], path, pred)
    got = _run("-m", "bert_jax", "eval-squad", path, pred)
    assert want.returncode == 0 and got.returncode == 0, got.stderr[-2000:]
    assert got.stdout == want.stdout
    v2 = _write(tmp_path, "v2.json", build_squad(version_2=True, n_articles=1))
    with pytest.raises(ValueError, match=r"v2\.json: question q0-0-none is unanswerable .* version 2\.0"):
        squad.read_examples(v2, version_2=False)
    (tmp_path / "broken.json").write_text('{"data": [')
    with pytest.raises(ValueError, match=r"broken\.json: not valid JSON"):
        squad.read_examples(str(tmp_path / "broken.json"), version_2=True)


def test_basic_tokenizer_and_final_text_match_the_reference() -> None:
    from transformers.models.bert.tokenization_bert_legacy import BasicTokenizer

    from tests.helpers.squad_reference import get_final_text

    texts = [p for _, ps in bbc_articles(12) for p in ps]
    texts += ["Café Zürich's “naïve” 東京 façade—ok?", "Ünïcödé\u00a0spaces\tand\u200bzero-width"]
    for lower in (True, False):
        ref = BasicTokenizer(do_lower_case=lower, tokenize_chinese_chars=True, strip_accents=None)
        for text in texts:
            assert basic_tokenize(text, lower) == ref.tokenize(text)
    rng = random.Random(0)
    cases = 0
    for text in texts:
        words = text.split()
        for _ in range(15):
            i = rng.randrange(len(words))
            orig = " ".join(words[i : i + rng.randint(1, 4)])
            basic = basic_tokenize(orig, True)
            j = rng.randrange(len(basic))
            pred = " ".join(basic[j : j + rng.randint(1, 3)])
            for candidate in (pred, pred + "x", pred.upper()):
                assert final_text(candidate, orig, True) == get_final_text(candidate, orig, True)
                cases += 1
    assert cases > 500


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.load_tokenizer()


def test_windows_cover_every_piece_once_and_hold_the_answer(tokenizer, tmp_path) -> None:
    path = _write(tmp_path, "train.json", build_squad(version_2=True))
    _, examples = squad.read_examples(path, version_2=True)
    arrays, windows = squad.featurize(examples, tokenizer, 64, 16, 16, training=True)
    special = tokenizer.special
    longer = sum(len(q) > 16 for q in tokenizer.tokenize([ex.question for ex in examples]))
    assert windows.questions_cut == longer > 0  # the questions cut at max_query_length
    n_windows = np.bincount(windows.example, minlength=len(examples))
    assert (n_windows >= 1).all() and n_windows.max() >= 4  # long paragraphs → several windows
    for i, ex in enumerate(examples):
        rows = np.flatnonzero(windows.example == i)
        # The question: truncated to 16 pieces between [CLS] and [SEP] in every window.
        query = tokenizer.tokenize([ex.question])[0][:16]
        for r in rows:
            ids = arrays["input_ids"][r]
            assert ids[0] == special.cls and list(ids[1 : 1 + len(query)]) == query
            assert ids[1 + len(query)] == special.sep and ids[windows.n_tokens[r] - 1] == special.sep
            seg = arrays["segment_ids"][r][: windows.n_tokens[r]]
            assert (seg == (np.arange(len(seg)) >= len(query) + 2)).all()
        # Every passage piece is "max context" in exactly one window; all words are covered.
        words = np.concatenate([windows.token_to_word[r][windows.max_context[r]] for r in rows])
        pieces_per_word = [len(tokenizer.tokenize([w])[0]) for w in ex.doc_tokens]
        assert list(np.bincount(words, minlength=len(ex.doc_tokens))) == pieces_per_word
        # The answer's pieces sit at the target positions of each window that holds it.
        answer = tokenizer.tokenize([ex.answer_text])[0] if ex.answer_text else []
        inside = [r for r in rows if arrays["start_positions"][r] > 0]
        if ex.is_impossible:
            assert not inside and (arrays["end_positions"][rows] == 0).all()
            continue
        assert inside
        for r in inside:
            s, e = arrays["start_positions"][r], arrays["end_positions"][r]
            assert list(arrays["input_ids"][r][s : e + 1]) == answer


def test_gold_logits_give_the_gold_answers_back(tokenizer, tmp_path) -> None:
    dataset = build_squad(version_2=True)
    path = _write(tmp_path, "dev.json", dataset)
    data, examples = squad.read_examples(path, version_2=True)
    train_arrays, _ = squad.featurize(examples, tokenizer, 64, 16, 16, training=True)
    arrays, windows = squad.featurize(examples, tokenizer, 64, 16, 16, training=False)
    assert (arrays["input_ids"] == train_arrays["input_ids"]).all()
    rng = np.random.default_rng(0)
    start = rng.normal(size=arrays["input_ids"].shape).astype(np.float32)
    end = rng.normal(size=arrays["input_ids"].shape).astype(np.float32)
    rows = np.arange(len(start))
    start[rows, train_arrays["start_positions"]] += 20.0
    end[rows, train_arrays["end_positions"]] += 20.0
    preds, null_odds, nbest = squad.predict_answers(
        examples, windows, arrays["input_ids"], start, end, tokenizer.vocab, version_2=True
    )
    for ex in examples:
        assert preds[ex.qas_id] == ex.answer_text  # original case, spacing and symbols
        assert (null_odds[ex.qas_id] > 0) == ex.is_impossible
        assert len(nbest[ex.qas_id]) <= 21  # n_best_size, then the null answer (v2.0)
        assert sum(c["probability"] for c in nbest[ex.qas_id]) == pytest.approx(1.0)
    scores = scorers.squad_v2(data, preds, null_odds)
    assert scores["exact"] == 100.0 and scores["best_f1"] == 100.0
    # v1.1 decoding of the same logits: spans only, no null answer.
    v1_preds, _, _ = squad.predict_answers(
        examples, windows, arrays["input_ids"], start, end, tokenizer.vocab
    )
    assert all(v1_preds[e.qas_id] == e.answer_text for e in examples if not e.is_impossible)
    assert all(v1_preds[e.qas_id] for e in examples)


def test_span_search_respects_max_answer_length_and_max_context(tokenizer) -> None:
    vocab = ["red", "blue", "green", "house", "river", "city", "music", "water", "light", "stone"]
    context = " ".join(vocab[(i * 7) % 10] for i in range(40))  # one WordPiece per word
    ex = squad.SquadExample("q", "which word?", context.split(), "", -1, -1, False)
    arrays, windows = squad.featurize([ex], tokenizer, 32, 8, 8)
    assert len(arrays["input_ids"]) > 2
    start = np.zeros(arrays["input_ids"].shape, np.float32)
    end = np.zeros_like(start)
    doc = windows.token_to_word >= 0
    first = int(np.argmax(doc[0]))
    start[0, first] = 10.0  # best start: first passage piece of window 0
    end[0, first + 6] = 10.0
    preds, _, _ = squad.predict_answers([ex], windows, arrays["input_ids"], start, end, tokenizer.vocab,
                                        max_answer_length=3)  # fmt: skip
    span = preds["q"].split()
    assert 1 <= len(span) <= 3 and span[0] == ex.doc_tokens[windows.token_to_word[0, first]].split()[0]
    preds, _, _ = squad.predict_answers([ex], windows, arrays["input_ids"], start, end, tokenizer.vocab,
                                        max_answer_length=30)  # fmt: skip
    assert preds["q"] == " ".join(
        ex.doc_tokens[windows.token_to_word[0, first] : windows.token_to_word[0, first + 6] + 1]
    )


def test_task_scores_only_the_questions_it_kept(tokenizer, tmp_path) -> None:
    from configs import squad as squad_config

    (tmp_path / "dev-v2.0.json").write_text(json.dumps(build_squad(version_2=True, n_articles=2)))
    config = squad_config.get_config("2.0")
    config.update(dict(data_dir=str(tmp_path), max_seq_length=64, doc_stride=16, max_query_length=16))
    config.max_eval_examples = 3
    task = squad.SquadTask(version_2=True)
    split = task.load(_task_data(config), tokenizer, "dev")
    assert len(split.meta.examples) == 3 and "start_positions" not in split.arrays
    zeros = np.zeros(split.arrays["input_ids"].shape, np.float32)
    scores = task.score((zeros, zeros), split, str(tmp_path / "out"))
    assert scores["total"] == 3.0
    assert len(json.loads((tmp_path / "out" / "predictions.json").read_text())) == 3
    assert set(json.loads((tmp_path / "out" / "null_odds.json").read_text())) == {
        e.qas_id for e in split.meta.examples
    }


def test_the_config_takes_the_version_as_users_write_it() -> None:
    from configs import squad as squad_config

    for written, task in (("1.1", "squad1.1"), ("v1.1", "squad1.1"), ("1", "squad1.1"), ("V2", "squad2.0")):
        assert squad_config.get_config(written).task == task
    with pytest.raises(
        ValueError, match=r"^SQuAD version '3': choose configs/squad.py:1.1 or configs/squad.py:2.0$"
    ):
        squad_config.get_config("3")
