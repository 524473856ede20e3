"""User-facing errors: one base class, exit status 2 with the message and no traceback,
the traceback back with HYDRA_FULL_ERROR=1, and missing extras naming their pip install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mbs.cli import _run
from mbs.errors import (
    ConfigError,
    InputNotFoundError,
    MissingExtraError,
    UnknownNameError,
    UserError,
    require_extra,
)

REPO = Path(__file__).resolve().parents[1]


def _cli(entry: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", f"import sys; sys.argv[0] = 'mbs-{entry}'; from mbs.cli import {entry}; {entry}()", *args],
        capture_output=True, text=True, timeout=900, env={**os.environ, **(env or {})}, cwd=cwd, check=False,
    )


def test_stage_errors_share_the_user_error_base():
    from mbs.data import DataError
    from mbs.export.sources import SourceError
    from mbs.export.verl_schema import SchemaError
    from mbs.llm.base import BackendError
    from mbs.records import RecordError
    from mbs.service import ServiceError
    from mbs.shards import MergeError
    from mbs.training.launch import TrainError
    from mbs.verify import UnknownVerifierError

    for cls in (DataError, SourceError, SchemaError, BackendError, RecordError, ServiceError, MergeError, TrainError,
                UnknownVerifierError, ConfigError, InputNotFoundError, MissingExtraError, UnknownNameError):
        assert issubclass(cls, UserError), cls
    # they stay what callers caught before
    assert issubclass(DataError, ValueError) and issubclass(ConfigError, ValueError)
    assert issubclass(TrainError, RuntimeError) and issubclass(InputNotFoundError, FileNotFoundError)
    assert str(UnknownNameError("method='x' is not a synthesis method")) == "method='x' is not a synthesis method"


def test_missing_extra_names_its_pip_install():
    with pytest.raises(MissingExtraError) as info:
        require_extra("verl_not_installed_here", "mbs-train")
    assert "pip install verl_not_installed_here" in str(info.value)
    msg = str(MissingExtraError("verl", "mbs-train", where="on the training machine"))
    assert "Install .[train] on the training machine" in msg and "pip install -e '.[train]'" in msg
    assert "pip install -e '.[gpu]'" in str(MissingExtraError("vllm", "backend=vllm"))
    assert "pip install -e '.[local]'" in str(MissingExtraError("llama_cpp", "backend=llamacpp"))
    require_extra("omegaconf", "mbs")  # installed: no error


def test_run_ends_a_user_error_with_exit_2(monkeypatch, capsys):
    import types

    module = types.ModuleType("mbs_fake_stage")

    def run(cfg):
        raise ConfigError("eval.k must be >= 1, got 0")

    module.run = run
    monkeypatch.setitem(sys.modules, "mbs_fake_stage", module)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as info:
        _run("mbs_fake_stage", None)
    assert info.value.code == 2
    assert "error: eval.k must be >= 1, got 0" in capsys.readouterr().err
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(ConfigError, match="eval.k"):
        _run("mbs_fake_stage", None)


def test_a_bug_keeps_its_traceback(monkeypatch):
    import types

    module = types.ModuleType("mbs_buggy_stage")
    module.run = lambda cfg: {}["missing"]
    monkeypatch.setitem(sys.modules, "mbs_buggy_stage", module)
    with pytest.raises(KeyError):
        _run("mbs_buggy_stage", None)


def test_console_script_prints_the_message_without_traceback(tmp_path):
    args = [f"train.data_dir={tmp_path / 'nowhere'}", f"hydra.run.dir={tmp_path / 'run'}"]
    res = _cli("train", *args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "mbs-train: error:" in res.stderr and "nowhere" in res.stderr and "train.parquet" in res.stderr
    assert "Traceback" not in res.stderr + res.stdout and "Error executing job" not in res.stderr
    full = _cli("train", *args, env={"HYDRA_FULL_ERROR": "1"}, cwd=tmp_path)
    assert full.returncode == 1 and "Traceback" in full.stderr and "InputNotFoundError" in full.stderr


def test_bad_config_value_of_another_stage_is_exit_2(tmp_path):
    res = _cli("figures", f"hydra.run.dir={tmp_path / 'fig'}", cwd=tmp_path)
    assert res.returncode == 2 and "mbs-figures: error: mbs-figures needs run_dir=RUN" in res.stderr
    assert "Traceback" not in res.stderr
