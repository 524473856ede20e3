"""The Golden Goose synthesis run's findings, read here from the ``summary.json`` that
:func:`mbs.synth.goose.run` writes: items built and rejected, the difficulty filter's bands and
the student's accuracy against chance, the answer-letter balance and the shortcut audit.

The figures (:mod:`mbs.figures.goose`) and the report's summary (:mod:`mbs.figures.story`) read
them with :meth:`GooseSummary.read` (or :meth:`GooseSummary.of` on a loaded summary). The
``filter`` block's policy, budget and N are :class:`mbs.runs.synthesis.SynthesisSummary`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mbs.runs.summary import Fields, Record


@dataclass(frozen=True)
class GooseStudent:
    """``student``: the filter's policy on the items, against guessing.

    Attributes:
        policy: The student's name (``None``: not recorded).
        accuracy: Its mean pass rate over the filtered items (``None``: nothing filtered).
        chance: ``1/k`` (``None``: not recorded).
        chance_goldilocks_share: The Goldilocks share a policy guessing one of k letters would reach.
    """

    policy: str | None = None
    accuracy: float | None = None
    chance: float | None = None
    chance_goldilocks_share: float | None = None


@dataclass(frozen=True)
class LetterBalance:
    """``letters.<built|kept>``: answer letters against a uniform draw.

    Attributes:
        counts: ``{letter: items}`` over the k positions.
        expected_per_letter: Items per letter if uniform (``None``: not recorded).
        chi2: Chi-square statistic against uniform (``None``: not recorded).
    """

    counts: dict[str, int] = field(default_factory=dict)
    expected_per_letter: float | None = None
    chi2: float | None = None


@dataclass(frozen=True)
class AuditPart:
    """``audit.<built|kept>``: the passage-free solvers on one set of items.

    Attributes:
        n: Items audited (``None``: not recorded).
        solvers: ``{solver: accuracy}`` (``None``: it answered nothing).
    """

    n: int | None = None
    solvers: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class GooseAudit:
    """``audit``: the shortcut audit (:mod:`mbs.synth.goose.audit`).

    Attributes:
        policy: The audit's policy (``None``: not recorded).
        chance: ``1/k``.
        flagged: Solvers flagged as a shortcut.
        built: The first build of each passage.
        kept: The items the filter kept (``None``: not recorded).
    """

    policy: Any
    chance: float | None
    flagged: tuple[str, ...]
    built: AuditPart
    kept: AuditPart | None


def _audit_part(f: Fields) -> AuditPart:
    return AuditPart(f.opt_int("n"), {name: s.num("accuracy") for name, s in f.blocks("solvers").items()})


@dataclass(frozen=True)
class GooseSummary(Record):
    """A Golden Goose run's ``summary.json``, as the figures and the report draw it. Keys missing
    in older runs read as ``None`` or empty; numbers stay as written.

    Attributes:
        source: The passage source's name (``None``: not recorded).
        teacher_free: Whether no teacher built the items.
        options: k, options per item (``None``: not recorded).
        passages: Passages read.
        items_built: Items built.
        rejected: Passages rejected, by reason.
        rejected_total: Passages rejected in all.
        kept: Items the difficulty filter kept.
        effective_share: ``kept`` over the filtered items (``None``: the filter did not run).
        bands: ``{band: share}`` of the filtered items.
        student: The filter's policy against guessing.
        filter_n: N, rollouts per item (``None``: not recorded).
        early_stop: Whether the filter stopped groups early.
        letters_built, letters_kept: Answer-letter balance of the built and the kept items.
        audit: The shortcut audit (``None``: a run before the audit existed).
    """

    STAGE = "synthesize"

    source: str | None = None
    teacher_free: bool = False
    options: int | None = None
    passages: int | None = None
    items_built: int | None = None
    rejected: dict[str, int] = field(default_factory=dict)
    rejected_total: int | None = None
    kept: int | None = None
    effective_share: float | None = None
    bands: dict[str, float] = field(default_factory=dict)
    student: GooseStudent = GooseStudent()
    filter_n: int | None = None
    early_stop: bool = False
    letters_built: LetterBalance = LetterBalance()
    letters_kept: LetterBalance = LetterBalance()
    audit: GooseAudit | None = None

    @classmethod
    def from_fields(cls, f: Fields) -> GooseSummary:
        """The findings of the Golden Goose summary ``f``.

        Raises:
            SummaryError: A field of the wrong type (names the file and the dotted field).
        """
        st, flt, letters = f.block("student"), f.block("filter"), f.block("letters")

        def balance(part: str) -> LetterBalance:
            b = letters.block(part)
            return LetterBalance(b.tree("counts", 1, int), b.num("expected_per_letter"), b.num("chi2"))

        audit = None
        if f.get("audit", dict, None):
            a = f.block("audit")
            audit = GooseAudit(a.data.get("policy"), a.num("chance"), a.strings("flagged"), _audit_part(a.block("built")),
                               _audit_part(a.block("kept")) if a.get("kept", dict, None) is not None else None)
        return cls(
            source=f.opt_str("source"), teacher_free=bool(f.get("teacher_free", bool, False)), options=f.opt_int("options"),
            passages=f.opt_int("passages"), items_built=f.opt_int("items_built"), rejected=f.tree("rejected", 1, int),
            rejected_total=f.opt_int("rejected_total"), kept=f.opt_int("kept"), effective_share=f.num("effective_share"),
            bands=f.tree("bands", 1, float),
            student=GooseStudent(st.opt_str("policy"), st.num("accuracy"), st.num("chance"), st.num("chance_goldilocks_share")),
            filter_n=flt.opt_int("n"), early_stop=bool(flt.get("early_stop", bool, False)),
            letters_built=balance("built"), letters_kept=balance("kept"), audit=audit,
        )
