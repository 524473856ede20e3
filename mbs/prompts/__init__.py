"""Versioned prompt templates (one text file per template; the name carries the version).

A template's text is rendered into the chat messages, so it is part of every LLM cache key:
editing a template file changes the key and never serves stale completions. Placeholders are
``{name}`` and are substituted literally (LaTeX braces in problems are safe).

A template is one user turn, or a chat with demonstration turns: a line ``[[user]]`` or
``[[assistant]]`` opens a turn (the text before the first marker must be blank), and the last turn
is the user's. Markers are read from the template file before any field is filled, so a problem's
text can never open a turn. A small policy copies an answer format it has seen answered far more
reliably than one it is only told (``reasoning_gym_demo_v1``; docs/thesis.md, "The second task").
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_TURN = re.compile(r"^\[\[(user|assistant)\]\][ \t]*\n?", re.MULTILINE)


@lru_cache(maxsize=64)
def load_template(name: str) -> str:
    """Text of template ``name`` (``mbs/prompts/<name>.txt``).

    Raises:
        FileNotFoundError: Unknown template (lists the available ones).
    """
    path = TEMPLATE_DIR / f"{name}.txt"
    if not path.is_file():
        names = sorted(p.stem for p in TEMPLATE_DIR.rglob("*.txt"))
        raise FileNotFoundError(f"prompt template {name!r} not found in {TEMPLATE_DIR}; available: {names}")
    return path.read_text(encoding="utf-8")


def _fill(text: str, fields: dict[str, str]) -> str:
    # one pass: a "{k}" inside an inserted problem (\binom{n}{k}) is never substituted again
    return _PLACEHOLDER.sub(lambda m: fields[m.group(1)] if m.group(1) in fields else m.group(0), text)


@lru_cache(maxsize=64)
def _placeholders(name: str) -> frozenset[str]:
    return frozenset(p for _, body in turns(name) for p in _PLACEHOLDER.findall(body))


def _require(name: str, fields: dict[str, str]) -> None:
    missing = sorted(_placeholders(name) - set(fields))
    if missing:
        raise KeyError(f"template {name!r} needs field(s) {missing}")


@lru_cache(maxsize=64)
def turns(name: str) -> tuple[tuple[str, str], ...]:
    """The turns of template ``name``: ``((role, unfilled text), ...)``, one user turn when the
    template has no ``[[user]]`` / ``[[assistant]]`` marker.

    Raises:
        FileNotFoundError: Unknown template.
        ValueError: Text before the first marker, an empty turn, two turns of one role in a row,
            or a last turn that is not the user's (names the template).
    """
    text = load_template(name)
    marks = list(_TURN.finditer(text))
    if not marks:
        return (("user", text),)
    if text[: marks[0].start()].strip():
        raise ValueError(f"template {name!r}: text before the first [[user]] / [[assistant]] marker")
    out: list[tuple[str, str]] = []
    for i, m in enumerate(marks):
        body = text[m.end() : marks[i + 1].start() if i + 1 < len(marks) else len(text)].strip("\n")
        if not body.strip():
            raise ValueError(f"template {name!r}: turn {i + 1} ([[{m.group(1)}]]) is empty")
        if out and out[-1][0] == m.group(1):
            raise ValueError(f"template {name!r}: turns {i} and {i + 1} are both [[{m.group(1)}]] (turns alternate)")
        out.append((m.group(1), body))
    if out[-1][0] != "user":
        raise ValueError(f"template {name!r}: the last turn must be [[user]] (the policy answers it)")
    return tuple(out)


def render(name: str, **fields: str) -> str:
    """Fill the ``{field}`` placeholders of one-turn template ``name``.

    Raises:
        KeyError: The template has a placeholder that ``fields`` lacks.
        ValueError: A template with demonstration turns (use :func:`user_messages`).
    """
    parts = turns(name)
    if len(parts) > 1:
        raise ValueError(f"template {name!r} has {len(parts)} turns: render it with user_messages")
    _require(name, fields)
    return _fill(parts[0][1], fields)


def user_messages(name: str, **fields: str) -> list[dict[str, str]]:
    """The chat of template ``name``: its turns with their ``{field}`` placeholders filled.

    Returns:
        ``[{"role": "user" | "assistant", "content": str}, ...]``, ending with the user's turn; a
        one-turn template gives ``[{"role": "user", "content": ...}]``.

    Raises:
        KeyError: A placeholder that ``fields`` lacks (in any turn).
        ValueError: A malformed multi-turn template (:func:`turns`).
    """
    _require(name, fields)
    return [{"role": role, "content": _fill(body, fields)} for role, body in turns(name)]
