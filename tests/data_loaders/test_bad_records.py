"""Every kind of bad input record: a DataError naming file, line and field (on_error=raise), or
skipped and counted with the good records kept (on_error=skip); never a wrong ground truth."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_loaders import data_cfg

from mbs.data import DataError, load_problems
from mbs.verify import grade

REPO = Path(__file__).resolve().parents[2]
GOOD_1 = b'{"id": "a", "problem": "1+1?", "answer": "2"}\n'
GOOD_3 = b'{"id": "c", "problem": "2+2?", "answer": 4}\n'

#: (case, line 2 of the file, text the error must hold)
BAD_LINES = [
    ("gt list", b'{"id": "x", "problem": "p", "answer": ["2", "3"]}', "field 'answer' (data.fields.ground_truth) must be a string or a number, got list"),
    ("gt dict", b'{"id": "x", "problem": "p", "answer": {"v": 2}}', "must be a string or a number, got dict"),
    ("gt bool", b'{"id": "x", "problem": "p", "answer": true}', "must be a string or a number, got bool"),
    ("gt NaN", b'{"id": "x", "problem": "p", "answer": NaN}', "must be a string or a number, got the number nan"),
    ("gt Infinity", b'{"id": "x", "problem": "p", "answer": Infinity}', "got the number inf"),
    ("id list", b'{"id": ["x"], "problem": "p", "answer": "2"}', "field 'id' (data.fields.id) must be a string or an integer, got list"),
    ("id float", b'{"id": 1.5, "problem": "p", "answer": "2"}', "field 'id' (data.fields.id) must be a string or an integer"),
    ("id bool", b'{"id": false, "problem": "p", "answer": "2"}', "must be a string or an integer, got bool"),
    ("prompt number", b'{"id": "x", "problem": 12, "answer": "2"}', "field 'problem' (data.fields.prompt) must be a non-empty string"),
    ("solution list", b'{"id": "x", "problem": "p", "answer": "2", "solution": ["a"]}', "field 'solution' (data.fields.solution) must be a string"),
    ("not UTF-8", b'{"id": "x", "problem": "caf\xe9?", "answer": "2"}', "not UTF-8 text (byte 0xe9 at column 28)"),
    ("not JSON", b'{"id": "x", "problem": ', "invalid JSON"),
    ("not an object", b'["x", "p", "2"]', "expected an object, got list"),
    ("long prompt", b'{"id": "x", "problem": "' + b"x" * 10_000_001 + b'", "answer": "2"}', "is 10000001 characters, above data.max_prompt_chars=200000"),
]


def _write(tmp_path: Path, line: bytes) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(GOOD_1 + line + b"\n" + GOOD_3)
    return path


@pytest.mark.parametrize("case,line,expected", BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_bad_record_raises_naming_file_line_and_field(tmp_path, case, line, expected):
    path = _write(tmp_path, line)
    with pytest.raises(DataError) as info:
        load_problems(data_cfg(path=str(path), max_prompt_chars=200000))
    assert f"{path} line 2: " in str(info.value) and expected in str(info.value), str(info.value)[:300]


@pytest.mark.parametrize("case,line,expected", BAD_LINES, ids=[c[0] for c in BAD_LINES])
def test_bad_record_is_skipped_and_counted(tmp_path, case, line, expected):
    path = _write(tmp_path, line)
    problems, report = load_problems(data_cfg(path=str(path), on_error="skip", max_prompt_chars=200000))
    assert [(p.id, p.ground_truth) for p in problems] == [("toy/a", "2"), ("toy/c", "4")]
    assert report.skipped == 1 and expected in report.errors[0]


@pytest.mark.parametrize("value,truth", [(2, "2"), (2.5, "2.5"), (3.0, "3"), (-7, "-7"), (1e20, "1e+20"), ("\\frac{1}{2}", "\\frac{1}{2}")])
def test_numbers_are_ground_truths_that_grade_right(tmp_path, value, truth):
    path = tmp_path / "n.jsonl"
    path.write_text(json.dumps({"id": 7, "problem": "p", "answer": value}) + "\n")
    (p,), _ = load_problems(data_cfg(path=str(path)))
    assert p.id == "toy/7" and p.ground_truth == truth
    assert grade(f"\\boxed{{{truth}}}", p.ground_truth, "math").score == 1.0


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD_1 + GOOD_3)
    problems, _ = load_problems(data_cfg(path=str(path)))
    assert [p.id for p in problems] == ["toy/a", "toy/c"]


def test_parquet_nan_ground_truth_is_a_bad_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "problem": ["p", "q"], "answer": [2.0, math.nan]}), path)
    with pytest.raises(DataError, match=r"x\.parquet row 1: field 'answer' .* got the number nan"):
        load_problems(data_cfg(loader="parquet", path=str(path)))


@pytest.mark.parametrize(
    "loader,make,expected",
    [
        ("jsonl", lambda p: p.mkdir(), "is a directory; a JSONL loader reads one .jsonl file (data.path)"),
        ("parquet", lambda p: p.mkdir(), "is a directory; the parquet loader reads one .parquet file"),
        ("parquet", lambda p: p.write_text('{"id": 1}\n'), "not a readable parquet file"),
        ("hf_disk", lambda p: p.write_text("x"), "not a folder; the hf_disk loader reads a datasets.save_to_disk folder"),
        ("hf_disk", lambda p: p.mkdir(), "not a datasets.save_to_disk folder"),
    ],
)
def test_wrong_kind_of_path(tmp_path, loader, make, expected):
    path = tmp_path / "input"
    make(path)
    with pytest.raises(DataError) as info:
        load_problems(data_cfg(loader=loader, path=str(path)))
    assert str(path) in str(info.value) and expected in str(info.value)


def test_cli_bad_input_exits_2_naming_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(GOOD_1 + b'{"id": "x", "problem": "p", "answer": ["2"]}\n')
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [
            sys.executable, "-c", "from mbs.cli import calibrate; calibrate()",
            "data=jsonl", f"data.path={path}", f"hydra.run.dir={tmp_path / 'run'}", f"paths.root={tmp_path}",
            "calibrate.figures=false",
        ],
        check=False, capture_output=True, text=True, env=env, timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert f"{path} line 2: field 'answer' (data.fields.ground_truth) must be a string or a number, got list" in out
    assert "Traceback" not in out
