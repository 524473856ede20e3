"""Verifiers: turn a model response and a ground truth into a :class:`Grade`.

A verifier is a pure function ``(response, ground_truth) -> Grade`` registered under a
name (the registry replaces verl's ``if data_source == ...``
chain, verl#151)::

    from mbs.verify import grade
    grade(r"... so the answer is $\\boxed{\\frac{9}{7}}$.", r"\\dfrac{9}{7}")
    # Grade(score=1.0, extracted='\\frac{9}{7}', reason='boxed: structurally equal')

Built-in verifiers: ``math`` (:mod:`mbs.verify.math`, math-verify with careful answer
extraction), ``mcq`` (:mod:`mbs.verify.mcq`, option letters) and ``reasoning_gym``
(:mod:`mbs.verify.reasoning_gym`, a Reasoning Gym generator's own ``score_answer``). ``"auto"`` picks one from
the ground truth (:func:`detect_verifier`). Any importable function can be used through
an import path ``"pkg.module:function"``.

:func:`grade` runs in-process without a timeout; pipelines grade model output through
:class:`mbs.verify.pool.GradingPool`, which adds a CPU-time limit and a hard wall-clock
timeout per grading.
"""

from __future__ import annotations

import importlib
import re

from mbs.verify.registry import (
    ANSWER_TYPES,
    VERIFIERS,
    AnswerType,
    Grade,
    UnknownVerifierError,
    Verifier,
    answer_type_of,
    available,
    register,
    register_answer_type,
)

__all__ = [
    "ANSWER_TYPES",
    "VERIFIERS",
    "AnswerType",
    "Grade",
    "UnknownVerifierError",
    "Verifier",
    "available",
    "detect_verifier",
    "get_verifier",
    "grade",
    "answer_type_of",
    "register",
    "register_answer_type",
]


def _unknown(name: str, why: str = "") -> UnknownVerifierError:
    return UnknownVerifierError(VERIFIERS.unknown_message(name, why))


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
    if name in VERIFIERS:
        return VERIFIERS.get(name)
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
from mbs.verify import reasoning_gym as _reasoning_gym  # noqa: F401,E402  (registers "reasoning_gym")
