"""Problem loaders, chosen by ``data.loader`` through the :data:`LOADERS` registry.

* ``champ``: CHAMP from the installed ``champ-dataset`` package (:mod:`mbs.data.champ`).
* ``reasoning_gym``: procedural problems of controllable difficulty from Reasoning Gym
  generators (:mod:`mbs.data.reasoning_gym`).
* ``jsonl`` / ``parquet`` / ``hf_disk``: any file or local Hugging Face dataset folder, with a
  configurable field mapping (``data.fields``).

Every loader returns :class:`mbs.records.Problem` records. Bad input raises
:class:`DataError` naming the file, line (or row) and field; with ``data.on_error=skip`` the
record is skipped and counted instead (:class:`LoadReport`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
from pathlib import Path
from typing import Any, Iterable, Iterator

from mbs.data.base import LOADERS, DataError, LoadReport, register_loader
from mbs.data.champ import load_champ
from mbs.errors import UnknownNameError
from mbs.records import Problem
from mbs.verify import available as registered_verifiers
from mbs.verify.sources import data_source

log = logging.getLogger(__name__)


def stable_hash(text: str) -> int:
    """A 64-bit hash of ``text`` that is the same in every process and Python version."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def in_shard(problem_id: str, index: int, count: int) -> bool:
    """Whether ``problem_id`` belongs to shard ``index`` of ``count`` (stable hash assignment)."""
    return count <= 1 or stable_hash(problem_id) % count == index


def load_problems(data_cfg: Any, shard_index: int = 0, shard_count: int = 1) -> tuple[list[Problem], LoadReport]:
    """Load, filter, shard and limit the problems a stage works on.

    Args:
        data_cfg: The ``data`` config node (``loader``, ``limit``, ``on_error``, ...).
        shard_index: This process's shard.
        shard_count: Number of shards (problems are assigned by a stable hash of their id).

    Returns:
        The problems (first ``data.limit`` after filtering and sharding) and a load report.

    Raises:
        DataError: Bad input with ``on_error=raise``, or an empty input file.
        KeyError: Unknown ``data.loader`` (lists the valid names).
    """
    problems, report = _load_filtered(data_cfg)
    return _take_shard(problems, report, data_cfg, shard_index, shard_count)


def load_problem_shards(data_cfg: Any, shard_count: int) -> list[tuple[list[Problem], LoadReport]]:
    """What :func:`load_problems` gives each of ``shard_count`` shards, reading the data once.

    For ``mbs-merge``, which needs every shard's problems: loading them shard by shard reads
    and parses the whole input once per shard (time grows with shards x problems).

    Returns:
        ``[(problems, report)]`` for shard indices ``0 .. shard_count - 1``, each equal to
        ``load_problems(data_cfg, index, shard_count)``.

    Raises:
        As :func:`load_problems`.
    """
    problems, report = _load_filtered(data_cfg)
    parts: list[list[Problem]] = [[] for _ in range(max(1, shard_count))]
    for p in problems:
        parts[stable_hash(p.id) % shard_count if shard_count > 1 else 0].append(p)
    return [_take_shard(part, copy.deepcopy(report), data_cfg, 0, 1) for part in parts]


def _load_filtered(data_cfg: Any) -> tuple[list[Problem], LoadReport]:
    """Every problem of the input after the verifiability filter (before sharding and limit)."""
    name = data_cfg.loader
    if name not in LOADERS:
        raise UnknownNameError(f"data.loader={name!r} is not a registered loader; valid: {LOADERS.names()}")
    report = LoadReport()
    problems = LOADERS.get(name)(data_cfg, report)
    if not bool(data_cfg.get("include_unverifiable", False)):
        kept = [p for p in problems if p.verifiable]
        report.unverifiable += len(problems) - len(kept)
        problems = kept
    return problems, report


def _take_shard(problems: list[Problem], report: LoadReport, data_cfg: Any, index: int, count: int) -> tuple[list[Problem], LoadReport]:
    problems = [p for p in problems if in_shard(p.id, index, count)]
    limit = data_cfg.get("limit")
    if limit is not None:
        problems = problems[: int(limit)]
    report.loaded = len(problems)
    for p in problems:
        report.by_answer_type[p.answer_type] = report.by_answer_type.get(p.answer_type, 0) + 1
    return problems, report


# --------------------------------------------------------------------------------------
# CHAMP
# --------------------------------------------------------------------------------------


@register_loader("champ")
def _load_champ(data_cfg: Any, report: LoadReport) -> list[Problem]:
    problems = load_champ(include_unverifiable=True)
    split = data_cfg.get("split", "all") or "all"
    if split != "all":
        frac = float(data_cfg.get("heldout_fraction", 0.2))
        if split not in ("train", "heldout"):
            raise DataError(f"data.split={split!r}: valid values are all, train, heldout")
        problems = [p for p in problems if (champ_is_heldout(p.id, frac)) == (split == "heldout")]
    return problems


def champ_is_heldout(problem_id: str, fraction: float) -> bool:
    """Stable-hash train/heldout split of CHAMP used by export (train) and evaluation (heldout)."""
    return (stable_hash("heldout:" + problem_id) % 10_000) < fraction * 10_000


# --------------------------------------------------------------------------------------
# Generic files with a field mapping
# --------------------------------------------------------------------------------------


def records_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` per non-blank line of a JSONL file; a line that is not UTF-8 text or
    not JSON yields a :class:`DataError` in place of the record (the caller raises or skips it),
    so one bad line never costs the good ones. A UTF-8 byte-order mark is accepted.

    Raises:
        DataError: ``path`` is a directory or cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a directory; a JSONL loader reads one .jsonl file (data.path)")
    try:
        f = open(path, "rb")
    except OSError as err:
        raise DataError(f"{path}: cannot be read ({err.strerror})") from err
    with f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path} line {lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as err:
                yield where, DataError(
                    f"{where}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
                    "re-encode the file as UTF-8"
                )
                continue
            if not line.strip():
                continue
            try:
                yield where, json.loads(line)
            except json.JSONDecodeError as err:
                yield where, DataError(f"{where}: invalid JSON ({err.msg})")


def records_parquet(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` per row of a parquet file, read in batches (large files stream).

    Raises:
        DataError: ``path`` is a directory, or not a readable parquet file.
    """
    # lazy: heavy import, only this reader needs it
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a directory; the parquet loader reads one .parquet file (data.path)")
    try:
        batches = pq.ParquetFile(path).iter_batches(batch_size=1024)
    except (pa.ArrowException, OSError) as err:
        raise DataError(f"{path}: not a readable parquet file ({err})") from err
    i = 0
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as err:
            raise DataError(f"{path} row {i}: unreadable parquet data ({err})") from err
        for row in batch.to_pylist():
            yield f"{path} row {i}", row
            i += 1


def records_hf_disk(path: Path, split: str | None, split_key: str = "data.split") -> Iterator[tuple[str, Any]]:
    """``(where, record)`` per row of a ``datasets.save_to_disk`` folder (``split`` of a DatasetDict).

    Raises:
        DataError: The split is not in the dataset (names ``split_key`` and the splits there).
    """
    from datasets import DatasetDict, load_from_disk  # lazy: heavy import, only this reader needs it

    if not Path(path).is_dir():
        raise DataError(f"{path}: not a folder; the hf_disk loader reads a datasets.save_to_disk folder (data.path)")
    try:
        ds = load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as err:
        raise DataError(f"{path}: not a datasets.save_to_disk folder ({err})") from err
    if isinstance(ds, DatasetDict):
        if split not in ds:
            raise DataError(f"{path}: split {split!r} ({split_key}) not in the dataset; splits: {list(ds)}")
        ds = ds[split]
    for i, row in enumerate(ds):
        yield f"{path} [{split}] row {i}", row


def unwrap(record: Any) -> Any:
    """A record as a reader yielded it; a reader's error in its place (a bad line) is raised here.

    Raises:
        Exception: The error the reader put in the record's place (a :class:`DataError`).
    """
    if isinstance(record, Exception):
        raise record
    return record


def problems_from_records(records: Iterable[tuple[str, Any]], data_cfg: Any, report: LoadReport, source: str) -> list[Problem]:
    """Map raw records onto :class:`Problem` with ``data.fields``; handle bad records per ``on_error``.

    Raises:
        DataError: A bad record with ``on_error=raise``, or no record at all in ``source``.
    """
    fields = _Fields(data_cfg.fields)  # read once: an OmegaConf lookup per record and field costs ~20 us
    origin = data_cfg.get("origin", "custom")
    on_error = data_cfg.get("on_error", "raise")
    answer_type, max_chars = data_cfg.get("answer_type", "math"), data_cfg.get("max_prompt_chars")
    if on_error not in ("raise", "skip"):
        raise DataError(f"data.on_error={on_error!r}: valid values are raise, skip")
    out: list[Problem] = []
    first_seen: dict[str, str] = {}
    seen = 0
    for i, (where, rec) in enumerate(records):
        seen += 1
        try:
            problem = _problem_from_record(unwrap(rec), i, where, fields, origin, answer_type, max_chars)
            if problem.id in first_seen:
                raise DataError(
                    f"{where}: duplicate id {problem.id!r} in field {fields.get('id')!r} (data.fields.id); "
                    f"first seen at {first_seen[problem.id]}"
                )
            first_seen[problem.id] = where
            out.append(problem)
        except DataError as err:
            if on_error == "raise":
                raise
            report.skipped += 1
            report.errors.append(str(err))
            log.warning("skipping bad record: %s", err)
    if seen == 0:
        raise DataError(f"{source}: no records (empty input)")
    if not out:
        raise DataError(f"{source}: 0 valid records of {seen} (all skipped; first error: {report.errors[0]})")
    return out


class _Fields(dict):
    """``data.fields`` as a plain mapping that also answers attribute access (``fields.prompt``),
    like the config node it copies; unset attributes are ``None``."""

    def __init__(self, node: Any):
        super().__init__({str(k): v for k, v in node.items()})
        self.skip = {self.get(a) for a in ("prompt", "ground_truth", "id", "solution")}  # not metadata

    def __getattr__(self, name: str) -> Any:
        return self.get(name)


def _problem_from_record(
    rec: Any, i: int, where: str, fields: Any, origin: str, default_type: str, max_prompt_chars: int | None = None
) -> Problem:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected an object, got {type(rec).__name__}")

    def get(attr: str, required: bool) -> Any:
        name = fields.get(attr)
        if name is None:
            return None
        if name not in rec or rec[name] is None:
            if required:
                raise DataError(f"{where}: missing field {name!r} (data.fields.{attr})")
            return None
        return rec[name]

    prompt = get("prompt", True)
    if not isinstance(prompt, str) or not prompt.strip():
        raise DataError(f"{where}: field {fields.prompt!r} (data.fields.prompt) must be a non-empty string")
    if max_prompt_chars is not None and len(prompt) > int(max_prompt_chars):
        raise DataError(
            f"{where}: field {fields.prompt!r} (data.fields.prompt) is {len(prompt)} characters, "
            f"above data.max_prompt_chars={int(max_prompt_chars)}"
        )
    gt = _scalar_text(get("ground_truth", True), where, fields.ground_truth, "ground_truth", "a string or a number")
    answer_type = get("answer_type", False) or default_type
    if not isinstance(answer_type, str):
        raise DataError(
            f"{where}: field {fields.get('answer_type')!r} (data.fields.answer_type) must be a string, "
            f"got {type(answer_type).__name__}"
        )
    verifiable = not str(answer_type).startswith("unverifiable")
    if verifiable and not str(gt).strip():
        raise DataError(
            f"{where}: field {fields.ground_truth!r} (data.fields.ground_truth) is empty; "
            "give the answer, or mark the record unverifiable:<why> in its answer type"
        )
    if answer_type not in registered_verifiers() and not str(answer_type).startswith("unverifiable"):
        raise DataError(
            f"{where}: unknown answer type {answer_type!r} in field {fields.get('answer_type') or 'data.answer_type'}; "
            f"valid: {registered_verifiers()} (the registered verifiers) or unverifiable:<why>"
        )
    rid = get("id", False)
    if rid is not None and (isinstance(rid, bool) or not isinstance(rid, (str, int))):
        raise DataError(f"{where}: field {fields.id!r} (data.fields.id) must be a string or an integer, got {_kind(rid)}")
    if isinstance(rid, str) and not rid.strip():
        raise DataError(f"{where}: field {fields.id!r} (data.fields.id) is empty")
    pid = f"{origin}/{rid if rid is not None else i}"
    solution = get("solution", False)
    if solution is not None:
        solution = _scalar_text(solution, where, fields.solution, "solution", "a string")
    skip = fields.skip if isinstance(fields, _Fields) else {fields.get(a) for a in ("prompt", "ground_truth", "id", "solution")}
    meta = {k: v for k, v in rec.items() if k not in skip}
    return Problem(
        id=pid,
        data_source=data_source(str(answer_type), origin),
        prompt=prompt,
        ground_truth=gt,
        answer_type=str(answer_type),
        reference_solution=solution,
        metadata=_jsonable(meta),
    )


def _scalar_text(value: Any, where: str, name: str, attr: str, expected: str) -> str:
    """A string field as text; a finite number (not a bool) as its decimal text.

    Raises:
        DataError: Any other value (list, dict, bool, NaN, infinity): stored as its Python repr
            it would become a wrong ground truth and a wrong reward.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
    raise DataError(f"{where}: field {name!r} (data.fields.{attr}) must be {expected}, got {_kind(value)}")


def _kind(value: Any) -> str:
    if isinstance(value, float):
        return f"the number {value!r}"  # nan, inf
    text = json.dumps(value, default=str, ensure_ascii=False)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _jsonable(obj: Any) -> Any:
    try:
        json.dumps(obj)
        return obj
    except TypeError:
        return json.loads(json.dumps(obj, default=str))


def _file(data_cfg: Any) -> Path:
    path = Path(str(data_cfg.path)).expanduser()
    if not path.exists():
        raise DataError(f"data.path: {path} does not exist")
    return path


@register_loader("jsonl")
def _load_jsonl(data_cfg: Any, report: LoadReport) -> list[Problem]:
    path = _file(data_cfg)
    return problems_from_records(records_jsonl(path), data_cfg, report, str(path))


@register_loader("parquet")
def _load_parquet(data_cfg: Any, report: LoadReport) -> list[Problem]:
    path = _file(data_cfg)
    return problems_from_records(records_parquet(path), data_cfg, report, str(path))


@register_loader("hf_disk")
def _load_hf_disk(data_cfg: Any, report: LoadReport) -> list[Problem]:
    path = _file(data_cfg)
    return problems_from_records(records_hf_disk(path, data_cfg.get("split")), data_cfg, report, str(path))


# Loaders in their own modules register themselves on import (they need the names above).
from mbs.data import reasoning_gym as _reasoning_gym  # noqa: E402,F401  (registers "reasoning_gym")
