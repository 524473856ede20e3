"""The verifier and answer-type registries: :class:`Grade`, :class:`AnswerType`, :func:`register`.

An answer type (``Problem.answer_type``: ``math``, ``mcq``, ``reasoning_gym``) has one home: the
module of its grader (:mod:`mbs.verify.math`, ...) registers an :class:`AnswerType` spec with
:func:`register_answer_type`: its grader, prompt template, how a gold or an answer is written as a
response, the probe answer and the warm-up samples. Verifier modules import from here, and
:mod:`mbs.verify` imports them, so the registry sits below both and no import goes in a circle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mbs.errors import UnknownNameError
from mbs.registry import Registry


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


#: verifier name -> grading function (every answer type's grader, plus verifiers registered alone).
VERIFIERS: Registry[Verifier] = Registry(
    "verifier", UnknownVerifierError, hint=", 'auto', or an import path 'pkg.module:function'"
)


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

    return VERIFIERS.register(name)


def available() -> list[str]:
    """Registered verifier names, sorted."""
    return VERIFIERS.names()


def _boxed(answer: str) -> str:
    return f"\\boxed{{{answer}}}"


def _same(gold: str) -> str:
    return gold


@dataclass(frozen=True)
class AnswerType:
    r"""Everything the pipeline needs to know about one answer type, in one place.

    Attributes:
        name: The answer type (``Problem.answer_type``), its verifier's registry name and the
            ``<type>`` of ``mbs/<type>/<origin>`` data sources.
        grader: The verifier ``(response, ground_truth) -> Grade``.
        template: Its prompt template in ``mbs/prompts/`` (placeholder ``{problem}``); the
            ``answer_templates`` line of ``conf/base.yaml`` names the one the stages use.
        as_response: A plain answer (a gold, a candidate's) written as the final answer the
            grader reads (``\boxed{12}``, ``The answer is (C).``).
        probe: An answer graded against every gold before calibration: a gold the grader cannot
            grade it against (score ``None``) is unparseable (:mod:`mbs.verify.gold`).
        gold_response: How a gold itself is written as a response for the self-check (``None``:
            :attr:`as_response` of the gold).
        shown: A gold as a teacher or reader sees it (default: the gold itself).
        warmup: ``(response, gold)`` pairs graded in the grading pool's forkserver to fill the
            grader's caches (:mod:`mbs.verify.warmup`).
        variant_type: The answer type of a problem a teacher writes from a seed of this type
            (synthesis prompts ask for ``\boxed{}`` answers, so ``math`` unless the type's own
            gold is what a teacher writes).
    """

    name: str
    grader: Verifier
    template: str
    as_response: Callable[[str], str] = _boxed
    probe: str = "0"
    gold_response: Callable[[str], str] | None = None
    shown: Callable[[str], str] = _same
    warmup: tuple[tuple[str, str], ...] = ()
    variant_type: str = "math"

    def response_for_gold(self, gold: str) -> str:
        """The response that states ``gold`` as its final answer (the self-check's response)."""
        return (self.gold_response or self.as_response)(gold)


#: answer type name -> its spec.
ANSWER_TYPES: Registry[AnswerType] = Registry("answer type")


def register_answer_type(spec: AnswerType) -> AnswerType:
    """Register an answer type and its grader (as verifier ``spec.name``); returns ``spec``.

    Raises:
        ValueError: The name is reserved or taken by a different grader or spec.
    """
    register(spec.name)(spec.grader)
    return ANSWER_TYPES.add(spec.name, spec)


def answer_type_of(verifier: str) -> AnswerType:
    """The spec of answer type ``verifier``.

    A verifier that no answer type registered (an import path ``pkg.module:function``, a bare
    :func:`register`) gets the defaults: boxed answers and probe ``0``, graded by that verifier.
    """
    if verifier in ANSWER_TYPES:
        return ANSWER_TYPES.get(verifier)
    return AnswerType(name=verifier, grader=_unregistered, template="")


def _unregistered(response: str, ground_truth: str) -> Grade:
    """Grader of a default spec: such a spec is only read for how answers are written."""
    raise NotImplementedError("grade through mbs.verify.grade, which resolves the verifier by name")
