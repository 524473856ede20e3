"""Golden Goose's typed, frozen settings (``goose.*``, ``data.limit``), read once from the config.

:class:`GooseSettings` is what the Goose builders read (:mod:`mbs.synth.goose.run` and the modules
it calls); nothing below the synthesize stage reads the ``goose`` node itself. Each section reads
its part of the node (``from_cfg``) and checks each value against its range, raising
:class:`~mbs.errors.ConfigError` that names the key: the ranges of :data:`mbs.validate.RULES`
where a rule exists (one place for a range), the bounds of the option letters and of the length
ratios here.

Sections: :class:`SourceSettings` (where passages come from, read by the registered sources of
:mod:`mbs.synth.goose.sources`; a source registered from outside reads its own keys from
:attr:`SourceSettings.group`), :class:`Bounds` (validation of every candidate),
:class:`StepSettings` (teacher-free spans and distractors), :class:`TeacherSettings`,
:class:`FilterSettings` (the difficulty filter) and :class:`AuditSettings` (the shortcut audit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, overload

from mbs.calibration.sampling import Policy
from mbs.validate import ConfigError, OneOf, check_rule, optional_str, plain

#: Option letters the ``mcq`` verifier grades (``goose.options`` is at most their count).
LETTERS = "ABCDEFGHIJ"
#: ``goose.segment``: how corpus passages are cut into steps.
SEGMENTS = ("none", "lines", "sentences")
#: ``goose.distractors.design``: how teacher-free distractors are made.
DESIGNS = ("grid", "single_edits")

@dataclass(frozen=True)
class ChampSettings:
    """The CHAMP source's own keys (``goose.champ.*``).

    Attributes:
        concepts: Show each problem's concept statements in the passage.
        wrong_steps: Collect the first wrong steps of CHAMP's recorded model solutions (distractors).
        include_unverifiable: Also use problems whose final answer no verifier checks.
    """

    concepts: bool = True
    wrong_steps: bool = True
    include_unverifiable: bool = True

    @classmethod
    def from_cfg(cls, node: Any) -> ChampSettings:
        """From the ``goose.champ`` node (``None``: the defaults)."""
        if node is None:
            return cls()
        return cls(bool(node.concepts), bool(node.wrong_steps), bool(node.include_unverifiable))


@dataclass(frozen=True)
class SourceSettings:
    """Where passages come from (``goose.source`` and the keys its sources read).

    Attributes:
        name: ``goose.source``: a source registered in :data:`mbs.synth.goose.sources.SOURCES`.
        path: ``goose.path``: the corpus file or folder (``None``: unset).
        text_field: Record field holding the passage text.
        id_field: Record field holding a passage id (``None``: the record's position).
        split: Split of a DatasetDict folder (``hf_disk``).
        patterns: File name patterns read recursively from a ``text_dir`` folder.
        segment: How corpus passages are cut into steps (one of :data:`SEGMENTS`).
        origin: Name used in passage ids and data sources ``mbs/mcq/goose-<origin>``
            (``goose.origin``, or the source name when that is null).
        on_error: ``raise`` on a bad record, or ``skip`` and count it.
        champ: The CHAMP source's keys.
        group: The source's own group ``goose.<name>`` (the keys of a source registered from
            outside), resolved and detached, read by attribute; ``None`` when there is none.
    """

    name: str
    path: str | None
    text_field: str
    id_field: str | None
    split: str | None
    patterns: tuple[str, ...]
    segment: str
    origin: str
    on_error: str
    champ: ChampSettings = ChampSettings()
    group: Any = None

    @classmethod
    def from_cfg(cls, node: Any) -> SourceSettings:
        """From the ``goose`` node.

        Raises:
            ConfigError: ``goose.on_error`` or ``goose.segment`` not one of its values (names the key).
        """
        name = str(node.source)
        segment = str(node.segment)
        if not OneOf(SEGMENTS).check(segment):
            raise ConfigError(f"goose.segment={segment!r}: must be {OneOf(SEGMENTS).describe()}")
        return cls(
            name=name,
            path=optional_str(node.path),
            text_field=str(node.text_field),
            id_field=optional_str(node.id_field),
            split=optional_str(node.split),
            patterns=tuple(str(p) for p in node.patterns),
            segment=segment,
            origin=str(node.origin or node.source),
            on_error=str(check_rule("goose.on_error", node.on_error)),
            champ=ChampSettings.from_cfg(node.get("champ")),
            group=plain(node.get(name)),
        )


@dataclass(frozen=True)
class Bounds:
    """Validation bounds (``goose.options``, ``goose.span`` and ``goose.distractors``).

    Attributes:
        options: Options per item k (2..10).
        min_span_chars: Shortest span in characters.
        max_span_share: Longest span as a share of the passage length (characters).
        ratio_min: Shortest distractor / answer length (characters).
        ratio_max: Longest distractor / answer length (characters).
        recoverable_chars: A span sentence at least this long (normalised characters) must not
            reappear verbatim in the remaining text.
        recoverable_overlap: The longest run the span shares with the remaining text must be
            shorter than this share of the span (normalised characters).
    """

    options: int = 9
    min_span_chars: int = 20
    max_span_share: float = 0.5
    ratio_min: float = 0.5
    ratio_max: float = 2.0
    recoverable_chars: int = 24
    recoverable_overlap: float = 0.8

    @classmethod
    def from_cfg(cls, node: Any) -> Bounds:
        """Bounds from the ``goose`` config node.

        Raises:
            ConfigError: ``goose.options`` outside 2..10, inverted length bounds, or a span share
                outside [0, 1] (names the key).
        """
        k = int(check_rule("goose.options", node.options))
        if not 2 <= k <= len(LETTERS):
            raise ConfigError(f"goose.options={k}: must be between 2 and {len(LETTERS)} (letters A-J)")
        lo, hi = float(node.distractors.length_ratio_min), float(node.distractors.length_ratio_max)
        if not 0 < lo <= 1 <= hi:
            raise ConfigError(f"goose.distractors.length_ratio_min/max = {lo}/{hi}: need 0 < min <= 1 <= max")
        return cls(
            options=k,
            min_span_chars=int(node.span.min_chars),
            max_span_share=float(check_rule("goose.span.max_share", node.span.max_share)),
            ratio_min=lo,
            ratio_max=hi,
            recoverable_chars=int(node.span.recoverable_chars),
            recoverable_overlap=float(check_rule("goose.span.recoverable_overlap", node.span.recoverable_overlap)),
        )


@dataclass(frozen=True)
class StepSettings:
    """How teacher-free items are cut from step-segmented passages and their distractors made.

    Attributes:
        min_steps: Fewest steps a span covers (``goose.span.min_steps``).
        max_steps: Most steps a span covers (``goose.span.max_steps``).
        wrong_steps_max: At most this many real wrong steps per item (``goose.distractors.wrong_steps_max``).
        design: ``grid`` or ``single_edits`` (``goose.distractors.design``, :data:`DESIGNS`).
    """

    min_steps: int = 1
    max_steps: int = 2
    wrong_steps_max: int = 1
    design: str = "grid"

    @classmethod
    def from_cfg(cls, node: Any) -> StepSettings:
        """From the ``goose`` node.

        Raises:
            ConfigError: ``goose.distractors.design`` not one of :data:`DESIGNS`.
        """
        design = str(node.distractors.design)
        if not OneOf(DESIGNS).check(design):
            raise ConfigError(f"goose.distractors.design={design!r}: must be {OneOf(DESIGNS).describe()}")
        return cls(
            min_steps=int(node.span.min_steps),
            max_steps=int(node.span.max_steps),
            wrong_steps_max=int(node.distractors.wrong_steps_max),
            design=design,
        )


@dataclass(frozen=True)
class TeacherSettings:
    """The LLM teacher of the teacher path (``goose.teacher.*``).

    Attributes:
        index: Position in ``teacher.pool`` of the teacher (checked against the pool by the run).
        attempts: Teacher samples per passage before it is rejected (at least one is drawn).
        extract_template: Prompt template of passage extraction (``goose.teacher.templates.extract``).
        mask_template: Prompt template of span masking and distractors (``goose.teacher.templates.mask``).
        judge: ``goose.teacher.judge``: the teacher checks each built item's distractors against
            the passage and an item with one it finds correct is rejected (``distractor_judged_correct``).
        judge_template: Prompt template of that check (``goose.teacher.templates.judge``).
    """

    index: int
    attempts: int
    extract_template: str
    mask_template: str
    judge: bool = False
    judge_template: str = "goose_judge_v1"

    @classmethod
    def from_cfg(cls, node: Any) -> TeacherSettings:
        """From the ``goose.teacher`` node."""
        return cls(
            index=int(node.index),
            attempts=int(node.attempts),
            extract_template=str(node.templates.extract),
            mask_template=str(node.templates.mask),
            judge=bool(node.get("judge", False)),
            judge_template=str(node.templates.get("judge", "goose_judge_v1")),
        )

    def entry(self, pool: Any) -> Any:
        """The entry of ``teacher.pool`` that :attr:`index` selects.

        Args:
            pool: The ``teacher.pool`` entries (resolved; ``name``, ``source``, ``backend``).

        Raises:
            ValueError: No such entry, or it is not a live teacher.
        """
        i = self.index
        if not 0 <= i < len(pool):
            raise ValueError(f"goose.teacher.index={i}: teacher.pool has {len(pool)} teacher(s)")
        t = pool[i]
        if t.source != "live" or t.backend is None:
            raise ValueError(
                f"goose.teacher.index={i} selects teacher {t.name!r} (source {t.source}); the Goose teacher path needs a "
                "live teacher (or set goose.teacher_free=true)"
            )
        return t


@dataclass(frozen=True)
class FilterSettings:
    """The difficulty filter (``goose.filter.*``; Golden Goose, section 3).

    Attributes:
        enabled: Draw student rollouts and keep only Goldilocks items.
        n: Rollouts of the target student per item.
        budget: The student's response budget in tokens (``None``: the target student's own budget L).
    """

    enabled: bool
    n: int
    budget: int | None

    @classmethod
    def from_cfg(cls, node: Any) -> FilterSettings:
        """From the ``goose.filter`` node (interpolations resolved).

        Raises:
            ConfigError: ``n`` or ``budget`` out of its range (names the key).
        """
        budget = check_rule("goose.filter.budget", node.budget)
        return cls(
            enabled=bool(node.enabled),
            n=int(check_rule("goose.filter.n", node.n)),
            budget=None if budget is None else int(budget),
        )

    @overload
    def response_budget(self, policy: Policy) -> int: ...
    @overload
    def response_budget(self, policy: None) -> int | None: ...

    def response_budget(self, policy: Policy | None) -> int | None:
        """The filter's response budget in tokens: :attr:`budget`, or the student's own budget L when that is null.

        Args:
            policy: The target student (``None``: no filter runs; then ``None`` unless :attr:`budget` is set).

        Raises:
            ValueError: Neither is set.
        """
        if self.budget is not None:
            return self.budget
        if policy is None:
            return None
        if policy.budget is None:
            raise ValueError(f"goose.filter.budget is null and student {policy.name!r} has no budget L (students.policies.*.budget)")
        return int(policy.budget)


@dataclass(frozen=True)
class AuditSettings:
    """The shortcut audit (``goose.audit.*``; :mod:`mbs.synth.goose.shortcuts`).

    Attributes:
        policy: ``reject``, ``rebuild`` or ``report``: what happens to an item a flagged solver answers.
        alpha: Level of the one-sided test that flags a solver above chance (1.0: any solver that answers).
        rebuilds: Extra distractor sets tried per teacher-free item under ``rebuild``.
        solvers: Solver names to run (empty: every solver of :data:`mbs.synth.goose.audit.SOLVERS`).
        only: Audit an existing MCQ corpus instead of building items.
        options_field: Record field with the option texts (``only``).
        answer_field: Record field with the answer: a letter, a 0-based index or the answer text (``only``).
        stem_field: Record field with the question stem (``only``; ``None``: none).
        lm_enabled: Run the choices-only language-model solver (``goose.audit.lm.enabled``).
        lm_model_path: Its GGUF file (``None``: the embedded model).
    """

    policy: str = "rebuild"
    alpha: float = 0.05
    rebuilds: int = 4
    solvers: tuple[str, ...] = ()
    only: bool = False
    options_field: str = "options"
    answer_field: str = "answer"
    stem_field: str | None = "question"
    lm_enabled: bool = False
    lm_model_path: str | None = None

    @classmethod
    def from_cfg(cls, node: Any) -> AuditSettings:
        """From the ``goose.audit`` node.

        Raises:
            ConfigError: ``policy``, ``alpha`` or ``rebuilds`` out of its range (names the key).
        """
        return cls(
            policy=str(check_rule("goose.audit.policy", node.policy)),
            alpha=float(check_rule("goose.audit.alpha", node.alpha)),
            rebuilds=int(check_rule("goose.audit.rebuilds", node.rebuilds)),
            solvers=tuple(str(s) for s in (node.solvers or [])),
            only=bool(node.only),
            options_field=str(node.options_field),
            answer_field=str(node.answer_field),
            stem_field=str(node.stem_field) if node.stem_field else None,
            lm_enabled=bool(node.lm.enabled),
            lm_model_path=optional_str(node.lm.model_path),
        )


@dataclass(frozen=True)
class GooseSettings:
    """Golden Goose's settings (``goose.*``, ``data.limit``).

    Attributes:
        source: Where passages come from.
        teacher_free: Build items without an LLM from step-segmented passages.
        extract: The teacher first extracts a clean passage from noisy text (teacher path).
        min_passage_chars: Passages shorter than this (characters) are dropped.
        require_reasoning: Drop passages without reasoning markers.
        bounds: Validation bounds of every candidate.
        steps: Teacher-free spans and distractors.
        teacher: The teacher of the teacher path.
        filter: The difficulty filter.
        audit: The shortcut audit.
        data_limit: At most this many passages (``data.limit``; ``None``: all).
    """

    source: SourceSettings
    teacher_free: bool
    extract: bool
    min_passage_chars: int
    require_reasoning: bool
    bounds: Bounds
    steps: StepSettings
    teacher: TeacherSettings
    filter: FilterSettings
    audit: AuditSettings
    data_limit: int | None

    @classmethod
    def from_cfg(cls, node: Any, data_limit: Any = None) -> GooseSettings:
        """From the ``goose`` node (interpolations such as ``filter.n`` resolved) and ``data.limit``.

        Raises:
            ConfigError: A value out of its range (names the key).
        """
        node = plain(node)
        limit = check_rule("data.limit", data_limit)
        return cls(
            source=SourceSettings.from_cfg(node),
            teacher_free=bool(node.teacher_free),
            extract=bool(node.extract),
            min_passage_chars=int(node.min_passage_chars),
            require_reasoning=bool(node.require_reasoning),
            bounds=Bounds.from_cfg(node),
            steps=StepSettings.from_cfg(node),
            teacher=TeacherSettings.from_cfg(node.teacher),
            filter=FilterSettings.from_cfg(node.filter),
            audit=AuditSettings.from_cfg(node.audit),
            data_limit=None if limit is None else int(limit),
        )
