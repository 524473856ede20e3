"""Golden Goose passages: reasoning-rich text without an answer key, from CHAMP or any corpus.

A :class:`Passage` is one text the Goose builder turns into a fill-in-the-middle multiple-choice
item (Golden Goose, "Constructing MCQs from unverifiable text"). Sources are registered in
:data:`SOURCES` and chosen by ``goose.source``:

* ``champ``: CHAMP's step-wise reference solutions, shown after the problem statement and the
  problem's concept statements. Steps are kept as character offsets, so teacher-free
  construction can mask whole steps; steps that carry concept/hint links (CHAMP ``ch_idxs``)
  are marked, and the first-wrong-step annotations of recorded model solutions become
  :attr:`Passage.wrong_steps` (real wrong steps, used as distractors).
* ``jsonl`` / ``parquet`` / ``hf_disk``: records with a text field (``goose.text_field``) and an
  optional id field (``goose.id_field``).
* ``text_dir``: a folder of ``.txt`` / ``.md`` files (``goose.patterns``), one passage per file.

Corpus passages are cut into steps by ``goose.segment`` (``lines``, ``sentences``, or ``none``:
only the LLM-teacher path can mask them). Bad input raises :class:`mbs.data.DataError` naming
the file, line or row and field; with ``goose.on_error=skip`` the record is counted instead.

A source is ``fn(source: SourceSettings, report: SourceReport) -> iterator of Passage``
(:class:`~mbs.synth.goose.settings.SourceSettings`: the typed source keys, and the source's own
group ``goose.<name>`` as :attr:`~mbs.synth.goose.settings.SourceSettings.group` for a source
registered from outside).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mbs.data import DataError, in_shard, records_hf_disk, records_jsonl, records_parquet, unwrap
from mbs.data.champ import convert_gold, load_raw, problem_from_raw
from mbs.registry import Registry
from mbs.synth.goose.settings import SEGMENTS, SourceSettings

#: Placeholder that replaces the removed span (Golden Goose writes ``[MASK]``).
MASK = "[MASK]"

#: Words and symbols that signal reasoning (:func:`has_reasoning`).
_REASONING = re.compile(
    r"\b(?:therefore|thus|hence|because|since|so that|implies|it follows|which means|consequently|"
    r"we (?:get|have|obtain|find|know|need|can)|suppose|assume|let|then|if|so|proof|solve|equals?|"
    r"return|def|for each|while)\b|[=<>≤≥⇒→∑∫]|\d\s*[-+*/^×÷]\s*\d",
    re.IGNORECASE,
)


@dataclass
class Passage:
    """One source text for a Goose item.

    Attributes:
        id: Stable id ``<origin>/<record id>`` (e.g. ``champ/P_Combinatorics_1``).
        text: The passage (plain text).
        origin: Source name, the ``<origin>`` of ``mbs/mcq/goose-<origin>``.
        steps: Character offsets ``(start, end)`` of each reasoning step in :attr:`text`, in
            order (``None``: the passage is not step-segmented).
        linked: Per step: True when it carries a concept/hint link (CHAMP ``ch_idxs``).
        wrong_steps: Real wrong steps ``(text, where)`` usable as distractors (CHAMP's
            first-wrong-step annotations; ``where`` names the recorded conversation).
        parents: Ids of the records the passage was made from (a CHAMP problem id).
        where: Location for messages (file and line, or dataset and problem id).
    """

    id: str
    text: str
    origin: str
    steps: list[tuple[int, int]] | None = None
    linked: list[bool] = field(default_factory=list)
    wrong_steps: list[tuple[str, str]] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    where: str = ""


@dataclass
class SourceReport:
    """What a source read and skipped (summary and manifest)."""

    read: int = 0
    skipped: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"read": self.read, "skipped": self.skipped, "errors": self.errors[:50]}


SourceFn = Callable[[SourceSettings, SourceReport], Iterator[Passage]]
#: ``goose.source`` name -> ``fn(source settings, report) -> iterator of Passage``.
SOURCES: Registry[SourceFn] = Registry("Golden Goose source")


def register_source(name: str) -> Callable[[SourceFn], SourceFn]:
    """Decorator adding ``fn(source: SourceSettings, report) -> iterator of Passage`` to :data:`SOURCES`."""
    return SOURCES.register(name)


def load_passages(source: SourceSettings, limit: int | None = None, shard_index: int = 0, shard_count: int = 1) -> tuple[list[Passage], SourceReport]:
    """Read, shard and limit the passages of ``goose.source``.

    Args:
        source: The source settings (``goose.source`` and its keys).
        limit: Keep the first ``limit`` passages of this shard (``data.limit``; ``None``: all).
        shard_index: This process's shard.
        shard_count: Number of shards (passages are assigned by a stable hash of their id).

    Returns:
        The passages in source order, and a report of what was read and skipped.

    Raises:
        KeyError: Unknown ``goose.source`` (lists the valid ones).
        DataError: Bad input with ``goose.on_error=raise``, a missing path, or an empty corpus.
    """
    name = source.name
    if name not in SOURCES:
        raise KeyError(f"goose.source={name!r} is not a registered source; valid: {SOURCES.names()}")
    if source.on_error not in ("raise", "skip"):
        raise DataError(f"goose.on_error={source.on_error!r}: valid values are raise, skip")
    report = SourceReport()
    out: list[Passage] = []
    seen: set[str] = set()
    for p in SOURCES.get(name)(source, report):
        report.read += 1
        if p.id in seen:
            _bad(source, report, DataError(f"{p.where}: duplicate passage id {p.id!r} (goose.id_field)"))
            continue
        seen.add(p.id)
        if in_shard(p.id, shard_index, shard_count):
            out.append(p)
        if limit is not None and len(out) >= int(limit):
            break
    return out, report


def _bad(source: SourceSettings, report: SourceReport, err: DataError) -> None:
    if source.on_error == "raise":
        raise err
    report.skipped += 1
    report.errors.append(str(err))


def has_reasoning(text: str, minimum: int = 2) -> bool:
    """Whether ``text`` shows reasoning: at least ``minimum`` markers (connectives such as
    "therefore"/"because"/"we get", relations ``= < >``, arithmetic between numbers, code keywords).

    Examples:
        >>> has_reasoning("Since 3 + 4 = 7, the total is 7.")
        True
        >>> has_reasoning("The museum opens at nine on weekdays.")
        False
    """
    return len(_REASONING.findall(text)) >= minimum


def segment(text: str, how: str) -> list[tuple[int, int]] | None:
    """Character offsets of the steps of ``text``.

    Args:
        text: The passage.
        how: ``lines`` (each non-blank line), ``sentences`` (split after ``.``, ``!`` or ``?``
            followed by white space) or ``none``.

    Returns:
        ``(start, end)`` per step with surrounding white space excluded, or ``None`` for ``none``.

    Raises:
        ValueError: Unknown ``how``.
    """
    if how == "none":
        return None
    seps = {"lines": r"\n+", "sentences": r"(?<=[.!?])\s+|\n+"}
    if how not in seps:
        raise ValueError(f"goose.segment={how!r}: valid values are {', '.join(SEGMENTS)}")
    pieces, start = [], 0
    for m in re.finditer(seps[how], text):
        pieces.append((start, m.start()))
        start = m.end()
    pieces.append((start, len(text)))
    steps = []
    for s, e in pieces:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if e > s:
            steps.append((s, e))
    return steps


# --------------------------------------------------------------------------------------
# CHAMP
# --------------------------------------------------------------------------------------


def champ_passage(pid: str, raw_problem: dict[str, Any], raw: dict[str, Any], concepts: bool, wrong_steps: bool) -> Passage:
    """The Goose passage of one CHAMP problem.

    Layout (steps one per line, so a masked run of steps is a run of lines)::

        Problem: <statement>

        Relevant concepts:
        - <concept statement>

        Solution:
        <step 1>
        <step 2>

    Args:
        pid: CHAMP problem id (``P_Combinatorics_1``).
        raw_problem: The raw problem dict of :func:`mbs.data.champ.load_raw`.
        raw: The whole raw CHAMP dict (for concept texts).
        concepts: Show the problem's concept statements.
        wrong_steps: Collect the first wrong steps of recorded model solutions.

    Raises:
        DataError: A step or the statement is empty, or an annotation's offsets fall outside its text.
    """
    prob = problem_from_raw(pid, raw_problem, raw)
    where = f"CHAMP problem {pid}"
    if not prob.prompt.strip():
        raise DataError(f"{where}: empty problem statement (field _text)")
    parts = [f"Problem: {prob.prompt.strip()}"]
    if concepts and prob.metadata["concepts"]:
        parts.append("Relevant concepts:\n" + "\n".join(f"- {c['text'].strip()}" for c in prob.metadata["concepts"] if c["text"].strip()))
    text = "\n\n".join(parts) + "\n\nSolution:\n"
    steps: list[tuple[int, int]] = []
    linked: list[bool] = []
    for i, st in enumerate(prob.metadata["steps"]):
        body = " ".join(st["text"].split())
        if not body:
            raise DataError(f"{where}: solution step {i} is empty (field solution.steps[{i}]._text)")
        if steps:
            text += "\n"
        steps.append((len(text), len(text) + len(body)))
        text += body
        linked.append(bool(st["ch_idxs"]))
    wrong: list[tuple[str, str]] = []
    if wrong_steps:
        for key, ann in sorted((raw_problem.get("fws_annotations") or {}).items()):
            if ann.get("start_idx") is None:
                continue  # the annotator found no mistake
            s, e, full = int(ann["start_idx"]), int(ann["end_idx"]), ann.get("text") or ""
            if not 0 <= s < e <= len(full):
                raise DataError(f"{where}: fws_annotations[{key!r}] offsets {s}:{e} outside its text ({len(full)} chars)")
            body = " ".join(full[s:e].split())
            if body:
                wrong.append((body, key))
    return Passage(
        id=prob.id, text=text, origin="champ", steps=steps, linked=linked, wrong_steps=wrong, parents=[prob.id], where=where
    )


@register_source("champ")
def _champ(source: SourceSettings, report: SourceReport) -> Iterator[Passage]:
    raw = load_raw()
    champ = source.champ
    for pid, p in raw["problems"].items():
        if not champ.include_unverifiable and convert_gold(p.get("_answer") or "").answer_type != "math":
            continue
        try:
            yield champ_passage(pid, p, raw, champ.concepts, champ.wrong_steps)
        except DataError as err:
            _bad(source, report, err)


# --------------------------------------------------------------------------------------
# Corpora
# --------------------------------------------------------------------------------------


def _path(source: SourceSettings) -> Path:
    if source.path is None:
        raise DataError(f"goose.source={source.name}: set goose.path to the corpus file or folder")
    path = Path(source.path).expanduser()
    if not path.exists():
        raise DataError(f"goose.path: {path} does not exist")
    return path


def passage_from_record(rec: Any, index: int, where: str, source: SourceSettings) -> Passage:
    """Map one corpus record onto a :class:`Passage` (``goose.text_field``, ``goose.id_field``).

    Raises:
        DataError: Not an object, the text field missing or not a non-empty string, or the id
            field missing (the message names ``where`` and the field).
    """
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected an object with field {source.text_field!r}, got {type(rec).__name__}")
    text = rec.get(source.text_field)
    if source.text_field not in rec:
        raise DataError(f"{where}: missing field {source.text_field!r} (goose.text_field)")
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: field {source.text_field!r} (goose.text_field) must be a non-empty string")
    if source.id_field is not None:
        if rec.get(source.id_field) is None:
            raise DataError(f"{where}: missing field {source.id_field!r} (goose.id_field)")
        rid = str(rec[source.id_field])
    else:
        rid = str(index)
    text = text.strip()
    origin = source.origin
    return Passage(id=f"{origin}/{rid}", text=text, origin=origin, steps=segment(text, source.segment), where=where)


def _from_records(records: Iterator[tuple[str, Any]], source: SourceSettings, report: SourceReport, what: str) -> Iterator[Passage]:
    seen = 0
    for i, (where, rec) in enumerate(records):
        seen += 1
        try:
            yield passage_from_record(unwrap(rec), i, where, source)
        except DataError as err:
            _bad(source, report, err)
    if seen == 0:
        raise DataError(f"{what}: no records (empty corpus)")


@register_source("jsonl")
def _jsonl(source: SourceSettings, report: SourceReport) -> Iterator[Passage]:
    path = _path(source)
    yield from _from_records(records_jsonl(path), source, report, str(path))


@register_source("parquet")
def _parquet(source: SourceSettings, report: SourceReport) -> Iterator[Passage]:
    path = _path(source)
    yield from _from_records(records_parquet(path), source, report, str(path))


@register_source("hf_disk")
def _hf_disk(source: SourceSettings, report: SourceReport) -> Iterator[Passage]:
    path = _path(source)
    yield from _from_records(records_hf_disk(path, source.split, "goose.split"), source, report, str(path))


@register_source("text_dir")
def _text_dir(source: SourceSettings, report: SourceReport) -> Iterator[Passage]:
    root = _path(source)
    if not root.is_dir():
        raise DataError(f"goose.path: {root} is not a folder (goose.source=text_dir)")
    files = sorted({p for pattern in source.patterns for p in root.rglob(pattern) if p.is_file()})
    if not files:
        raise DataError(f"{root}: no files match goose.patterns={list(source.patterns)}")
    origin = source.origin
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8").strip()
        except UnicodeDecodeError as err:
            _bad(source, report, DataError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})"))
            continue
        if not text:
            _bad(source, report, DataError(f"{path}: empty file"))
            continue
        yield Passage(id=f"{origin}/{rel}", text=text, origin=origin, steps=segment(text, source.segment), where=str(path))
