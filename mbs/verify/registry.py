"""The verifier registry: :class:`Grade`, :func:`register` and the registered names.

Verifier modules (:mod:`mbs.verify.math`, :mod:`mbs.verify.mcq`, ...) import from here, and
:mod:`mbs.verify` imports them, so the registry sits below both and no import goes in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mbs.errors import UnknownNameError


@dataclass(frozen=True)
class Grade:
    """The outcome of grading one response.

    Attributes:
        score: ``1.0`` (correct), ``0.0`` (wrong, including "no answer given"), or ``None``
            when the response could not be graded (unparseable gold, verifier error,
            timeout). ``None`` is never silently turned into ``0.0`` here; callers decide.
        extracted: The final answer extracted from the response, or ``None``.
        reason: Short human-readable reason, e.g. ``"boxed: equal"``,
            ``"no answer found"``, ``"timeout after 5.0s"``.
    """

    score: float | None
    extracted: str | None
    reason: str


Verifier = Callable[[str, str], Grade]


class UnknownVerifierError(UnknownNameError):
    """Raised for a verifier name that is neither registered nor an importable path.

    The message lists the registered names.
    """

    def __str__(self) -> str:  # KeyError would show the repr of the message
        return str(self.args[0]) if self.args else ""


_REGISTRY: dict[str, Verifier] = {}


def register(name: str) -> Callable[[Verifier], Verifier]:
    """Register a verifier under ``name`` (decorator).

    Example::

        @register("math")
        def grade_math(response: str, ground_truth: str) -> Grade: ...

    Args:
        name: Registry name; also the ``<verifier>`` part of ``mbs/<verifier>/<origin>``
            data sources. ``"auto"`` and names containing ``":"`` or ``"/"`` are reserved.

    Returns:
        A decorator that registers the function and returns it unchanged.

    Raises:
        ValueError: If the name is reserved or already taken by a different function.
    """
    if name == "auto" or ":" in name or "/" in name or not name:
        raise ValueError(f"reserved or invalid verifier name {name!r}")

    def decorator(fn: Verifier) -> Verifier:
        old = _REGISTRY.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(
                f"verifier {name!r} is already registered to {old.__module__}.{old.__qualname__}"
            )
        _REGISTRY[name] = fn
        return fn

    return decorator


def available() -> list[str]:
    """Registered verifier names, sorted."""
    return sorted(_REGISTRY)
