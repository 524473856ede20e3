"""Golden Goose item construction: span masking, distractors, validation, shuffling.

Golden Goose (Lu et al., 2026, "Golden Goose: A Simple Trick to Synthesize Unlimited RLVR Tasks
from Unverifiable Internet Text", section 2) turns a passage ``S`` into a multiple-choice
question: a contiguous span ``t`` of key reasoning steps is replaced by ``[MASK]``, ``t`` is the
correct option, and ``k - 1`` plausible but wrong spans of the same style and length are the
distractors. A letter match then grades any response (the ``mcq`` verifier).

Two ways to build an item:

* **LLM teacher** (:func:`parse_mask_reply`, then :func:`locate_span`): the teacher returns
  ``<span>`` and ``<distractor>`` sections (:mod:`mbs.synth.goose.replies`: tags, not JSON, so
  every LaTeX command survives); the span must be copied from the passage.
* **Teacher-free** (:func:`mbs.synth.goose.distractors.teacher_free_candidate`), for step-segmented passages (CHAMP): a
  contiguous run of solution steps is masked (steps with concept/hint links first) and the
  distractors are perturbations of the removed span (:func:`~mbs.synth.goose.distractors.perturbations`: numbers, operators,
  relations, quantifiers, conditions, step and operand order) and real wrong steps (CHAMP's
  first-wrong-step annotations). No LLM; deterministic given the seed.

Every candidate then passes :func:`validate` (exactly one correct option, no distractor equal to
the answer or to another option after :func:`normalise`, none equivalent to the answer once its
formulas are evaluated (:func:`mbs.synth.goose.equivalence.equivalent`), option count, length ratio, span found
exactly once, mask in place, span not recoverable from the rest) before :func:`assemble`
shuffles the options with a seeded generator and puts the answer at a balanced position
(:func:`answer_position`: every block of ``k`` consecutive items uses each letter once).

Failures raise :class:`Rejected` with a stable reason name (see :data:`REASONS`).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from mbs.records import MCQ
from mbs.synth.goose import replies
from mbs.synth.goose.equivalence import equivalent, normalise
from mbs.synth.goose.settings import LETTERS, Bounds
from mbs.synth.goose.sources import MASK, Passage

#: Every rejection reason, with what it means (summary ``rejected`` counts use these names).
REASONS = {
    "bad_record": "the corpus record could not be read (goose.on_error=skip)",
    "passage_too_short": "passage shorter than goose.min_passage_chars",
    "no_reasoning": "passage shows no reasoning (connectives, relations, arithmetic, code)",
    "passage_has_mask": "passage already contains the [MASK] placeholder",
    "no_passage": "the teacher found no self-contained educational passage in the text",
    "no_steps": "teacher-free construction needs a step-segmented passage (goose.segment)",
    "too_few_steps": "too few steps to mask a span and keep context",
    "teacher_cut_off": "the teacher's budget ran out while it was still thinking (raise its max_tokens)",
    "malformed_reply": "teacher reply lacks a closed <span> (masking) or <passage> (extraction) section",
    "bad_fields": "a <span> or <distractor> section of the teacher reply is empty",
    "span_not_in_passage": "the span the teacher chose does not occur in the passage",
    "span_ambiguous": "the span occurs more than once in the passage",
    "span_too_short": "span shorter than goose.span.min_chars",
    "span_too_long": "span longer than goose.span.max_share of the passage",
    "mask_misplaced": "the masked passage does not put [MASK] where the span was",
    "span_recoverable": "the span (or a sentence of it) is repeated verbatim in the remaining text",
    "wrong_option_count": "the teacher gave a different number of distractors than asked",
    "too_few_distractors": "teacher-free construction found fewer distinct distractors than needed",
    "empty_option": "an option is empty",
    "distractor_equals_answer": "a distractor equals the answer after normalisation",
    "distractor_equivalent": "a distractor says what the answer says once its formulas are evaluated (mbs.synth.goose.equivalence)",
    "distractor_judged_correct": "the teacher's judge pass found a distractor correct in the passage (goose.teacher.judge)",
    "duplicate_distractors": "two distractors are equal after normalisation",
    "length_ratio": "a distractor's length is outside goose.distractors length bounds",
    "shortcut": "a passage-free solver of the shortcut audit answers the item (goose.audit)",
}


class Rejected(Exception):
    """A passage or candidate item failed a check.

    Attributes:
        reason: A key of :data:`REASONS`.
        detail: Human-readable specifics (which option, which text).
        equivalent: Options rejected as equivalent to the answer while the passage was tried
            (:mod:`mbs.synth.goose.equivalence`; written to its ``rejected`` row).
    """

    def __init__(self, reason: str, detail: str = ""):
        if reason not in REASONS:
            raise ValueError(f"unknown rejection reason {reason!r}; valid: {sorted(REASONS)}")
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        self.equivalent = 0


@dataclass
class Candidate:
    """An item before validation: the span's offsets in the passage and the wrong options.

    Attributes:
        passage: The (possibly teacher-extracted) passage.
        start: Span start offset in ``passage.text`` (characters).
        end: Span end offset (exclusive).
        distractors: Wrong options.
        origins: How each distractor was made (``perturb:<kinds>``, ``wrong_step:<conversation>``,
            ``teacher:<name>``).
        equivalent: Candidate options rejected as equivalent to the answer while this candidate
            was built (teacher-free: grid cells, perturbations; teacher: the distractors of
            earlier replies), :mod:`mbs.synth.goose.equivalence`.
    """

    passage: Passage
    start: int
    end: int
    distractors: list[str]
    origins: list[str]
    equivalent: int = 0

    @property
    def span(self) -> str:
        return self.passage.text[self.start : self.end]


# --------------------------------------------------------------------------------------
# Seeded choices
# --------------------------------------------------------------------------------------


def seeded_rng(*parts: Any) -> random.Random:
    """A :class:`random.Random` seeded by a stable hash of ``parts`` (same in every process)."""
    key = "\x1f".join(map(str, parts)).encode("utf-8")
    return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little"))


def answer_position(index: int, k: int, seed: int) -> int:
    """Position (0-based letter index) of the correct option of the ``index``-th built item.

    Items are taken in blocks of ``k``; each block is a seeded permutation of ``0..k-1``, so the
    answer letters are uniform over positions (exactly so after every ``k`` items, off by at
    most one per letter in between) and still unpredictable from the item alone.

    Examples:
        >>> sorted(answer_position(i, 4, seed=0) for i in range(4))
        [0, 1, 2, 3]
    """
    block = seeded_rng("answer_position", seed, k, index // k)
    perm = list(range(k))
    block.shuffle(perm)
    return perm[index % k]


# --------------------------------------------------------------------------------------
# Teacher replies
# --------------------------------------------------------------------------------------


def teacher_answered(comp: Any) -> None:
    """Check that a teacher reply has a final answer to parse.

    Args:
        comp: The teacher's :class:`mbs.llm.base.Completion`.

    Raises:
        Rejected: ``teacher_cut_off`` when the reply ended inside the teacher's thinking.
    """
    if comp.no_answer_reason:
        raise Rejected("teacher_cut_off", f"{comp.no_answer_reason} after {comp.completion_tokens} tokens")


def parse_mask_reply(text: str) -> tuple[str, list[str]]:
    """``(span, distractors)`` of a masking reply in the tagged format of
    :mod:`mbs.synth.goose.replies` (LaTeX kept byte for byte).

    Raises:
        Rejected: ``malformed_reply`` or ``bad_fields``.
    """
    try:
        return replies.parse_mask_reply(text)
    except replies.ReplyError as err:
        raise Rejected(err.reason, err.detail) from err


def parse_extract_reply(text: str) -> str | None:
    """The clean passage of an extraction reply (tagged, see :mod:`mbs.synth.goose.replies`);
    ``None`` when the teacher found none.

    Raises:
        Rejected: ``malformed_reply``.
    """
    try:
        return replies.parse_extract_reply(text)
    except replies.ReplyError as err:
        raise Rejected(err.reason, err.detail) from err


def locate_span(passage: Passage, span: str) -> tuple[int, int]:
    """Offsets of the teacher's span in the passage.

    An exact match is used when there is one; otherwise a match that differs only in white
    space (teachers often reflow lines). The span must occur exactly once.

    Raises:
        Rejected: ``span_not_in_passage`` or ``span_ambiguous``.
    """
    text = passage.text
    span = span.strip()
    exact = [m.start() for m in re.finditer(re.escape(span), text)]
    if len(exact) == 1:
        return exact[0], exact[0] + len(span)
    if len(exact) > 1:
        raise Rejected("span_ambiguous", f"span occurs {len(exact)} times")
    words = span.split()
    loose = list(re.finditer(r"\s+".join(map(re.escape, words)), text)) if words else []
    if len(loose) == 1:
        return loose[0].start(), loose[0].end()
    if len(loose) > 1:
        raise Rejected("span_ambiguous", f"span occurs {len(loose)} times")
    raise Rejected("span_not_in_passage", f"span {span[:60]!r} not found in {passage.id}")


# --------------------------------------------------------------------------------------
# Validation and assembly
# --------------------------------------------------------------------------------------


def mask(text: str, start: int, end: int) -> str:
    """``text`` with ``text[start:end]`` replaced by :data:`MASK`."""
    return text[:start] + MASK + text[end:]


def _pieces(span: str) -> list[str]:
    return [p for p in re.split(r"(?<=[.!?;])\s+|\n+", span) if p.strip()]


def validate(cand: Candidate, bounds: Bounds) -> dict[str, bool]:
    """Check a candidate before it becomes an item.

    Checks (in order; the first failure raises): the span occurs exactly once in the passage;
    its length is within ``bounds``; the masked passage has one ``[MASK]`` exactly where the span
    was; no sentence of the span at least ``bounds.recoverable_chars`` long is repeated verbatim in
    the remaining text, nor does the remaining text share a run of ``bounds.recoverable_overlap``
    of the span (so the span cannot be copied from elsewhere); there are exactly ``k - 1`` distractors; no option
    is empty; no distractor equals the answer or another distractor after :func:`normalise`; no
    distractor is equivalent to the answer once its formulas are evaluated
    (:func:`mbs.synth.goose.equivalence.equivalent`: ``12 + (3 - 5) = 10`` beside
    ``12 - (5 - 3) = 10``); every distractor's length is within the ratio bounds of the answer's;
    exactly one option is correct (equivalent to the span).

    Returns:
        ``{check name: True}`` for every check (stored in :attr:`MCQ.checks`).

    Raises:
        Rejected: The failed check's reason (``distractor_equivalent`` carries in ``equivalent``
            how many distractors are equivalent to the answer).
    """
    text, span = cand.passage.text, cand.span
    checks: dict[str, bool] = {}
    if MASK in text:
        raise Rejected("passage_has_mask", f"{cand.passage.id} already contains {MASK}")
    if not span.strip():
        raise Rejected("empty_option", "empty span")
    n = text.count(span)
    if n != 1:
        raise Rejected("span_ambiguous" if n > 1 else "span_not_in_passage", f"span occurs {n} times")
    checks["span_unique"] = True
    if len(span) < bounds.min_span_chars:
        raise Rejected("span_too_short", f"{len(span)} < {bounds.min_span_chars} characters")
    if len(span) > bounds.max_span_share * len(text):
        raise Rejected("span_too_long", f"{len(span)} of {len(text)} characters > share {bounds.max_span_share}")
    checks["span_length"] = True
    masked = mask(text, cand.start, cand.end)
    if masked.count(MASK) != 1 or masked.index(MASK) != cand.start or masked.replace(MASK, span) != text:
        raise Rejected("mask_misplaced", f"[MASK] not at offset {cand.start}")
    checks["mask_in_place"] = True
    rest = normalise(masked.replace(MASK, " "))
    for piece in _pieces(span):
        key = normalise(piece)
        if len(key) >= bounds.recoverable_chars and key in rest:
            raise Rejected("span_recoverable", f"{piece[:60]!r} is repeated in the remaining text")
    key = normalise(span)
    common = SequenceMatcher(None, key, rest, autojunk=False).find_longest_match(0, len(key), 0, len(rest)).size
    if key and common >= bounds.recoverable_overlap * len(key):
        raise Rejected("span_recoverable", f"{common} of its {len(key)} characters are repeated in the remaining text")
    checks["not_recoverable"] = True
    need = bounds.options - 1
    if len(cand.distractors) != need:
        raise Rejected("wrong_option_count", f"{len(cand.distractors)} distractors for {bounds.options} options (need {need})")
    checks["option_count"] = True
    if any(not d.strip() for d in cand.distractors):
        raise Rejected("empty_option", "an empty distractor")
    answer = normalise(span)
    keys = [normalise(d) for d in cand.distractors]
    for i, key in enumerate(keys):
        if key == answer:
            raise Rejected("distractor_equals_answer", f"distractor {i} equals the answer: {cand.distractors[i][:60]!r}")
    if len(set(keys)) != len(keys):
        dup = next(d for d, key in zip(cand.distractors, keys) if keys.count(key) > 1)
        raise Rejected("duplicate_distractors", f"{dup[:60]!r} appears more than once")
    same = [i for i, d in enumerate(cand.distractors) if equivalent(d, span)]
    if same:
        err = Rejected("distractor_equivalent", f"distractor {same[0]} says what the answer says: {cand.distractors[same[0]][:60]!r}")
        err.equivalent = len(same)
        raise err
    checks["distinct_options"] = True
    for i, d in enumerate(cand.distractors):
        r = len(d) / len(span)
        if not bounds.ratio_min <= r <= bounds.ratio_max:
            raise Rejected("length_ratio", f"distractor {i} is {r:.2f}x the answer length (bounds {bounds.ratio_min}-{bounds.ratio_max})")
    checks["length_ratio"] = True
    options = [span] + list(cand.distractors)
    checks["one_correct"] = sum(equivalent(o, span) for o in options) == 1
    return checks


def assemble(cand: Candidate, checks: dict[str, bool], index: int, seed: int) -> MCQ:
    """The item: distractors shuffled by a generator seeded with (seed, item id), the answer at
    :func:`answer_position` ``(index)``.

    Args:
        cand: A validated candidate.
        checks: What :func:`validate` returned.
        index: 0-based position of this item among the items built in this run directory.
        seed: The run's base seed.
    """
    item_id = f"goose/{cand.passage.id}"
    k = len(cand.distractors) + 1
    order = list(range(len(cand.distractors)))
    seeded_rng("goose-options", seed, item_id).shuffle(order)
    pos = answer_position(index, k, seed)
    distractors = [cand.distractors[i] for i in order]
    origins = [cand.origins[i] for i in order]
    options = distractors[:pos] + [cand.span] + distractors[pos:]
    return MCQ(
        id=item_id,
        source_id=cand.passage.id,
        masked_passage=mask(cand.passage.text, cand.start, cand.end),
        span=cand.span,
        span_offsets=(cand.start, cand.end),
        distractors=distractors,
        options=options,
        answer=LETTERS[pos],
        distractor_origins=origins,
        checks=dict(checks),
    )


#: First line of every Goose question (the instruction; the ``mcq`` template asks for "Answer: X").
QUESTION_HEAD = "In the passage below, one span of the reasoning was replaced by [MASK]. Which option fills the gap correctly?"


def render_question(masked_passage: str, options: Sequence[str]) -> str:
    """The question text: instruction, masked passage, lettered options (GooseReason shape).

    Multi-line options are indented under their letter.
    """
    lines = [QUESTION_HEAD, "", "Passage:", masked_passage, "", "Options:"]
    for letter, opt in zip(LETTERS, options):
        lines.append(f"{letter}. " + opt.replace("\n", "\n   "))
    return "\n".join(lines)


def option_origins(item: MCQ) -> list[str]:
    """Origin of each option in presented order (``answer`` for the correct one)."""
    it = iter(item.distractor_origins)
    return ["answer" if LETTERS[i] == item.answer else next(it, "unknown") for i in range(len(item.options))]
