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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from mbs.errors import UserError
from mbs.io import SUMMARY

T = TypeVar("T")
R = TypeVar("R", bound="Record")

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
        if _Number in kinds:  # a number as written
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return value
            kinds = tuple(k for k in kinds if k is not _Number)
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

    def num(self, key: str, default: Any = None) -> Any:
        """A number field as written (an ``int`` stays an ``int``, so tables print it the same),
        ``default`` where missing or ``null``.

        Raises:
            SummaryError: The field is not a number (``true``/``false`` are not numbers).
        """
        return self.get(key, (int, float, _Number), default)

    def tree(self, key: str, depth: int, leaf: type | tuple[type, ...]) -> dict[str, Any]:
        """The object at ``key`` as nested plain dicts ``depth`` levels deep, each leaf checked to be
        of ``leaf`` (``depth`` 1: ``{name: leaf}``; missing or ``null``: empty). Numbers stay as written.

        Raises:
            SummaryError: A level is not an object, or a leaf of another type (names the dotted field).
        """
        f = self.block(key)
        out: dict[str, Any] = {}
        for name in f.data:
            if depth > 1:
                out[name] = f.tree(name, depth - 1, leaf)
            else:
                kinds = leaf if isinstance(leaf, tuple) else (leaf,)
                out[name] = f.get(name, (*kinds, _Number) if float in kinds else kinds)
        return out

    def blocks(self, key: str) -> dict[str, Fields]:
        """Each entry of the object at ``key`` as :class:`Fields` (missing or ``null``: empty).

        Raises:
            SummaryError: ``key`` or one of its entries is not an object.
        """
        return self.block(key).entries()

    def entries(self) -> dict[str, Fields]:
        """Each entry of this object as :class:`Fields`.

        Raises:
            SummaryError: An entry is not an object (names the dotted field).
        """
        return {name: self.block(name) for name in self.data}

    def block(self, key: str) -> Fields:
        """The object at ``key`` as :class:`Fields` (missing or ``null``: empty).

        Raises:
            SummaryError: The field is not an object.
        """
        return Fields(self.get(key, dict, {}), self.where, f"{self._name(key)}.")

    def mapping(self, key: str) -> dict[str, Any]:
        """The object at ``key`` as a plain dict (missing or ``null``: empty)."""
        return dict(self.get(key, dict, {}))

    def ints(self, key: str) -> tuple[int, ...]:
        """A list of integers at ``key`` (missing or ``null``: empty; ``true``/``false`` are not integers).

        Raises:
            SummaryError: Not a list, or an item is not an integer.
        """
        items = self.get(key, list, [])
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in items):
            raise self.error(key, f"expected a list of integers, got {_short(items)}")
        return tuple(items)

    def numbers(self, key: str, size: int | None = None) -> tuple[Any, ...] | None:
        """A list of numbers at ``key``, as written (``None``: missing or ``null``); ``size``: the
        length it must have (2 for an interval ``[lo, hi]``).

        Raises:
            SummaryError: Not a list, of another length, or an item is not a number.
        """
        items = self.get(key, list, None)
        if items is None:
            return None
        if (size is not None and len(items) != size) or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in items):
            what = "a list of numbers" if size is None else f"a list of {size} numbers"
            raise self.error(key, f"expected {what}, got {_short(items)}")
        return tuple(items)

    def strings(self, key: str) -> tuple[str, ...]:
        """A list of strings at ``key`` (missing or ``null``: empty).

        Raises:
            SummaryError: Not a list, or an item is not a string.
        """
        items = self.get(key, list, [])
        if not all(isinstance(x, str) for x in items):
            raise self.error(key, "expected a list of strings")
        return tuple(items)


class _Number:
    """Marker kind of :meth:`Fields.num`: an ``int`` or ``float`` kept as written."""


class Record:
    """Base of the typed records of a summary's blocks: :meth:`read` from a run folder, or
    :meth:`of` from a summary already loaded; subclasses define :meth:`from_fields`."""

    #: The stage (or stages) whose summary this is (``None``: any).
    STAGE: ClassVar[str | tuple[str, ...] | None] = None

    @classmethod
    def from_fields(cls: type[R], f: Fields) -> R:
        """The record of the summary ``f``.

        Raises:
            SummaryError: A field of the wrong type (names the file and the dotted field).
        """
        raise NotImplementedError

    @classmethod
    def read(cls: type[R], run_dir: str | os.PathLike) -> R:
        """Read the record from ``run_dir``'s ``summary.json``.

        Raises:
            SummaryError: No ``summary.json``, another stage's, or a field of the wrong type
                (names the file and the dotted field).
        """
        return cls.from_fields(load_summary(run_dir, cls.STAGE))

    @classmethod
    def of(cls: type[R], summary: Any, where: str = "summary.json") -> R:
        """``summary`` itself if it is already this record, else the record of a loaded summary
        (a dict, as :func:`mbs.io.read_summary` returns it; ``where`` names it in errors).

        Raises:
            SummaryError: ``summary`` is not an object, or a field of the wrong type.
        """
        if isinstance(summary, cls):
            return summary
        if not isinstance(summary, Mapping):
            raise SummaryError(f"{where}: a {type(summary).__name__}, not a summary object")
        return cls.from_fields(Fields(summary, where))


@dataclass(frozen=True)
class RunKind(Record):
    """What kind of run a summary is of: its ``stage`` and, for synthesis, its ``method``.

    Attributes:
        stage: The stage (``""``: not recorded).
        method: ``mbs``, ``direct``, ``goose`` for a synthesis run (``None``: not recorded).
    """

    stage: str = ""
    method: str | None = None

    @classmethod
    def from_fields(cls, f: Fields) -> RunKind:
        """The kind of the summary ``f``.

        Raises:
            SummaryError: ``stage`` or ``method`` is not a string (names the file and the field).
        """
        return cls(f.get("stage", str, ""), f.opt_str("method"))

    @property
    def key(self) -> str:
        """``<stage>``, or ``synthesize/<method>`` for a synthesis run that names its method."""
        return f"{self.stage}/{self.method}" if self.stage == "synthesize" and self.method is not None else self.stage


@dataclass(frozen=True)
class Headline(Record):
    """The top-level numbers of a summary of any stage (what a comparison of runs tabulates
    where the stage has no reader of its own).

    Attributes:
        numbers: ``{key: number}`` of every top-level ``int`` or ``float`` (not ``true``/``false``),
            in summary order, as written.
    """

    numbers: dict[str, int | float]

    @classmethod
    def from_fields(cls, f: Fields) -> Headline:
        """The top-level numbers of the summary ``f`` (other values are left out, never raised)."""
        return cls({k: v for k, v in f.data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})


def _names(kinds: tuple[type, ...]) -> str:
    return " or ".join({dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number",
                        bool: "true or false", _Number: "a number"}.get(k, k.__name__)
                       for k in kinds if not (k is _Number and (int in kinds or float in kinds)))


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
