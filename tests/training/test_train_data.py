"""mbs-train opens and checks its parquet before any model loads or any file is written (issue 46):
a corrupted or truncated file, wrong columns, a row without a field, rows of a source the export
does not record, and training data left without a row for the training policy each end the start
naming the file, row and field; the rows TRL leaves out are named in a warning. No model is loaded:
every start here ends (or, dry, prints) before one would."""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.exports import HF_POLICY, toy_rows, write_export

from mbs.export.verl_schema import SchemaError, read_verl_rows, write_parquet
from mbs.io import read_summary
from mbs.stages.train import run
from mbs.training.launch import TrainError
from mbs.training.train_data import check_train_data

#: A second calibration of the export, by another model: its rows are not the training policy's.
OTHER = {**HF_POLICY, "source": "calibrate_other", "model": "Qwen/Qwen3-4B", "policy": "qwen3-4b"}
ENGINES = (["train.engine=verl"], ["train.engine=trl"])


def _start(make_cfg, data_dir, *more: str):
    return run(make_cfg("train", [f"train.data_dir={data_dir}", *more], out="run"))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_corrupted_or_truncated_parquet_is_named_before_anything_is_written(make_cfg, tmp_path, engine):
    export = write_export(tmp_path / "export", rows=4)
    path = export / "train.parquet"
    whole = path.read_bytes()
    for broken in (whole[: len(whole) // 2], b"not a parquet file at all", whole[:-9] + b"\0" * 9):
        path.write_bytes(broken)
        with pytest.raises(SchemaError, match=rf"{path}: not a readable parquet file \(truncated or corrupted\?\)"):
            _start(make_cfg, export, *engine)
        assert not (tmp_path / "run").exists()
    # a dry run prints the plan and keeps the reason in its summary
    out = _start(make_cfg, export, *engine, "train.dry_run=true")
    assert any(f"{path}: not a readable parquet file" in w for w in read_summary(out)["warnings"])


@pytest.mark.parametrize("engine", ENGINES)
def test_wrong_columns_and_a_row_without_a_field_are_named(make_cfg, tmp_path, engine):
    export = write_export(tmp_path / "export", rows=3)
    path = export / "train.parquet"
    pq.write_table(pa.table({"question": ["1+1?"], "answer": ["2"]}), path)
    with pytest.raises(SchemaError, match=r"train.parquet: column\(s\) \['data_source', 'prompt', 'ability', 'reward_model', "
                                          r"'extra_info'\] of verl's schema missing \(columns: \['question', 'answer'\]\)"):
        _start(make_cfg, export, *engine)
    rows = toy_rows("train", 3, "calibrate")
    rows[2]["prompt"] = []
    write_parquet(rows, path)
    with pytest.raises(SchemaError, match=r"train.parquet row 2 \(id 'toy/train/2'\): prompt must be a non-empty list"):
        _start(make_cfg, export, *engine)
    rows = toy_rows("train", 3, "calibrate")
    rows[1]["reward_model"]["ground_truth"] = ""
    write_parquet(rows, path)
    with pytest.raises(SchemaError, match=r"row 1 \(id 'toy/train/1'\): reward_model.ground_truth must be a non-empty string"):
        _start(make_cfg, export, *engine)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_rows_of_a_source_the_export_does_not_record_are_refused(make_cfg, tmp_path, engine):
    export = write_export(tmp_path / "export", rows=3)
    write_parquet(toy_rows("train", 3, "calibrate") + toy_rows("train", 2, "handmade"), export / "train.parquet")
    with pytest.raises(TrainError, match=r"train.parquet: 2 row\(s\) of source\(s\) the export does not record \(\{'handmade': 2\}; "
                                         r"first: row 3, id 'toy/train/0', extra_info.source='handmade'\); the policy block of "
                                         r"its summary.json names \['calibrate'\]"):
        _start(make_cfg, export, *engine)
    assert not (tmp_path / "run").exists()


def test_rows_all_calibrated_by_another_model_say_why_none_is_left(make_cfg, tmp_path):
    """TRL trains only on the rows calibrated with the training policy: with none left, the start
    ends naming the rows left out, why, and the settings that keep them (before any model loads)."""
    export = write_export(tmp_path / "export", HF_POLICY, OTHER, rows=1)
    write_parquet(toy_rows("train", 24, "calibrate_other"), export / "train.parquet")
    with pytest.raises(TrainError, match=r"train.parquet has 24 rows, 0 of them calibrated with the training policy, fewer than "
                                         r"train.trl.prompts_per_step=1; left out: 24 row\(s\) of source 'calibrate_other': "
                                         r"calibrated with other model.*'Qwen/Qwen3-4B'.*train.calibration=SOURCE.*"
                                         r"train.all_rows=true"):
        _start(make_cfg, export, "train.engine=trl", "train.calibration=calibrate")
    assert not (tmp_path / "run").exists()


def test_rows_left_out_are_named_in_a_warning_and_the_summary(make_cfg, tmp_path, caplog):
    export = write_export(tmp_path / "export", HF_POLICY, OTHER, rows=1)
    write_parquet(toy_rows("train", 5, "calibrate") + toy_rows("train", 3, "calibrate_other"), export / "train.parquet")
    with caplog.at_level(logging.WARNING, logger="mbs"):
        out = _start(make_cfg, export, "train.engine=trl", "train.calibration=calibrate", "train.dry_run=true")
    assert "leaving out 3 of 8 training row(s), those of source 'calibrate_other': calibrated with other model" in caplog.text
    data = read_summary(out)["data"]
    assert data["rows"] == {"train": 8, "val": 1} and data["trained"] == 5
    assert data["dropped"]["calibrate_other"]["rows"] == 3 and "other model" in data["dropped"]["calibrate_other"]["why"]
    # train.all_rows keeps them, and verl reads the file whole
    kept = check_train_data(export, sources=["calibrate", "calibrate_other"], drop={}, least=1)
    assert kept.trained == 8 and kept.dropped == {}


def test_check_train_data_units(tmp_path):
    export = write_export(tmp_path / "export", rows=2)
    assert [r["extra_info"]["id"] for r in read_verl_rows(export / "train.parquet")] == ["toy/train/0", "toy/train/1"]
    write_parquet([], export / "val.parquet")
    with pytest.raises(TrainError, match=r"val.parquet has no rows"):
        check_train_data(export, sources=None, drop={})
    assert check_train_data(export, sources=None, drop={}, need_val=False).rows == {"train": 2, "val": 0}
    with pytest.raises(TrainError, match=r"has 2 rows, 2 of them calibrated with the training policy, fewer than "
                                         r"train.trl.prompts_per_step=4$"):
        check_train_data(export, sources=None, drop={}, least=4, need_val=False)
    (export / "val.parquet").unlink()
    with pytest.raises(TrainError, match=r"val.parquet not found: run mbs-export first"):
        check_train_data(export, sources=None, drop={})
