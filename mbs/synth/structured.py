"""Strict parsing of teacher output: problems with a solution and a final answer in tagged sections.

Every teacher step of MagicBeanStalk and of the direct baseline writes its problems in one
tagged format (documented in each template under ``mbs/prompts/``)::

    <subproblem>                      (decompositions only: one block per subproblem)
    <problem>the statement, self-contained</problem>
    <solution>the worked solution, ending with \\boxed{answer}</solution>
    <answer>the final answer only</answer>
    </subproblem>

Tagged sections rather than JSON: LaTeX is full of backslashes and braces that small models
never escape correctly inside JSON strings, while tags need no escaping at all.

Strict means: each of ``<problem>``, ``<solution>`` and ``<answer>`` occurs exactly once per
item, opened and closed, non-empty; ``<subproblem>`` blocks are opened and closed in turn and
never nested; an answer is a short final answer, not prose. Chatter outside the tags
(a preamble, a closing remark) is ignored. Every failure is a :class:`StructureError` whose
message names the rule broken, and becomes the recorded rejection reason.

The semantic checks of Stage 2 live here too: :func:`self_reference` (a subproblem that
mentions "the original problem" or "the problem above" is not self-contained). Whether an
answer verifies against its own solution is checked by the grading pool (``mbs.verify``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: Sections every item must have, in the order they are reported when missing.
FIELDS = ("problem", "solution", "answer")


class StructureError(ValueError):
    """Teacher output that breaks the tagged format; the message is the rejection reason."""


@dataclass
class Item:
    """One parsed problem.

    Attributes:
        problem: The statement.
        solution: The worked solution (the trace).
        answer: The final answer, with ``$...$`` and ``\\boxed{...}`` wrappers removed.
    """

    problem: str
    solution: str
    answer: str


def _sections(text: str, tag: str) -> list[str]:
    """Contents of every ``<tag>...</tag>`` in ``text``.

    Raises:
        StructureError: Opening and closing tags do not pair up.
    """
    opens = len(re.findall(rf"<{tag}\s*>", text, re.IGNORECASE))
    closes = len(re.findall(rf"</{tag}\s*>", text, re.IGNORECASE))
    found = re.findall(rf"<{tag}\s*>(.*?)</{tag}\s*>", text, re.IGNORECASE | re.DOTALL)
    if opens != closes:
        raise StructureError(f"unbalanced <{tag}> tags ({opens} opened, {closes} closed)")
    if len(found) != opens or any(re.search(rf"<{tag}\s*>", f, re.IGNORECASE) for f in found):
        raise StructureError(f"nested <{tag}> tags")
    return found


def strip_answer(answer: str) -> str:
    """The bare final answer: outer whitespace, ``$...$``/``\\(...\\)`` and one ``\\boxed{...}`` removed.

    >>> strip_answer("  $\\\\boxed{\\\\frac{1}{2}}$ ")
    '\\\\frac{1}{2}'
    """
    a = answer.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if a.startswith(left) and a.endswith(right) and len(a) >= len(left) + len(right):
            a = a[len(left) : len(a) - len(right)].strip()
            break
    m = re.match(r"\\boxed\s*\{", a)
    if m and _closing_brace(a, m.end() - 1) == len(a) - 1:
        a = a[m.end() : -1].strip()
    return a.rstrip(".").strip()


def _closing_brace(text: str, start: int) -> int | None:
    """Index of the ``}`` that closes the ``{`` at ``start``, or ``None``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def parse_item(text: str, max_answer_chars: int = 120) -> Item:
    """Parse one problem (``<problem>``, ``<solution>``, ``<answer>``) from teacher output.

    Args:
        text: Teacher output (or one ``<subproblem>`` block of it).
        max_answer_chars: Longest accepted final answer in characters (longer is prose).

    Returns:
        The :class:`Item`.

    Raises:
        StructureError: A section is missing, repeated, unclosed or empty, or the answer is
            too long or spans several lines.
    """
    parts: dict[str, str] = {}
    for field in FIELDS:
        found = _sections(text, field)
        if not found:
            raise StructureError(f"missing <{field}>")
        if len(found) > 1:
            raise StructureError(f"{len(found)} <{field}> sections (expected one)")
        value = found[0].strip()
        if not value:
            raise StructureError(f"empty <{field}>")
        parts[field] = value
    answer = strip_answer(parts["answer"])
    if not answer:
        raise StructureError("empty <answer>")
    if "\n" in answer:
        raise StructureError("<answer> spans several lines (expected the final answer only)")
    if len(answer) > max_answer_chars:
        raise StructureError(f"<answer> has {len(answer)} characters (> {max_answer_chars}: not a final answer)")
    return Item(problem=parts["problem"], solution=parts["solution"], answer=answer)


def parse_blocks(text: str, tag: str = "subproblem") -> list[str]:
    """The ``<tag>`` blocks of a decomposition, in order.

    Raises:
        StructureError: No block, unbalanced tags, or nested blocks.
    """
    blocks = _sections(text, tag)
    if not blocks:
        raise StructureError(f"no <{tag}> block")
    return blocks


def parse_items(text: str, k: int, tag: str = "subproblem", max_answer_chars: int = 120) -> list[Item | StructureError]:
    """Parse a decomposition into at most ``k`` items (Stage 2).

    Args:
        text: Teacher output.
        k: K, the most subproblems kept; blocks beyond the K-th become errors.
        tag: Block tag.
        max_answer_chars: See :func:`parse_item`.

    Returns:
        One entry per block, in order: the :class:`Item`, or the :class:`StructureError`
        that rejects it.

    Raises:
        StructureError: The output as a whole has no valid block structure.
    """
    out: list[Item | StructureError] = []
    for i, block in enumerate(parse_blocks(text, tag)):
        if i >= k:
            out.append(StructureError(f"beyond K={k} subproblems"))
            continue
        try:
            out.append(parse_item(block, max_answer_chars))
        except StructureError as err:
            out.append(err)
    return out


def self_reference(text: str, patterns: Sequence[str]) -> str | None:
    """The first phrase of ``text`` matching one of ``patterns`` (case-insensitive), or ``None``.

    A subproblem that refers to "the original problem" or to "the problem above" cannot be
    posed on its own (Stage 2 rejects it).
    """
    for pat in patterns:
        m = re.search(pat, text, re.IGNORECASE)
        if m:
            return m.group(0)
    return None


def parse_verdict(text: str) -> dict[str, bool]:
    """A judge's verdict: ``<well_posed>yes|no</well_posed>`` and ``<answer_correct>yes|no</answer_correct>``.

    Returns:
        ``{"well_posed": bool, "answer_correct": bool}``.

    Raises:
        StructureError: A verdict is missing, repeated or not yes/no.
    """
    out = {}
    for field in ("well_posed", "answer_correct"):
        found = _sections(text, field)
        if len(found) != 1:
            raise StructureError(f"{len(found)} <{field}> sections (expected one)")
        value = found[0].strip().lower().rstrip(".")
        if value not in ("yes", "no"):
            raise StructureError(f"<{field}> is {value[:20]!r} (expected yes or no)")
        out[field] = value == "yes"
    return out
