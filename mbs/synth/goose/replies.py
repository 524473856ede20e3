"""Golden Goose teacher replies in a LaTeX-safe tagged format (masking and passage extraction).

The teacher copies text out of a passage: the span to mask, wrong replacements for it, or the
clean passage itself. Passages are full of LaTeX, and LaTeX does not survive JSON strings:
``"\\frac{1}{2}"`` decodes to a form feed plus ``rac{1}{2}``, ``"\\times"`` to a tab plus
``imes``, and ``"\\sqrt"`` or ``"\\cdot"`` are rejected as invalid escapes. So replies use tags,
as the MBS teacher formats do (:mod:`mbs.synth.structured`): the text between the tags is taken
as written, every backslash and brace byte for byte (only the white space around it is dropped)::

    <span>
    the exact span
    </span>
    <distractor>
    a wrong replacement
    </distractor>
    ...

    <passage>
    the clean passage          (empty section: no passage in the text)
    </passage>

    <verdict>wrong</verdict>   (the judge pass: one per distractor, ``wrong`` or ``correct``)

The reply parsed is the teacher's final answer (a thinking teacher's drafts never reach here;
see :mod:`mbs.reasoning`). Templates: ``goose_mask_v2``, ``goose_extract_v2``, ``goose_judge_v1``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "ReplyError", "format_extract_reply", "format_judge_reply", "format_mask_reply", "parse_extract_reply", "parse_judge_reply",
    "parse_mask_reply",
]


class ReplyError(ValueError):
    """A reply that breaks the tagged format.

    Attributes:
        reason: ``malformed_reply`` (a section is missing or unclosed) or ``bad_fields``
            (a section is empty).
        detail: What exactly is wrong (names the section).
    """

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


def _open(tag: str) -> re.Pattern:
    return re.compile(rf"<{tag}\s*>", re.IGNORECASE)


def _close(tag: str) -> re.Pattern:
    return re.compile(rf"</{tag}\s*>", re.IGNORECASE)


def _section(text: str, tag: str, end: int | None = None) -> tuple[str, int] | None:
    """Content of the first ``<tag>`` up to the last ``</tag>`` before ``end``, and where it
    closes; the content may itself hold the closing tag (an HTML passage), never the opening one."""
    opened = _open(tag).search(text, 0, len(text) if end is None else end)
    if opened is None:
        return None
    closes = [m for m in _close(tag).finditer(text, opened.end(), len(text) if end is None else end)]
    if not closes:
        raise ReplyError("malformed_reply", f"<{tag}> is never closed")
    last = closes[-1]
    content = text[opened.end() : last.start()]
    if _open(tag).search(content):
        raise ReplyError("malformed_reply", f"more than one <{tag}> section")
    return content, last.end()


def _clean(content: str) -> str:
    """The content as written, without the white space (line breaks) around it."""
    return content.strip()


def parse_mask_reply(text: str) -> tuple[str, list[str]]:
    """``(span, distractors)`` of a masking reply (``<span>`` once, then ``<distractor>`` sections).

    Args:
        text: The teacher's final answer.

    Returns:
        The span and the distractors, each exactly as written between its tags.

    Raises:
        ReplyError: ``malformed_reply`` (no ``<span>`` section, an unclosed section, a second
            ``<span>``) or ``bad_fields`` (an empty span or distractor).
    """
    first_distractor = _open("distractor").search(text)
    span_end = first_distractor.start() if first_distractor else None
    found = _section(text, "span", span_end)
    if found is None:
        hint = " (JSON replies are not read: LaTeX does not survive JSON strings)" if "{" in text and '"span"' in text else ""
        raise ReplyError("malformed_reply", f"no <span> section{hint}: {text[:80]!r}")
    span, after = found
    if _open("span").search(text, after):
        raise ReplyError("malformed_reply", "more than one <span> section")
    if not _clean(span):
        raise ReplyError("bad_fields", "the <span> section is empty")
    distractors = []
    for i, m in enumerate(_open("distractor").finditer(text, after), 1):
        close = _close("distractor").search(text, m.end())
        nxt = _open("distractor").search(text, m.end())
        if close is None or (nxt is not None and nxt.start() < close.start()):
            raise ReplyError("malformed_reply", f"<distractor> section {i} is never closed")
        content = _clean(text[m.end() : close.start()])
        if not content:
            raise ReplyError("bad_fields", f"<distractor> section {i} is empty")
        distractors.append(content)
    return _clean(span), distractors


def parse_extract_reply(text: str) -> str | None:
    """The clean passage of an extraction reply; ``None`` for an empty ``<passage>`` section.

    Raises:
        ReplyError: ``malformed_reply`` when there is no (closed) ``<passage>`` section.
    """
    found = _section(text, "passage")
    if found is None:
        raise ReplyError("malformed_reply", f"no <passage> section: {text[:80]!r}")
    passage = _clean(found[0])
    return passage or None


def format_mask_reply(span: str, distractors: Sequence[str]) -> str:
    """The reply :func:`parse_mask_reply` reads back to ``(span, distractors)`` (scripted teachers)."""
    parts = [f"<span>\n{span}\n</span>"] + [f"<distractor>\n{d}\n</distractor>" for d in distractors]
    return "\n".join(parts)


def format_extract_reply(passage: str | None) -> str:
    """The reply :func:`parse_extract_reply` reads back to ``passage`` (``None``: an empty section)."""
    return f"<passage>\n{passage}\n</passage>" if passage else "<passage></passage>"


_VERDICT = re.compile(r"<verdict\s*>(.*?)</verdict\s*>", re.IGNORECASE | re.DOTALL)


def parse_judge_reply(text: str, n: int) -> list[bool]:
    """Whether the judge found each of ``n`` distractors correct (``True``) or wrong (``False``).

    Raises:
        ReplyError: ``malformed_reply`` when there are not ``n`` ``<verdict>`` sections or one
            holds neither ``wrong`` nor ``correct``.
    """
    verdicts = [v.strip().strip(".").casefold() for v in _VERDICT.findall(text)]
    if len(verdicts) != n:
        raise ReplyError("malformed_reply", f"{len(verdicts)} <verdict> sections for {n} candidates")
    bad = [v for v in verdicts if v not in ("wrong", "correct")]
    if bad:
        raise ReplyError("malformed_reply", f"a <verdict> holds {bad[0][:40]!r}, not wrong or correct")
    return [v == "correct" for v in verdicts]


def format_judge_reply(correct: Sequence[bool]) -> str:
    """The reply :func:`parse_judge_reply` reads back to ``correct`` (scripted teachers)."""
    return "\n".join(f"<verdict>{'correct' if c else 'wrong'}</verdict>" for c in correct)
