"""verl's RL parquet schema: one row per training problem, and the checks verl's reader needs.

verl's ``RLHFDataset`` (``verl/utils/dataset/rl_dataset.py``) reads each parquet file with
``datasets.load_dataset("parquet", ...)`` and, per row, the chat messages under
``data.prompt_key`` (``prompt``), the reward routing key ``data.reward_fn_key``
(``data_source``), ``extra_info["index"]``; its reward managers read
``reward_model["ground_truth"]`` and pass ``data_source``, the decoded response,
the ground truth and ``extra_info`` to the custom reward (:func:`mbs.rewards.compute_score`).

Columns written (:data:`SCHEMA`)::

    data_source   string                       mbs/<verifier>/<origin>
    prompt        list<struct<role, content>>  chat messages, rendered like calibration
    ability       string                       the answer type (math, mcq)
    reward_model  struct<style, ground_truth>  style "rule"
    extra_info    struct<index, split, id, source, kind, run_dir, parents, verifier, answer_type>
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from mbs.errors import UserError

#: Arrow schema of an exported file (a fixed schema: every row has every field).
SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
        (
            "extra_info",
            pa.struct(
                [
                    ("index", pa.int64()),
                    ("split", pa.string()),
                    ("id", pa.string()),
                    ("source", pa.string()),
                    ("kind", pa.string()),
                    ("run_dir", pa.string()),
                    ("parents", pa.list_(pa.string())),
                    ("verifier", pa.string()),
                    ("answer_type", pa.string()),
                ]
            ),
        ),
    ]
)


class SchemaError(UserError, ValueError):
    """An exported row lacks what verl reads (the message names the file, row and field)."""


def verl_row(
    *,
    data_source: str,
    messages: list[dict[str, str]],
    answer_type: str,
    ground_truth: str,
    index: int,
    split: str,
    problem_id: str,
    source: str,
    kind: str,
    run_dir: str,
    parents: Sequence[str],
    verifier: str,
) -> dict[str, Any]:
    """One parquet row in verl's RL schema (see the module docstring)."""
    return {
        "data_source": data_source,
        "prompt": [{"role": m["role"], "content": m["content"]} for m in messages],
        "ability": answer_type,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": int(index),
            "split": split,
            "id": problem_id,
            "source": source,
            "kind": kind,
            "run_dir": run_dir,
            "parents": list(parents),
            "verifier": verifier,
            "answer_type": answer_type,
        },
    }


def write_parquet(rows: Sequence[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Write rows with :data:`SCHEMA` via a temporary file and rename (never a torn file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    pq.write_table(pa.Table.from_pylist(list(rows), schema=SCHEMA), tmp)
    os.replace(tmp, path)
    return path


def check_verl_rows(path: str | os.PathLike, prompt_key: str = "prompt", reward_fn_key: str = "data_source") -> int:
    """Load a parquet file the way verl's ``RLHFDataset`` does and check every field verl reads.

    Args:
        path: The parquet file.
        prompt_key: verl's ``data.prompt_key``.
        reward_fn_key: verl's ``data.reward_fn_key``.

    Returns:
        The number of rows (an empty file has 0 rows and no check; verl refuses it).

    Raises:
        SchemaError: A missing column, or a row whose prompt is not a non-empty list of
            ``{role, content}`` strings, whose ``reward_model.ground_truth`` is empty, or whose
            ``extra_info.index`` is not an integer (names file, row and field).
    """
    import datasets  # lazy: heavy import, only this reader needs it

    if pq.ParquetFile(path).metadata.num_rows == 0:  # datasets cannot build a dataset from no rows
        return 0
    ds = datasets.load_dataset("parquet", data_files=str(path))["train"]
    for col in (prompt_key, reward_fn_key, "reward_model", "extra_info", "ability"):
        if col not in ds.column_names:
            raise SchemaError(f"{path}: column {col!r} missing (columns: {ds.column_names})")
    for i, row in enumerate(ds):
        found = row_problem(row, prompt_key, reward_fn_key)
        if found:
            raise SchemaError(f"{path} row {i}: {found}")
    return len(ds)


def row_problem(row: dict[str, Any], prompt_key: str = "prompt", reward_fn_key: str = "data_source") -> str | None:
    """What a row lacks of what verl and the trainers read (``None``: nothing): a non-empty
    prompt of ``{role, content}`` strings, ``data_source``, ``reward_model.ground_truth`` and an
    integer ``extra_info.index``."""
    msgs = row.get(prompt_key)
    if not isinstance(msgs, list) or not msgs:
        return f"{prompt_key} must be a non-empty list of chat messages"
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            return f"{prompt_key} message {m!r} needs string role and content"
    if not isinstance(row.get(reward_fn_key), str) or not row[reward_fn_key]:
        return f"{reward_fn_key} must be a non-empty string"
    gt = (row.get("reward_model") or {}).get("ground_truth")
    if not isinstance(gt, str) or not gt:
        return "reward_model.ground_truth must be a non-empty string"
    if not isinstance((row.get("extra_info") or {}).get("index"), int):
        return "extra_info.index must be an integer"
    return None


def read_verl_rows(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every row of an exported parquet file, read with pyarrow and checked: a readable file
    (not truncated or corrupted), the columns of :data:`SCHEMA` and, in each row, what verl and
    the trainers read (:func:`row_problem`). ``mbs-train`` reads its data with it before any
    model loads.

    Returns:
        The rows, as dicts.

    Raises:
        SchemaError: The file cannot be read as parquet, lacks a column of :data:`SCHEMA`
            (names each), or a row lacks a field (names the file, row, id and field).
    """
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise SchemaError(f"{path}: not a readable parquet file (truncated or corrupted?): {type(err).__name__}: {err}; "
                          "write it again with mbs-export") from err
    missing = [name for name in SCHEMA.names if name not in table.column_names]
    if missing:
        raise SchemaError(f"{path}: column(s) {missing} of verl's schema missing (columns: {table.column_names}); "
                          "not a file mbs-export wrote: write it again with mbs-export")
    try:
        rows = table.to_pylist()
    except (pa.ArrowException, OSError) as err:
        raise SchemaError(f"{path}: rows cannot be read ({type(err).__name__}: {err}); write it again with mbs-export") from err
    for i, row in enumerate(rows):
        found = row_problem(row)
        if found:
            pid = (row.get("extra_info") or {}).get("id") if isinstance(row.get("extra_info"), dict) else None
            raise SchemaError(f"{path} row {i}{f' (id {pid!r})' if pid else ''}: {found}")
    return rows
