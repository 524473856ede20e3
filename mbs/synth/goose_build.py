"""Golden Goose item construction: span masking, distractors, validation, shuffling.

Golden Goose (Lu et al., 2026, "Golden Goose: A Simple Trick to Synthesize Unlimited RLVR Tasks
from Unverifiable Internet Text", section 2) turns a passage ``S`` into a multiple-choice
question: a contiguous span ``t`` of key reasoning steps is replaced by ``[MASK]``, ``t`` is the
correct option, and ``k - 1`` plausible but wrong spans of the same style and length are the
distractors. A letter match then grades any response (the ``mcq`` verifier).

Two ways to build an item:

* **LLM teacher** (:func:`parse_mask_reply`, then :func:`locate_span`): the teacher returns
  JSON ``{"span": ..., "distractors": [...]}``; the span must be copied from the passage.
* **Teacher-free** (:func:`teacher_free_candidate`), for step-segmented passages (CHAMP): a
  contiguous run of solution steps is masked (steps with concept/hint links first) and the
  distractors are perturbations of the removed span (:func:`perturbations`: numbers, operators,
  relations, quantifiers, conditions, step and operand order) and real wrong steps (CHAMP's
  first-wrong-step annotations). No LLM; deterministic given the seed.

Every candidate then passes :func:`validate` (exactly one correct option, no distractor equal to
the answer or to another option after :func:`normalise`, option count, length ratio, span found
exactly once, mask in place, span not recoverable from the rest) before :func:`assemble`
shuffles the options with a seeded generator and puts the answer at a balanced position
(:func:`answer_position`: every block of ``k`` consecutive items uses each letter once).

Failures raise :class:`Rejected` with a stable reason name (see :data:`REASONS`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from mbs.records import MCQ
from mbs.synth.goose_sources import MASK, Passage

#: Option letters the ``mcq`` verifier grades.
LETTERS = "ABCDEFGHIJ"

#: Every rejection reason, with what it means (summary ``rejected`` counts use these names).
REASONS = {
    "bad_record": "the corpus record could not be read (goose.on_error=skip)",
    "passage_too_short": "passage shorter than goose.min_passage_chars",
    "no_reasoning": "passage shows no reasoning (connectives, relations, arithmetic, code)",
    "passage_has_mask": "passage already contains the [MASK] placeholder",
    "no_passage": "the teacher found no self-contained educational passage in the text",
    "no_steps": "teacher-free construction needs a step-segmented passage (goose.segment)",
    "too_few_steps": "too few steps to mask a span and keep context",
    "malformed_json": "teacher reply is not a JSON object",
    "bad_fields": "teacher JSON lacks a string 'span' or a list of strings 'distractors'",
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
    "duplicate_distractors": "two distractors are equal after normalisation",
    "length_ratio": "a distractor's length is outside goose.distractors length bounds",
}


class Rejected(Exception):
    """A passage or candidate item failed a check.

    Attributes:
        reason: A key of :data:`REASONS`.
        detail: Human-readable specifics (which option, which text).
    """

    def __init__(self, reason: str, detail: str = ""):
        if reason not in REASONS:
            raise ValueError(f"unknown rejection reason {reason!r}; valid: {sorted(REASONS)}")
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Bounds:
    """Validation bounds (``goose.span`` and ``goose.distractors``).

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
    def from_cfg(cls, gcfg: Any) -> Bounds:
        """Bounds from the ``goose`` config node.

        Raises:
            ValueError: ``goose.options`` outside 2..10 or inverted length bounds.
        """
        k = int(gcfg.options)
        if not 2 <= k <= len(LETTERS):
            raise ValueError(f"goose.options={k}: must be between 2 and {len(LETTERS)} (letters A-J)")
        lo, hi = float(gcfg.distractors.length_ratio_min), float(gcfg.distractors.length_ratio_max)
        if not 0 < lo <= 1 <= hi:
            raise ValueError(f"goose.distractors.length_ratio_min/max = {lo}/{hi}: need 0 < min <= 1 <= max")
        return cls(
            options=k,
            min_span_chars=int(gcfg.span.min_chars),
            max_span_share=float(gcfg.span.max_share),
            ratio_min=lo,
            ratio_max=hi,
            recoverable_chars=int(gcfg.span.recoverable_chars),
            recoverable_overlap=float(gcfg.span.recoverable_overlap),
        )


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
    """

    passage: Passage
    start: int
    end: int
    distractors: list[str]
    origins: list[str]

    @property
    def span(self) -> str:
        return self.passage.text[self.start : self.end]


# --------------------------------------------------------------------------------------
# Normalisation, seeded choices
# --------------------------------------------------------------------------------------


def normalise(text: str) -> str:
    """Comparison form of an option: NFKC, case-folded, white space removed, edge punctuation stripped.

    Examples:
        >>> normalise("  Thus x + y = 3. ") == normalise("thus x+y=3")
        True
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"\s+", "", text).strip(".,;:!?")


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
# Perturbations (teacher-free distractors)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """Replace ``span[start:end]`` by ``new``; ``kind`` names the perturbation."""

    start: int
    end: int
    new: str
    kind: str


def apply_edits(text: str, edits: Sequence[Edit]) -> str:
    """``text`` with non-overlapping ``edits`` applied.

    Raises:
        ValueError: Two edits overlap.
    """
    out, pos = [], 0
    for e in sorted(edits, key=lambda e: e.start):
        if e.start < pos:
            raise ValueError(f"overlapping edits at {e.start}")
        out.append(text[pos : e.start])
        out.append(e.new)
        pos = e.end
    out.append(text[pos:])
    return "".join(out)


_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\d.]?\d)")
_TOKEN_BEFORE = re.compile(r"([\w)\]}!']+)\s*$")
_TOKEN_AFTER = re.compile(r"^\s*([\w(\[{]+)")
_OPERATORS = {"+": "-", "-": "+", "*": "/", "/": "*", "×": "÷", "÷": "×"}
_REL_SYMBOLS = re.compile(r"<=|>=|≤|≥|≠|<|>")
_REL_SWAP = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "≤": "≥", "≥": "≤", "≠": "="}
#: (kind, word or phrase, replacement): case-preserving, whole words only, both directions listed.
_WORD_SWAPS: tuple[tuple[str, str, str], ...] = tuple(
    (kind, a, b)
    for kind, pairs in (
        (
            "relation",
            [
                ("greater", "less"), ("larger", "smaller"), ("more than", "less than"), ("maximum", "minimum"),
                ("largest", "smallest"), ("highest", "lowest"), ("increasing", "decreasing"),
                ("increases", "decreases"), ("positive", "negative"), ("above", "below"), ("before", "after"),
                ("upper", "lower"), ("inside", "outside"), ("first", "last"), ("left", "right"),
            ],
        ),
        (
            "quantifier",
            [("at least", "at most"), ("all", "some"), ("every", "some"), ("always", "never"), ("both", "neither"),
             ("exactly", "at least"), ("none", "all")],
        ),
        (
            "condition",
            [("even", "odd"), ("prime", "composite"), ("rational", "irrational"), ("possible", "impossible"),
             ("can", "cannot"), ("distinct", "identical"), ("necessary", "sufficient"),
             ("only if", "if"), ("true", "false"), ("independent", "dependent"), ("include", "exclude")],
        ),
    )
    for x, y in pairs
    for a, b in ((x, y), (y, x))
)


def _number_variants(token: str) -> list[str]:
    """Nearby wrong values of a number: off by one and two, doubled, halved, digits reversed."""
    if "." in token:
        whole, frac = token.split(".")
        scale = 10 ** len(frac)
        v = int(whole) * scale + int(frac)
        vals = [v + scale, v - scale, 2 * v]
        return [f"{x // scale}.{x % scale:0{len(frac)}d}" for x in vals if x >= 0 and x != v]
    if len(token) > 1 and token.startswith("0"):
        return []
    v = int(token)
    vals = [v + 1, v - 1, v + 2, 2 * v]
    if v % 2 == 0 and v > 2:
        vals.append(v // 2)
    rev = token[::-1].lstrip("0")
    if len(token) > 1 and rev and int(rev) != v:
        vals.append(int(rev))
    seen, out = set(), []
    for x in vals:
        if x >= 0 and x != v and x not in seen:
            seen.add(x)
            out.append(str(x))
    return out


def _mathy(token: str) -> bool:
    """A token that is an operand, not a word: a number, a one- or two-letter variable, a
    subscripted name (``x_n``), a bracket, or a factorial/prime."""
    core = token.strip("()[]{}!'")
    if not core:
        return True
    return bool(re.fullmatch(r"\d+(?:\.\d+)?|[A-Za-z]{1,2}\d*|[A-Za-z]+_\w+|\w*\d\w*", core))


def _case_like(word: str, template: str) -> str:
    if template.isupper() and len(template) > 1:
        return word.upper()
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def perturbations(span: str) -> list[Edit]:
    """Every single-point perturbation of ``span`` that makes it subtly wrong.

    Kinds: ``number`` (a constant off by one or two, doubled, halved, digits reversed),
    ``operator`` (``+``/``-``, ``*``/``/``, ``×``/``÷`` between operands, never inside words
    such as "non-negative"), ``relation`` (``<``/``>``, ``≤``/``≥``, greater/less, maximum/minimum,
    ...), ``quantifier`` (at least/at most, all/some, every/some, ...), ``condition`` (even/odd,
    prime/composite, can/cannot, only if/if, ...) and ``order`` (the operands of ``-`` or ``/``
    swapped). Swapped step order is added by :func:`step_order_variants`.

    Returns:
        Edits in order of position (several per position possible).

    Examples:
        >>> sorted({e.kind for e in perturbations("so x_n+y_n is at least 5")})
        ['number', 'operator', 'quantifier']
    """
    edits: list[Edit] = []
    for m in _NUMBER.finditer(span):
        for v in _number_variants(m.group(1)):
            edits.append(Edit(m.start(1), m.end(1), v, "number"))
    for i, ch in enumerate(span):
        if ch not in _OPERATORS:
            continue
        before = _TOKEN_BEFORE.search(span[:i])
        after = _TOKEN_AFTER.search(span[i + 1 :])
        if not before or not after or not (_mathy(before.group(1)) and _mathy(after.group(1))):
            continue
        if ch == "-" and span[i + 1 : i + 2] == ">" or ch == "/" and span[i - 1 : i] == "/":
            continue
        edits.append(Edit(i, i + 1, _OPERATORS[ch], "operator"))
        a, b = before.group(1), after.group(1)
        if ch in "-/÷" and a != b and re.fullmatch(r"\w+", a) and re.fullmatch(r"\w+", b):
            a0, b1 = before.start(1), i + 1 + after.end(1)
            middle = span[before.end(1) : i + 1 + after.start(1)]
            edits.append(Edit(a0, b1, b + middle + a, "order"))
    for m in _REL_SYMBOLS.finditer(span):
        edits.append(Edit(m.start(), m.end(), _REL_SWAP[m.group()], "relation"))
    taken: list[tuple[int, int]] = []
    for kind, word, repl in sorted(_WORD_SWAPS, key=lambda t: -len(t[1])):  # longest phrases first
        for m in re.finditer(rf"(?<![\w-]){re.escape(word)}(?![\w-])", span, re.IGNORECASE):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            edits.append(Edit(m.start(), m.end(), _case_like(repl, m.group()), kind))
            taken.append((m.start(), m.end()))
    return sorted(edits, key=lambda e: (e.start, e.end, e.kind, e.new))


def step_order_variants(span: str, steps: Sequence[tuple[int, int]]) -> list[str]:
    """The span with its steps in another order (adjacent swaps, then full reversal).

    Args:
        span: The span text.
        steps: ``(start, end)`` of each step relative to ``span``; the text between steps is kept.

    Returns:
        Distinct reorderings (empty for a single step).
    """
    if len(steps) < 2:
        return []
    bodies = [span[s:e] for s, e in steps]
    seps = [span[steps[i][1] : steps[i + 1][0]] for i in range(len(steps) - 1)]
    head, tail = span[: steps[0][0]], span[steps[-1][1] :]

    def join(order: Sequence[int]) -> str:
        parts = [bodies[order[0]]]
        for sep, j in zip(seps, order[1:]):
            parts += [sep, bodies[j]]
        return head + "".join(parts) + tail

    orders = []
    for i in range(len(steps) - 1):
        o = list(range(len(steps)))
        o[i], o[i + 1] = o[i + 1], o[i]
        orders.append(o)
    orders.append(list(reversed(range(len(steps)))))
    out = []
    for o in orders:
        t = join(o)
        if t != span and t not in out:
            out.append(t)
    return out


def make_distractors(
    span: str,
    span_steps: Sequence[tuple[int, int]],
    wrong_steps: Sequence[tuple[str, str]],
    need: int,
    bounds: Bounds,
    rng: random.Random,
    wrong_steps_max: int,
) -> tuple[list[str], list[str]]:
    """Pick ``need`` distinct wrong spans for ``span`` without an LLM.

    Real wrong steps (at most ``wrong_steps_max``, within the length bounds) come first; then
    single perturbations, drawn round-robin over kinds so an item mixes numbers, operators,
    relations, ... ; then step reorderings; then pairs of perturbations of different kinds.

    Args:
        span: The correct span.
        span_steps: Step offsets relative to ``span``.
        wrong_steps: ``(text, where)`` real wrong steps of the same problem.
        need: Distractors wanted (``k - 1``).
        bounds: Length-ratio bounds.
        rng: Seeded generator (the choice is deterministic given it).
        wrong_steps_max: Cap on real wrong steps per item.

    Returns:
        ``(distractors, origins)`` of length ``need``.

    Raises:
        Rejected: ``too_few_distractors`` when fewer than ``need`` distinct ones exist.
    """
    answer = normalise(span)
    seen = {answer}
    chosen: list[str] = []
    origins: list[str] = []

    def ok_len(text: str) -> bool:
        return bounds.ratio_min <= len(text) / max(1, len(span)) <= bounds.ratio_max

    def take(text: str, origin: str) -> bool:
        key = normalise(text)
        if not text.strip() or key in seen or not ok_len(text) or len(chosen) >= need:
            return False
        seen.add(key)
        chosen.append(text)
        origins.append(origin)
        return True

    real = [(t, w) for t, w in wrong_steps if ok_len(t) and normalise(t) != answer]
    rng.shuffle(real)
    n_real = 0
    for text, where in real:
        if n_real >= wrong_steps_max:
            break
        n_real += take(text, f"wrong_step:{where}")
    singles = perturbations(span)
    by_kind: dict[str, list[Edit]] = {}
    for e in singles:
        by_kind.setdefault(e.kind, []).append(e)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    for k in kinds:
        rng.shuffle(by_kind[k])
    queues = {k: list(v) for k, v in by_kind.items()}
    while len(chosen) < need and any(queues.values()):
        for k in kinds:
            if queues[k] and len(chosen) < need:
                e = queues[k].pop()
                take(apply_edits(span, [e]), f"perturb:{e.kind}")
    for text in step_order_variants(span, span_steps):
        take(text, "perturb:step_order")
    if len(chosen) < need and len(singles) > 1:
        pairs = [
            (a, b)
            for a, b in itertools.combinations(singles, 2)
            if a.kind != b.kind and (a.end <= b.start or b.end <= a.start)
        ]
        rng.shuffle(pairs)
        for a, b in pairs[: 50 * need]:
            if len(chosen) >= need:
                break
            take(apply_edits(span, [a, b]), f"perturb:{'+'.join(sorted((a.kind, b.kind)))}")
    if len(chosen) < need:
        raise Rejected("too_few_distractors", f"{len(chosen)} of {need} distinct distractors")
    return chosen, origins


def candidate_spans(passage: Passage, min_steps: int, max_steps: int, bounds: Bounds, rng: random.Random) -> list[tuple[int, int]]:
    """Step ranges ``[i, j)`` a teacher-free item may mask, most preferred first.

    A range keeps at least one step visible, has ``min_steps..max_steps`` steps and a span
    length within ``bounds``. Ranges containing a step with a concept/hint link come first
    (they hold the key reasoning the concepts name); ties are broken by the seeded ``rng``.

    Raises:
        Rejected: ``no_steps`` (not step-segmented) or ``too_few_steps`` (no range qualifies).
    """
    steps = passage.steps
    if steps is None:
        raise Rejected("no_steps", f"{passage.id} has no steps (set goose.segment=lines or sentences)")
    n = len(steps)
    linked = passage.linked or [False] * n
    out: list[tuple[int, int, bool]] = []
    for size in range(int(min_steps), int(max_steps) + 1):
        for i in range(n - size + 1):
            if size >= n:
                continue
            s, e = steps[i][0], steps[i + size - 1][1]
            if e - s < bounds.min_span_chars or e - s > bounds.max_span_share * len(passage.text):
                continue
            out.append((i, i + size, any(linked[i : i + size])))
    if not out:
        raise Rejected("too_few_steps", f"{passage.id}: {n} step(s), none maskable with goose.span settings")
    rng.shuffle(out)
    out.sort(key=lambda t: not t[2])  # stable: linked ranges first, seeded order within
    return [(i, j) for i, j, _ in out]


def teacher_free_candidate(passage: Passage, gcfg: Any, bounds: Bounds, seed: int) -> Candidate:
    """Build a validated teacher-free candidate for a step-segmented passage.

    Tries the step ranges of :func:`candidate_spans` in order and keeps the first whose
    distractors can be made and which passes :func:`validate`.

    Raises:
        Rejected: The reason that stopped the most ranges (``too_few_distractors``,
            ``span_recoverable``, ...), or ``no_steps`` / ``too_few_steps``.
    """
    rng = seeded_rng("goose-span", seed, passage.id)
    reasons: dict[str, list[Rejected]] = {}
    for i, j in candidate_spans(passage, int(gcfg.span.min_steps), int(gcfg.span.max_steps), bounds, rng):
        assert passage.steps is not None
        start, end = passage.steps[i][0], passage.steps[j - 1][1]
        rel = [(s - start, e - start) for s, e in passage.steps[i:j]]
        try:
            drng = seeded_rng("goose-distractors", seed, passage.id, i, j)
            distractors, origins = make_distractors(
                passage.text[start:end], rel, passage.wrong_steps, bounds.options - 1, bounds, drng,
                int(gcfg.distractors.wrong_steps_max),
            )
            cand = Candidate(passage, start, end, distractors, origins)
            validate(cand, bounds)
            return cand
        except Rejected as err:
            reasons.setdefault(err.reason, []).append(err)
    worst = max(reasons.values(), key=len)
    raise Rejected(worst[0].reason, f"no maskable step range passed ({', '.join(f'{r}: {len(v)}' for r, v in sorted(reasons.items()))})")


# --------------------------------------------------------------------------------------
# Teacher replies
# --------------------------------------------------------------------------------------


def parse_json_object(text: str, keys: Sequence[str] = ()) -> dict[str, Any]:
    """The JSON object of a teacher reply (code fences and prose around it are ignored).

    The first object holding one of ``keys`` is returned, else the first object decoded. An
    object found only inside a cut-off one (``{"span": "x", "distractors": [{"a": 1}``) does
    not count: the reply is malformed.

    Raises:
        Rejected: ``malformed_json`` when no complete JSON object can be decoded.
    """
    decoder = json.JSONDecoder()
    first: dict[str, Any] | None = None
    broken_before = False
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            broken_before = True
            continue
        if not isinstance(obj, dict):
            continue
        if any(k in obj for k in keys):
            return obj
        if first is None and not broken_before:
            first = obj
    if first is not None:
        return first
    raise Rejected("malformed_json", f"no complete JSON object in reply {text[:80]!r}")


def parse_mask_reply(text: str) -> tuple[str, list[str]]:
    """``(span, distractors)`` from a masking reply ``{"span": str, "distractors": [str, ...]}``.

    Raises:
        Rejected: ``malformed_json`` or ``bad_fields``.
    """
    obj = parse_json_object(text, ("span", "distractors"))
    span, distractors = obj.get("span"), obj.get("distractors")
    if not isinstance(span, str) or not span.strip():
        raise Rejected("bad_fields", f"'span' must be a non-empty string, got {type(span).__name__}")
    if not isinstance(distractors, list) or not all(isinstance(d, str) for d in distractors):
        raise Rejected("bad_fields", "'distractors' must be a list of strings")
    return span, distractors


def parse_extract_reply(text: str) -> str | None:
    """The clean passage of an extraction reply ``{"passage": str or null}`` (``None``: none found).

    Raises:
        Rejected: ``malformed_json`` or ``bad_fields``.
    """
    obj = parse_json_object(text, ("passage",))
    if "passage" not in obj:
        raise Rejected("bad_fields", "the reply has no 'passage' field")
    passage = obj.get("passage")
    if passage is not None and not isinstance(passage, str):
        raise Rejected("bad_fields", f"'passage' must be a string or null, got {type(passage).__name__}")
    return passage.strip() if passage and passage.strip() else None


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
    is empty; no distractor equals the answer or another distractor after :func:`normalise`;
    every distractor's length is within the ratio bounds of the answer's; exactly one option is
    correct.

    Returns:
        ``{check name: True}`` for every check (stored in :attr:`MCQ.checks`).

    Raises:
        Rejected: The failed check's reason.
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
    checks["distinct_options"] = True
    for i, d in enumerate(cand.distractors):
        r = len(d) / len(span)
        if not bounds.ratio_min <= r <= bounds.ratio_max:
            raise Rejected("length_ratio", f"distractor {i} is {r:.2f}x the answer length (bounds {bounds.ratio_min}-{bounds.ratio_max})")
    checks["length_ratio"] = True
    options = [span] + list(cand.distractors)
    checks["one_correct"] = sum(normalise(o) == answer for o in options) == 1
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
