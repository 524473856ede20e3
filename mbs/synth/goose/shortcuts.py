"""The shortcut audit inside a Goose run, and the audit of an imported MCQ corpus.

:class:`Auditor` runs the passage-free solvers of :mod:`mbs.synth.goose.audit` (plus the
optional choices-only LM solver, ``goose.audit.lm``) on candidates and items and applies
``goose.audit.policy``; :func:`audit_report` is the ``audit`` block of ``summary.json``;
:func:`audit_corpus` audits an existing GooseReason-shaped corpus (``goose.audit.only=true``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mbs.data import DataError, records_hf_disk, records_jsonl, records_parquet
from mbs.io import RunDir
from mbs.synth.goose.audit import Solver, accuracy_table, audit_row, select_solvers
from mbs.synth.goose.build import LETTERS, Candidate, Rejected, mask
from mbs.synth.goose.distractors import teacher_free_candidate
from mbs.synth.goose.lm_audit import CachedLMSolver, llama_scorer
from mbs.synth.goose.settings import AuditSettings, GooseSettings, SourceSettings
from mbs.synth.goose.sources import Passage


class Auditor:
    """The audit of one run (``goose.audit``).

    Args:
        audit: The audit settings (``goose.audit``; the policy checked when they were read).
        cache_dir: ``paths.cache_dir`` (the LM solver's score cache).
        extra: More solvers ``{name: solver}`` (tests pass a fake LM here).

    Raises:
        ValueError: Unknown solver name.
    """

    def __init__(self, audit: AuditSettings, cache_dir: str | None = None, extra: dict[str, Solver] | None = None):
        self.policy = audit.policy
        self.rebuilds = audit.rebuilds if self.policy == "rebuild" else 0
        self.alpha = audit.alpha
        more = dict(extra or {})
        if audit.lm_enabled and "lm_choices_only" not in more:
            scorer, model_id = llama_scorer(audit.lm_model_path)
            more["lm_choices_only"] = CachedLMSolver(scorer, model_id, cache_dir)
        self.solvers = select_solvers(list(audit.solvers), more)

    def row(self, options: Sequence[str], answer: int, stem: str) -> dict[str, Any]:
        """:func:`mbs.synth.goose.audit.audit_row` with this run's solvers."""
        return audit_row(options, answer, stem, self.solvers)

    def candidate(self, cand: Candidate) -> dict[str, Any]:
        """Audit a candidate (options: the span then its distractors; stem: the masked passage)."""
        return self.row([cand.span, *cand.distractors], 0, mask(cand.passage.text, cand.start, cand.end))

    def flagged(self, rows: Sequence[dict[str, Any]], k: int) -> list[str]:
        """Solvers whose accuracy over ``rows`` (tie-split credit) is above chance ``1/k`` by a
        one-sided test at level ``goose.audit.alpha`` (normal approximation of the mean credit,
        variance ``(1/k)(1 - 1/k)/n``; 1.0: every solver that answers any item)."""
        n = len(rows)
        if not n:
            return []
        c = 1.0 / k
        out = []
        for name in self.solvers:
            acc = sum(r["credit"].get(name, 0.0) for r in rows) / n
            if self.alpha >= 1.0:
                hit = any(name in r["answered"] for r in rows)
            else:
                hit = upper_tail((acc - c) / math.sqrt(c * (1 - c) / n)) < self.alpha
            if hit:
                out.append(name)
        return out


def upper_tail(z: float) -> float:
    """``P(Z >= z)`` for a standard normal ``Z``.

    Examples:
        >>> round(upper_tail(1.6449), 3)
        0.05
    """
    return 0.5 * math.erfc(z / math.sqrt(2))


def enforce_audit(passages: Sequence[Passage], goose: GooseSettings, seed: int, book: Any, auditor: Auditor) -> list[str]:
    """Apply ``goose.audit.policy`` to the built items.

    The policy acts on the solvers that are significantly more accurate than chance on this
    run's first builds (:meth:`Auditor.flagged`); a solver at chance answers some items by luck, and
    dropping those would itself mark the answer (it would never be that solver's pick). An item a
    flagged solver answers is rebuilt with other distractor sets (teacher-free, ``rebuild``, up
    to ``goose.audit.rebuilds`` times) or rejected as ``shortcut``.

    Args:
        passages: The run's passages.
        goose: Golden Goose's settings (``teacher_free``, its bounds and teacher-free steps).
        seed: The run's base seed.
        book: The run's decisions (:class:`mbs.synth.goose.run._Book`: ``candidates``, ``audits``,
            ``audited``, ``accept``, ``reject``).
        auditor: The audit.

    Returns:
        The flagged solvers.
    """
    ids = [p.id for p in passages]
    first = [min(book.audits[i], key=lambda r: r["attempt"]) for i in ids if book.audits.get(i)]
    bounds = goose.bounds
    flagged = auditor.flagged(first, bounds.options)
    if auditor.policy == "report" or not flagged:
        return flagged
    by_id = {p.id: p for p in passages}
    for pid in ids:
        if pid not in book.candidates:
            continue
        row = max(book.audits[pid], key=lambda r: r["attempt"])
        hits = [s for s in row["answered"] if s in flagged]
        attempt = row["attempt"]
        while hits and goose.teacher_free and auditor.policy == "rebuild" and attempt < auditor.rebuilds:
            attempt += 1
            try:
                cand = teacher_free_candidate(by_id[pid], goose.steps, bounds, seed, attempt)
            except Rejected:
                continue
            row = auditor.candidate(cand)
            book.audited(pid, attempt, row)
            hits = [s for s in row["answered"] if s in flagged]
            if not hits:
                book.accept(cand)
        if hits:
            err = Rejected("shortcut", f"answered by {', '.join(hits)} after {attempt + 1} build(s)")
            err.equivalent = book.candidates[pid].equivalent  # the first build's count stays in the summary
            book.reject(pid, "audit", err, attempt)
    return flagged


def audit_report(
    k: int, policy: str, first: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]], kept: Sequence[dict[str, Any]],
    rebuilt: int = 0, rejected: int = 0,
) -> dict[str, Any]:
    """The ``audit`` block of ``summary.json``.

    Args:
        k: Options per item.
        policy: ``goose.audit.policy``.
        first: Audit rows of every passage's first built candidate (the generator before the policy).
        items: Audit rows of the items after the policy (``items.*.jsonl``).
        kept: Audit rows of the kept items (after the policy and the difficulty filter).
        rebuilt: Items the policy rebuilt.
        rejected: Items the policy rejected (reason ``shortcut``).

    Returns:
        ``{"chance", "policy", "rebuilt", "rejected", "built": table, "items": table, "kept": table}``
        with each table from :func:`mbs.synth.goose.audit.accuracy_table`.
    """
    return {
        "chance": 1.0 / k,
        "policy": policy,
        "rebuilt": rebuilt,
        "rejected": rejected,
        "built": accuracy_table(first, k),
        "items": accuracy_table(items, k),
        "kept": accuracy_table(kept, k),
    }


def _answer_index(value: Any, options: Sequence[str], where: str, field: str) -> int:
    if isinstance(value, bool):
        raise DataError(f"{where}: field {field!r} must be a letter, an index or an option text")
    if isinstance(value, int):
        if 0 <= value < len(options):
            return value
        raise DataError(f"{where}: field {field!r} = {value} is not an option index (0..{len(options) - 1})")
    if isinstance(value, str):
        v = value.strip()
        if len(v) == 1 and v.upper() in LETTERS[: len(options)]:
            return LETTERS.index(v.upper())
        if v in options:
            return list(options).index(v)
    raise DataError(f"{where}: field {field!r} = {value!r} is neither a letter A-{LETTERS[len(options) - 1]}, an index nor an option text")


def corpus_items(source: SourceSettings, audit: AuditSettings, limit: int | None = None) -> list[tuple[str, list[str], int, str]]:
    """``(id, options, answer index, stem)`` of each record of an MCQ corpus (``goose.source`` jsonl,
    parquet or hf_disk at ``goose.path``; fields ``goose.audit.options_field`` / ``answer_field`` /
    ``stem_field``, id ``goose.id_field`` or the record's position).

    Args:
        source: The source settings (``name``, ``path``, ``split``, ``id_field``, ``on_error``).
        audit: The audit settings (the record fields).
        limit: At most this many items (``data.limit``; ``None``: all).

    Raises:
        DataError: A missing path, an unsupported source, or a bad record (names the file, the
            record and the field); with ``goose.on_error=skip`` bad records are skipped.
    """
    src = source.name
    readers = {"jsonl": records_jsonl, "parquet": records_parquet}
    if source.path is None:
        raise DataError("goose.audit.only: set goose.path to the MCQ corpus")
    path = Path(source.path).expanduser()
    if not path.exists():
        raise DataError(f"goose.path: {path} does not exist")
    if src == "hf_disk":
        records = records_hf_disk(path, source.split, "goose.split")
    elif src in readers:
        records = readers[src](path)
    else:
        raise DataError(f"goose.audit.only: goose.source={src!r}; an MCQ corpus is read from jsonl, parquet or hf_disk")
    out = []
    for i, (where, rec) in enumerate(records):
        try:
            if isinstance(rec, Exception):
                raise rec
            if not isinstance(rec, dict):
                raise DataError(f"{where}: expected an object, got {type(rec).__name__}")
            opts = rec.get(audit.options_field)
            if not isinstance(opts, list) or len(opts) < 2 or not all(isinstance(o, str) for o in opts):
                raise DataError(f"{where}: field {audit.options_field!r} (goose.audit.options_field) must be a list of >= 2 strings")
            if audit.answer_field not in rec:
                raise DataError(f"{where}: missing field {audit.answer_field!r} (goose.audit.answer_field)")
            ans = _answer_index(rec[audit.answer_field], opts, where, audit.answer_field)
            stem = rec.get(audit.stem_field) if audit.stem_field else ""
            stem = stem.split("Options:")[0] if isinstance(stem, str) else ""
            rid = str(rec.get(source.id_field)) if source.id_field and rec.get(source.id_field) is not None else str(i)
            out.append((rid, list(opts), ans, stem))
        except DataError:
            if source.on_error != "skip":
                raise
        if limit is not None and len(out) >= int(limit):
            break
    return out


def audit_corpus(goose: GooseSettings, out: RunDir, auditor: Auditor) -> dict[str, Any]:
    """Audit an existing MCQ corpus (``goose.audit.only=true``): ``audit.*.jsonl`` (one row per
    item: id, k, answer, each solver's credit and picks) and the summary.

    Args:
        goose: Golden Goose's settings (the source, the audit's record fields and ``data.limit``).
        out: The run directory.
        auditor: The shortcut solvers.

    Returns:
        The summary: ``audit_only``, ``items``, ``options`` (k, or the k values seen), ``audit``
        (:func:`audit_report` with ``built`` = ``items`` = ``kept`` = the corpus; ``None`` when
        items have different k) and ``audit_by_options`` (the same per k).
    """
    rows = []
    for rid, opts, ans, stem in corpus_items(goose.source, goose.audit, goose.data_limit):
        r = auditor.row(opts, ans, stem)
        rows.append({"id": rid, "k": len(opts), "answer": LETTERS[ans] if ans < len(LETTERS) else ans, **r})
    out.shard("audit").rewrite(rows)
    by_k: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_k.setdefault(r["k"], []).append(r)
    per_k = {str(k): audit_report(k, "report", rs, rs, rs) for k, rs in sorted(by_k.items())}
    return {
        "audit_only": True,
        "source": goose.source.name,
        "items": len(rows),
        "options": min(by_k) if len(by_k) == 1 else sorted(by_k),
        "audit": next(iter(per_k.values())) if len(per_k) == 1 else None,
        "audit_by_options": per_k,
        "counts": {"items": len(rows), "answered": sum(1 for r in rows if r["answered"])},
    }
