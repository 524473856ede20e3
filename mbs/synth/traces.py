"""Stage-1 traces of thinking teachers: what is stored, and what later prompts receive.

A verified Stage-1 trace (seed paper, Stage 1: the "reasoning blueprint" decomposition and
composition build on) has two parts when the teacher thinks: its reasoning and its written
solution (the final answer of the response). Both are stored on the root
(:attr:`mbs.records.TreeNode.trace` holds the solution, :attr:`~mbs.records.TreeNode.trace_reasoning`
the reasoning). What the Stage-2/3 prompts receive is a config choice (``mbs.trace_context``):

* ``solution`` (default): the written solution only, short and clean;
* ``reasoning``: the reasoning followed by the solution, the full blueprint.

Long texts are clipped from the front (:func:`keep_end`), so a prompt keeps the conclusion (the
boxed answer and the steps before it), never only the opening of a long draft.
"""

from __future__ import annotations

__all__ = ["MODES", "blueprint", "keep_end", "trace_for_prompt"]

#: Values of ``mbs.trace_context``.
MODES = ("solution", "reasoning")

_MARK = "[...] "


def keep_end(text: str | None, max_chars: int) -> str:
    """``text`` cut to its last ``max_chars`` characters, marked ``[...]`` at the front.

    The cut moves forward to the next space (no half word) when one is within a tenth of the
    room (at least 16 characters).

    >>> keep_end("step one. step two. so the answer is 4.", 24)
    '[...] the answer is 4.'
    """
    text = text or ""
    if len(text) <= max_chars:
        return text
    room = max(0, max_chars - len(_MARK))
    start = len(text) - room
    space = text.find(" ", start, start + max(16, room // 10))
    if space != -1:
        start = space + 1
    return _MARK + text[start:].lstrip()


def blueprint(solution: str | None, reasoning: str | None, mode: str = "solution") -> str:
    """The trace text of ``mode`` (see the module docstring), unclipped.

    Raises:
        ValueError: ``mode`` is not one of :data:`MODES`.
    """
    if mode not in MODES:
        raise ValueError(f"mbs.trace_context={mode!r}: valid values are {', '.join(MODES)}")
    solution = solution or ""
    if mode == "reasoning" and reasoning and reasoning.strip():
        return f"{reasoning.strip()}\n\n{solution}".rstrip()
    return solution


def trace_for_prompt(solution: str | None, reasoning: str | None, mode: str, max_chars: int) -> str:
    """What a Stage-2/3 prompt receives of a trace: :func:`blueprint`, clipped by :func:`keep_end`."""
    return keep_end(blueprint(solution, reasoning, mode), max_chars)
