"""Reading a run's ``summary.json`` field by field: each field typed where it is read, and a bad
one named by file and field.

The run readers (:mod:`mbs.runs.calibration`, :mod:`mbs.runs.synthesis`, :mod:`mbs.runs.export`,
:mod:`mbs.runs.training`) read their stage's summary through :class:`Fields`; nothing else needs
to know a key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from mbs.errors import UserError
from mbs.io import SUMMARY

T = TypeVar("T")

_MISSING: Any = object()


class SummaryError(UserError, ValueError):
    """A run's ``summary.json`` is missing, unreadable, of another stage, or holds a field of the
    wrong type (the message names the file and the field)."""


def load_summary(run_dir: str | os.PathLike, stage: str | tuple[str, ...] | None = None) -> Fields:
    """The ``summary.json`` of ``run_dir``, as :class:`Fields`.

    Args:
        run_dir: A run folder.
        stage: The stage (or stages) the run must be of (``None``: any); a summary naming no
            stage is taken as the one asked for.

    Raises:
        SummaryError: No ``summary.json``, not a JSON object, or a ``stage`` other than ``stage``
            (names the file).
    """
    path = Path(run_dir) / SUMMARY
    if not path.is_file():
        raise SummaryError(f"{path} not found (did the stage finish?)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SummaryError(f"{path}: not a readable summary ({err})") from None
    if not isinstance(data, dict):
        raise SummaryError(f"{path}: a JSON {type(data).__name__}, not an object")
    fields = Fields(data, str(path))
    if stage is not None:
        wanted = (stage,) if isinstance(stage, str) else stage
        if fields.has("stage") and fields.data.get("stage") not in wanted:
            raise SummaryError(f"{path}: stage {fields.data.get('stage')!r}, not {' or '.join(map(repr, wanted))}")
    return fields


def run_stage(run_dir: str | os.PathLike) -> str | None:
    """The ``stage`` a run folder's ``summary.json`` names (``None``: it names none).

    Raises:
        SummaryError: No ``summary.json``, or not a readable JSON object (names the file).
    """
    value = load_summary(run_dir).data.get("stage")
    return value if isinstance(value, str) else None


class Fields:
    """A JSON object read field by field; a field of the wrong type raises :class:`SummaryError`
    naming the file and the dotted field.

    Args:
        data: The object.
        where: The file it came from (and, for a nested block, ``file: block``).
        prefix: Dotted path of ``data`` inside the file (``""`` at the top).
    """

    def __init__(self, data: Mapping[str, Any], where: str, prefix: str = ""):
        self.data = data
        self.where = where
        self.prefix = prefix

    def _name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def error(self, key: str, what: str) -> SummaryError:
        """The error for field ``key``: ``<file>: field <dotted key>: <what>``."""
        return SummaryError(f"{self.where}: field {self._name(key)!r}: {what}")

    def has(self, key: str) -> bool:
        """Whether the field is present (``null`` counts as present)."""
        return key in self.data

    def get(self, key: str, kind: type[T] | tuple[type, ...], default: Any = _MISSING) -> Any:
        """Field ``key`` checked to be of ``kind`` (``bool`` is not an ``int``; an ``int`` is a ``float``).

        Args:
            key: The field.
            kind: The type (or types) it must have; ``null`` is returned as ``None`` only when
                ``default`` is ``None``.
            default: What a missing (or ``null``) field reads as; without one, the field is required.

        Raises:
            SummaryError: The field is missing without a default, or of another type.
        """
        value = self.data.get(key, _MISSING)
        if value is _MISSING or (value is None and default is not _MISSING):
            if default is _MISSING:
                raise self.error(key, "missing")
            return default
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, bool) and bool not in kinds:
            raise self.error(key, f"expected {_names(kinds)}, got {value!r}")
        if not isinstance(value, kinds):
            raise self.error(key, f"expected {_names(kinds)}, got {type(value).__name__} {_short(value)}")
        return value

    def opt_int(self, key: str) -> int | None:
        """An integer field that may be missing or ``null``."""
        value = self.get(key, int, None)
        return None if value is None else int(value)

    def opt_str(self, key: str) -> str | None:
        """A string field that may be missing or ``null``."""
        value = self.get(key, str, None)
        return None if value is None else str(value)

    def block(self, key: str) -> Fields:
        """The object at ``key`` as :class:`Fields` (missing or ``null``: empty).

        Raises:
            SummaryError: The field is not an object.
        """
        return Fields(self.get(key, dict, {}), self.where, f"{self._name(key)}.")

    def mapping(self, key: str) -> dict[str, Any]:
        """The object at ``key`` as a plain dict (missing or ``null``: empty)."""
        return dict(self.get(key, dict, {}))

    def strings(self, key: str) -> tuple[str, ...]:
        """A list of strings at ``key`` (missing or ``null``: empty).

        Raises:
            SummaryError: Not a list, or an item is not a string.
        """
        items = self.get(key, list, [])
        if not all(isinstance(x, str) for x in items):
            raise self.error(key, "expected a list of strings")
        return tuple(items)


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join({dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
                        bool: "true or false"}.get(k, k.__name__) for k in kinds)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
