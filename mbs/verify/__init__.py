"""Verifiers: turn a model response and a ground truth into a :class:`Grade`.

A verifier is a pure function ``(response, ground_truth) -> Grade`` registered under a
name (the registry replaces verl's ``if data_source == ...``
chain, verl#151)::

    from mbs.verify import grade
    grade(r"... so the answer is $\\boxed{\\frac{9}{7}}$.", r"\\dfrac{9}{7}")
    # Grade(score=1.0, extracted='\\frac{9}{7}', reason='boxed: structurally equal')

Built-in verifiers: ``math`` (:mod:`mbs.verify.math`, math-verify with careful answer
extraction) and ``mcq`` (:mod:`mbs.verify.mcq`, option letters). ``"auto"`` picks one from
the ground truth (:func:`detect_verifier`). Any importable function can be used through
an import path ``"pkg.module:function"``.

:func:`grade` runs in-process without a timeout; pipelines grade model output through
:class:`mbs.verify.pool.GradingPool`, which adds a CPU-time limit and a hard wall-clock
timeout per grading.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass

from mbs.errors import UnknownNameError

__all__ = [
    "Grade",
    "UnknownVerifierError",
    "Verifier",
    "available",
    "detect_verifier",
    "get_verifier",
    "grade",
    "register",
]


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


def _unknown(name: str, why: str = "") -> UnknownVerifierError:
    valid = ", ".join(available())
    return UnknownVerifierError(
        f"unknown verifier {name!r}{why}; valid names: {valid}, 'auto', or an import path 'pkg.module:function'"
    )


def get_verifier(name: str) -> Verifier:
    """Look up a verifier by registry name or import path.

    Args:
        name: A registered name (see :func:`available`) or ``"pkg.module:function"``.

    Returns:
        The verifier function ``(response, ground_truth) -> Grade``.

    Raises:
        UnknownVerifierError: If the name is not registered and is not an importable
            ``module:function`` path; the message lists the valid names.
    """
    fn = _REGISTRY.get(name)
    if fn is not None:
        return fn
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError, ValueError) as exc:
            raise _unknown(name, f" ({type(exc).__name__}: {exc})") from exc
        if not callable(fn):
            raise _unknown(name, " (not callable)")
        return fn
    raise _unknown(name)


# Gold forms of an option letter: "C", "(C)", "C.", "C)". Upper case only: a lower-case
# single letter is more likely a math variable.
_OPTION_GOLD = re.compile(r"\s*\(?\s*([A-J])\s*\)?\s*\.?\s*")


def detect_verifier(ground_truth: str) -> str:
    """Choose a verifier from the ground truth alone.

    Args:
        ground_truth: The gold answer.

    Returns:
        ``"mcq"`` when the gold is a single option letter A-J (also ``"(C)"``, ``"C."``,
        ``"C)"``), else ``"math"``.
    """
    return "mcq" if _OPTION_GOLD.fullmatch(ground_truth) else "math"


def grade(response: str, ground_truth: str, verifier: str = "math") -> Grade:
    """Grade one response in this process, with no timeout.

    Never raises on model output: any exception inside the verifier becomes
    ``Grade(None, None, "error: ...")``. Use :class:`mbs.verify.pool.GradingPool` for
    hard time limits (sympy can hang on inputs such as ``5^{5^{5^{5^5}}}``).

    Args:
        response: The model's full response text.
        ground_truth: The gold answer.
        verifier: Registry name, ``"auto"`` (:func:`detect_verifier`), or import path.

    Returns:
        The :class:`Grade`.

    Raises:
        UnknownVerifierError: If ``verifier`` names no verifier (a caller error).
    """
    name = detect_verifier(ground_truth) if verifier == "auto" else verifier
    fn = get_verifier(name)
    try:
        result = fn(response, ground_truth)
    except Exception as exc:  # noqa: BLE001 - model output must never take the caller down
        return Grade(None, None, f"error: {type(exc).__name__}: {exc}"[:300])
    if not isinstance(result, Grade):
        return Grade(None, None, f"error: verifier {name!r} returned {type(result).__name__}, not Grade")
    return result


# Built-in verifiers register themselves on import; they need Grade and register above.
from mbs.verify import math as _math  # noqa: F401  (registers "math")
from mbs.verify import mcq as _mcq  # noqa: F401  (registers "mcq")
