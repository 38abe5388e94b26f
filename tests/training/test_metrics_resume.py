"""A restart reopens ``metrics.jsonl`` that an earlier start may have left cut short (a local
append killed mid-write): the torn last row is dropped with a warning line, a row cut just
before its newline is kept, and the rows past the step the run resumes from are dropped
(`training.metric_writer`)."""

import json

from bert_jax.training.metric_writer import MetricsLogger


def _rows(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_torn_last_row_is_dropped_with_a_warning(tmp_path, capsys) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 7.0}\n{"step": 2, "loss": 6.9}\n{"step": 3, "lo')
    logger = MetricsLogger(str(tmp_path), 10, from_step=2)
    logger.write(3, {"loss": 6.8})
    logger.close()
    assert [r["step"] for r in _rows(path)] == [1, 2, 3]
    (line,) = capsys.readouterr().out.splitlines()
    assert line == f"warning: {path}: its last line was cut short (a killed write); dropped"


def test_a_row_cut_before_its_newline_is_kept_and_later_rows_are_dropped(tmp_path, capsys) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 7.0}\n{"step": 2, "loss": 6.9}\n{"step": 3, "loss": 6.8}')
    MetricsLogger(str(tmp_path), 10, from_step=2).close()
    assert [r["step"] for r in _rows(path)] == [1, 2] and path.read_text().endswith("\n")
    path.write_text('{"step": 1, "loss": 7.0}\n{"step": 2, "loss": 6.9}')
    logger = MetricsLogger(str(tmp_path), 10, from_step=2)
    logger.write(3, {"loss": 6.8})
    logger.close()
    assert [r["step"] for r in _rows(path)] == [1, 2, 3]
    assert capsys.readouterr().out == ""
