"""Bad entries in the downstream suite's files: an answer not in its context, an empty
context, a label outside the label set, a duplicated id, an entry not in the task's
format: each counted and skipped with one warning line per kind, and a file with nothing
usable left refused in one line."""

from __future__ import annotations

import bz2
import json
from pathlib import Path

import pytest

from bert_jax.tasks import downstream_readers

DISFL = "What is {q} ?  \ncontext: {c} "


def _task_file(tmp_path: Path, examples: list) -> str:
    path = tmp_path / "task.json"
    path.write_text(json.dumps({"name": "t", "examples": examples}))
    return str(path)


def _warnings(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if ln.startswith("warning:")]


def test_qa_answer_not_in_context_empty_context_and_duplicates(tmp_path, capsys) -> None:
    good = [
        {
            "input": DISFL.format(q="the count", c="In 1466 , perhaps 40 , 000 people died ."),
            "target": "40,000",
        },
        {"input": DISFL.format(q="the colour", c="The sky is blue today ."), "target": "unknown"},
    ]
    bad = [
        {"input": DISFL.format(q="the city", c="The sky is blue ."), "target": "Paris"},
        {"input": DISFL.format(q="the town", c="Rain falls ."), "target": "Rome"},
        {"input": DISFL.format(q="the river", c="   "), "target": "Nile"},
        good[0],
        {"input": "no context marker here", "target": "x"},
    ]
    records = downstream_readers.read_disfl_qa(_task_file(tmp_path, good + bad))
    assert [(r.answer, r.answer_start) for r in records] == [("40 , 000", 18), ("", -1)]
    assert records[0].text_b[18:26] == "40 , 000" and records[0].text_a == "What is the count ?"
    lines = _warnings(capsys.readouterr().out)
    assert len(lines) == 4  # one per kind
    assert any(
        "2 examples skipped: an answer that is not in its context (first: example 2)" in ln for ln in lines
    )
    assert any("1 example skipped: an empty context or text (first: example 4)" in ln for ln in lines)
    assert any("1 example skipped: a duplicated id (first: disfl_qa-" in ln for ln in lines)
    assert any("1 example skipped: no question, context and target (first: example 6)" in ln for ln in lines)
    assert all("task.json" in ln for ln in lines)


def test_cpkc_empty_context_and_nothing_usable_is_refused(tmp_path, capsys) -> None:
    examples = [
        {"input": "\nQuestion: who?\nContext:  ", "target": "Ann"},
        {"input": "\nQuestion: who else?\nContext: Bob ran .", "target": "Carl"},
    ]
    with pytest.raises(ValueError) as refused:
        downstream_readers.read_cpkc(_task_file(tmp_path, examples))
    message = str(refused.value)
    assert "\n" not in message
    assert message.endswith(
        "task.json: no usable examples (1 an empty context or text, 1 an answer that is not in its context)"
    )
    assert len(_warnings(capsys.readouterr().out)) == 2


def test_labels_outside_the_label_set_are_skipped(tmp_path, capsys) -> None:
    claim = "Page: The tower is 300 m tall .\nClaim: The tower is tall ."
    examples = [
        {"input": claim, "target_scores": {"True": 1, "False": 0, "Neither": 0}},
        {"input": claim.replace("300", "301"), "target_scores": {"Maybe": 1, "True": 0}},
        {"input": claim.replace("300", "302"), "target_scores": {"True": 1, "False": 1, "Neither": 0}},
        {"input": claim.replace("300", "303"), "target_scores": "True"},
    ]
    records = downstream_readers.read_vitaminc(_task_file(tmp_path, examples))
    assert [(r.text_a, r.text_b, r.label, r.group) for r in records] == [
        ("The tower is 300 m tall .", "The tower is tall .", 0, "Page")
    ]
    (line,) = _warnings(capsys.readouterr().out)
    assert "3 examples skipped: a label other than True, False, Neither (first: example 1)" in line


def test_dialog_duplicates_and_empty_lines(tmp_path, capsys) -> None:
    tail = ' ----- In the preceding conversation, were the sentences "{a}" and "{b}" '
    one = {"input": "Hi. Hello there." + tail.format(a="Hi.", b="Hello there."),
           "target_scores": {"same": 0, "different": 1}}  # fmt: skip
    examples = [
        one,
        one,
        {"input": "Go." + tail.format(a="", b="Go."), "target_scores": {"same": 1, "different": 0}},
        {"input": "Yes. No." + tail.format(a="Yes.", b="No."), "target_scores": {"same": 2}},
    ]
    records = downstream_readers.read_movie_dialog(_task_file(tmp_path, examples))
    assert [(r.text_a, r.text_b, r.label) for r in records] == [("Hi.", "Hello there.", 0)]
    lines = _warnings(capsys.readouterr().out)
    assert len(lines) == 3
    assert (
        sum("a duplicated id" in ln or "an empty context" in ln or "a label other" in ln for ln in lines) == 3
    )


def test_rotten_tomatoes_drops_plots_and_skips_bad_categories(tmp_path, capsys) -> None:
    rows = [
        "category,text,movie_name,has_plot_and_reviews",
        "plot,A long synopsis.,film_a,True",
        "fresh,A joy from start to end.,film_a,True",
        "rotten,Dull and long.,film_b,False",
        "neutral,Fine I guess.,film_b,False",
        "fresh,,film_c,False",
        "rotten,Dull and long.,film_c,False",
    ]
    path = tmp_path / "rt.csv.bz2"
    path.write_bytes(bz2.compress("\n".join(rows).encode()))
    records = downstream_readers.read_rotten_tomatoes(str(path))
    assert [(r.text_a, r.label, r.group) for r in records] == [
        ("A joy from start to end.", 1, "film_a"),
        ("Dull and long.", 0, "film_b"),
    ]
    lines = _warnings(capsys.readouterr().out)
    assert len(lines) == 3
    assert any(
        "1 example skipped: a category other than fresh, rotten, plot (first: line 5)" in ln for ln in lines
    )
    assert any("1 example skipped: an empty context or text (first: line 6)" in ln for ln in lines)
    assert any("1 example skipped: a duplicated id" in ln for ln in lines)
    path.write_bytes(bz2.compress(b"label,sentence\n1,hello\n"))
    with pytest.raises(ValueError, match=r"rt\.csv\.bz2: expected the columns category, text and movie_name"):
        downstream_readers.read_rotten_tomatoes(str(path))


def test_a_file_that_is_not_a_task_file_is_one_line(tmp_path) -> None:
    path = tmp_path / "task.json"
    path.write_text('{"examples": [')
    with pytest.raises(ValueError, match=r"task\.json: not valid JSON"):
        downstream_readers.read_vitaminc(str(path))
    path.write_text('{"items": []}')
    with pytest.raises(ValueError, match=r"task\.json: not a BIG-bench task file"):
        downstream_readers.read_vitaminc(str(path))
    path.write_text('{"examples": []}')
    with pytest.raises(ValueError, match=r"task\.json: no usable examples \(it has none\)"):
        downstream_readers.read_vitaminc(str(path))
