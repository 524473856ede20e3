"""Golden Goose's teacher-free items: distractors that perturb the masked span.

For step-segmented passages (CHAMP) a contiguous run of solution steps is masked (steps with
concept/hint links first) and the distractors are perturbations of the removed span
(:func:`perturbations`: numbers, operators, relations, quantifiers, conditions, step and operand
order) and real wrong steps (CHAMP's first-wrong-step annotations). No LLM; deterministic given
the seed. The candidate then goes through :func:`mbs.synth.goose.build.validate`.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mbs.synth.goose.build import Bounds, Candidate, Rejected, normalise, seeded_rng, validate
from mbs.synth.goose.equivalence import equivalent, uses_result
from mbs.synth.goose.grid import grid_distractors, passage_numbers
from mbs.synth.goose.settings import StepSettings
from mbs.synth.goose.sources import Passage

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
    """The span with its steps in another order that makes it wrong: adjacent swaps where the
    later step uses the earlier one's result, then the full reversal where any later step uses
    an earlier one's (:func:`mbs.synth.goose.equivalence.uses_result`). Independent steps in
    another order say the same thing, so they are never swapped.

    Args:
        span: The span text.
        steps: ``(start, end)`` of each step relative to ``span``; the text between steps is kept.

    Returns:
        Distinct reorderings (empty for a single step or independent steps).
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
        if not uses_result(bodies[i], bodies[i + 1]):
            continue
        o = list(range(len(steps)))
        o[i], o[i + 1] = o[i + 1], o[i]
        orders.append(o)
    if any(uses_result(bodies[i], bodies[j]) for i in range(len(steps)) for j in range(i + 1, len(steps))):
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
    design: str = "grid",
    context: str = "",
    stats: Counter[str] | None = None,
) -> tuple[list[str], list[str]]:
    """Pick ``need`` distinct wrong spans for ``span`` without an LLM.

    No option is equivalent to the answer: a text that says what ``span`` says once its
    formulas are evaluated (:func:`mbs.synth.goose.equivalence.equivalent`) is rejected and
    another one taken; one edit never changes both the operand order and an operator (the two
    undo each other: ``12 + (3 - 5)`` is ``12 - (5 - 3)``).

    Real wrong steps (at most ``wrong_steps_max``, within the length bounds; with the grid also
    at most one per four distractors) come first. With
    ``design="grid"`` the rest are cells of an edit grid (:func:`mbs.synth.goose.grid.grid_distractors`:
    distractors edited from each other as much as from the answer, so the answer is not the
    centre), then as fallbacks: step reorderings, single perturbations, pairs. With
    ``design="single_edits"`` (the original construction, kept for ablations and the audit's
    tests) single perturbations come next, drawn round-robin over kinds so an item mixes
    numbers, operators, relations, ... ; then step reorderings; then pairs of perturbations of
    different kinds.

    Args:
        span: The correct span.
        span_steps: Step offsets relative to ``span``.
        wrong_steps: ``(text, where)`` real wrong steps of the same problem.
        need: Distractors wanted (``k - 1``).
        bounds: Length-ratio bounds.
        rng: Seeded generator (the choice is deterministic given it).
        wrong_steps_max: Cap on real wrong steps per item.
        design: ``grid`` or ``single_edits`` (``goose.distractors.design``).
        context: The passage (its numbers are preferred as wrong values in the grid).
        stats: Counts ``options_rejected_equivalent`` (distinct candidate texts rejected as
            equivalent to the answer) when given.

    Returns:
        ``(distractors, origins)`` of length ``need``.

    Raises:
        Rejected: ``too_few_distractors`` when fewer than ``need`` distinct ones exist.
        ValueError: Unknown ``design``.
    """
    if design not in ("grid", "single_edits"):
        raise ValueError(f"goose.distractors.design={design!r}: valid values are grid, single_edits")
    answer = normalise(span)
    seen = {answer}
    same: set[str] = set()  # texts equivalent to the answer
    chosen: list[str] = []
    origins: list[str] = []

    def ok_len(text: str) -> bool:
        return bounds.ratio_min <= len(text) / max(1, len(span)) <= bounds.ratio_max

    def wrong(text: str) -> bool:
        key = normalise(text)
        if key in same:
            return False
        if equivalent(text, span):
            same.add(key)
            if stats is not None:
                stats["options_rejected_equivalent"] += 1
            return False
        return True

    def take(text: str, origin: str) -> bool:
        key = normalise(text)
        if not text.strip() or key in seen or not ok_len(text) or len(chosen) >= need or not wrong(text):
            return False
        seen.add(key)
        chosen.append(text)
        origins.append(origin)
        return True

    real = [(t, w) for t, w in wrong_steps if ok_len(t) and normalise(t) != answer]
    rng.shuffle(real)
    n_real = 0
    # grid items: a real wrong step shares vocabulary with the answer and pulls it to the centre,
    # the more so the fewer the options: at most one per four distractors
    cap = wrong_steps_max if design == "single_edits" else min(wrong_steps_max, need // 4)
    for text, where in real:
        if n_real >= cap:
            break
        n_real += take(text, f"wrong_step:{where}")
    singles = perturbations(span)
    if design == "grid":
        n = need - len(chosen)
        ok = lambda t: bool(t.strip()) and normalise(t) not in seen and ok_len(t) and wrong(t)
        for text, origin in grid_distractors(span, singles, n, ok, rng, pool=passage_numbers("\n".join([context or span, *chosen]))):
            take(text, origin)
        for text in step_order_variants(span, span_steps):
            take(text, "perturb:step_order")
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
            if a.kind != b.kind and {a.kind, b.kind} != {"operator", "order"} and (a.end <= b.start or b.end <= a.start)
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


def teacher_free_candidate(passage: Passage, steps: StepSettings, bounds: Bounds, seed: int, attempt: int = 0) -> Candidate:
    """Build a validated teacher-free candidate for a step-segmented passage.

    Tries the step ranges of :func:`candidate_spans` in order and keeps the first whose
    distractors can be made and which passes :func:`validate`.

    Args:
        passage: The passage.
        steps: Spans and distractors (``goose.span.min_steps``/``max_steps``, ``goose.distractors``).
        bounds: Validation bounds.
        seed: The run's base seed.
        attempt: Rebuild attempt of the shortcut audit (0: first build); later attempts draw
            other distractor sets.

    Returns:
        The candidate; its ``equivalent`` counts the options rejected as equivalent to the
        answer over the ranges tried.

    Raises:
        Rejected: The reason that stopped the most ranges (``too_few_distractors``,
            ``span_recoverable``, ...), or ``no_steps`` / ``too_few_steps``; its ``equivalent``
            counts the options rejected as equivalent over all ranges.
    """
    rng = seeded_rng("goose-span", seed, passage.id)
    reasons: dict[str, list[Rejected]] = {}
    stats: Counter[str] = Counter()
    for i, j in candidate_spans(passage, steps.min_steps, steps.max_steps, bounds, rng):
        assert passage.steps is not None
        start, end = passage.steps[i][0], passage.steps[j - 1][1]
        rel = [(s - start, e - start) for s, e in passage.steps[i:j]]
        try:
            drng = seeded_rng("goose-distractors", seed, passage.id, i, j, *([attempt] if attempt else []))
            distractors, origins = make_distractors(
                passage.text[start:end], rel, passage.wrong_steps, bounds.options - 1, bounds, drng,
                steps.wrong_steps_max, steps.design, passage.text, stats,
            )
            cand = Candidate(passage, start, end, distractors, origins, stats["options_rejected_equivalent"])
            validate(cand, bounds)
            return cand
        except Rejected as err:
            reasons.setdefault(err.reason, []).append(err)
    worst = max(reasons.values(), key=len)
    failed = Rejected(worst[0].reason, f"no maskable step range passed ({', '.join(f'{r}: {len(v)}' for r, v in sorted(reasons.items()))})")
    failed.equivalent = stats["options_rejected_equivalent"]
    raise failed
