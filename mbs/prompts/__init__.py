"""Versioned prompt templates (one text file per template; the name carries the version).

A template's text is rendered into the chat messages, so it is part of every LLM cache key:
editing a template file changes the key and never serves stale completions. Placeholders are
``{name}`` and are substituted literally (LaTeX braces in problems are safe).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


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


def render(name: str, **fields: str) -> str:
    """Fill the ``{field}`` placeholders of template ``name``.

    Raises:
        KeyError: The template has a placeholder that ``fields`` lacks.
    """
    missing = sorted(_placeholders(name) - set(fields))
    if missing:
        raise KeyError(f"template {name!r} needs field(s) {missing}")
    # one pass: a "{k}" inside an inserted problem (\binom{n}{k}) is never substituted again
    return _PLACEHOLDER.sub(lambda m: fields[m.group(1)] if m.group(1) in fields else m.group(0), load_template(name))


@lru_cache(maxsize=64)
def _placeholders(name: str) -> frozenset[str]:
    return frozenset(_PLACEHOLDER.findall(load_template(name)))


def user_messages(name: str, **fields: str) -> list[dict[str, str]]:
    """A one-turn chat: the rendered template as the user message."""
    return [{"role": "user", "content": render(name, **fields)}]
