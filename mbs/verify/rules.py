"""Which extraction rule graded each response, counted for a calibration summary.

A verifier's :class:`~mbs.verify.Grade` reason starts with the rule that found the answer
(``"boxed: equal"``, ``"answer line: not equal"``, ``"last sentence: structurally equal"``).
The last-sentence fallback (and the last-line rule) read answers that no box or answer
line marks; a run whose rewards come mostly from them is graded on weak evidence (the
policy may be rewarded for ending on a plausible number), so :func:`extraction_report`
flags it.

Example::

    report = extraction_report((r.reason, r.reward) for r in rollouts)
    report["mostly_fallback"]   # True when most rewards came from the fallback
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

__all__ = ["FALLBACK_RULES", "MOSTLY", "extraction_report", "extraction_rule"]

#: Rules that read an answer no box or answer line marks.
FALLBACK_RULES = ("last sentence", "last line")
#: Share of rewarded rollouts from :data:`FALLBACK_RULES` above which a run is flagged.
MOSTLY = 0.5

_RULES = ("boxed", "answer line", "last sentence", "last line", "option echo", "correction")
_NO_ANSWER = ("no answer", "no option letter", "final \\boxed", "answer marker at the end")


def extraction_rule(reason: str | None) -> str:
    """The extraction rule named by a Grade reason.

    Args:
        reason: ``Grade.reason`` (or a rollout's stored ``reason``).

    Returns:
        One of ``"boxed"``, ``"answer line"``, ``"last sentence"``, ``"last line"``,
        ``"option echo"``, ``"correction"`` (an answer was found by that rule),
        ``"no answer"``, ``"timeout"``, ``"error"``, ``"ungradable gold"``, or ``"other"``
        (e.g. a custom verifier's reason).
    """
    text = (reason or "").strip()
    head = text.split(":", 1)[0].strip()
    if head in _RULES:
        return head
    if text.startswith(_NO_ANSWER):
        return "no answer"
    if text.startswith("timeout"):
        return "timeout"
    if text.startswith("error"):
        return "error"
    if text.startswith("could not parse gold"):
        return "ungradable gold"
    return "other"


def extraction_report(graded: Iterable[tuple[str | None, float | None]]) -> dict:
    """Rollouts and rewards per extraction rule, and whether rewards rest on the fallback.

    Args:
        graded: ``(reason, reward)`` per graded rollout; ``reward`` is 1.0, 0.0 or ``None``.

    Returns:
        ``{"rollouts": {rule: n}, "rewarded": {rule: n}, "fallback_share_of_rewards":
        float | None, "mostly_fallback": bool}``: counts sorted by rule; the share is the
        fraction of rewarded (1.0) rollouts whose answer came from :data:`FALLBACK_RULES`
        (``None`` when nothing was rewarded); ``mostly_fallback`` when it exceeds
        :data:`MOSTLY`.
    """
    rollouts: Counter[str] = Counter()
    rewarded: Counter[str] = Counter()
    for reason, reward in graded:
        rule = extraction_rule(reason)
        rollouts[rule] += 1
        rewarded[rule] += reward == 1.0
    total = sum(rewarded.values())
    share = sum(rewarded[r] for r in FALLBACK_RULES) / total if total else None
    return {
        "rollouts": dict(sorted(rollouts.items())),
        "rewarded": {k: v for k, v in sorted(rewarded.items()) if v},
        "fallback_share_of_rewards": share,
        "mostly_fallback": share is not None and share > MOSTLY,
    }
