"""Gold answers the verifier cannot use: found before a problem can become a hard seed.

A problem whose ground truth the verifier cannot parse is failed by every rollout (each grade
is ``None`` or ``0``), so calibration would band it ``failed_all`` and hand it to synthesis as
a hard seed that no teacher trace can ever verify: it lowers the yield of every method and
says nothing about the policy. :func:`ungradable_golds` finds such problems with two gradings
per gold: the gold answer, written the way the verifier reads a final answer, against itself,
and a probe answer (``0``, or option ``A``) against it. A gold the verifier does not accept as its
own answer, or cannot grade a probe against (score ``None``: "could not parse gold"), is
*ungradable*.
"""

from __future__ import annotations

from collections.abc import Sequence

from omegaconf import OmegaConf

from mbs.records import Problem
from mbs.sampling import verifier_for
from mbs.verify.pool import GradingPool

#: How the self-check writes a gold answer as a response, per verifier (others: boxed).
_RESPONSE = {"mcq": "The answer is ({gold})."}
#: The probe answer per verifier (others: 0).
_PROBE = {"mcq": "A"}


def self_check_response(ground_truth: str, verifier: str) -> str:
    """The response that states ``ground_truth`` as its final answer for ``verifier``.

    >>> self_check_response("12", "math")
    '\\\\boxed{12}'
    >>> self_check_response("C", "mcq")
    'The answer is (C).'
    """
    return _RESPONSE.get(verifier, "\\boxed{{{gold}}}").format(gold=ground_truth)


def ungradable_golds(problems: Sequence[Problem], verifier_cfg, pool=None) -> dict[str, str]:
    """Problems whose gold answer the verifier does not accept as a correct answer to itself.

    Args:
        problems: The problems of a calibration run.
        verifier_cfg: The ``verifier`` config node (``path``, ``workers``, timeouts); ``None``:
            each answer type's verifier, in this process.
        pool: A :class:`mbs.verify.pool.GradingPool` to grade in (``None``: one is started
            from ``verifier_cfg`` and closed again).

    Returns:
        ``{problem id: reason}`` in problem order, e.g.
        ``{"champ/P_7": "gold '\\\\frac{' not gradable: could not parse gold"}``; problems
        without a ground truth are listed too.
    """
    if verifier_cfg is None:  # the verifier of each answer type, graded in this process
        verifier_cfg = OmegaConf.create({"path": None, "workers": 0, "timeout_s": 5.0, "wall_timeout_s": None})
    out: dict[str, str] = {}
    items, ids = [], []
    for p in problems:
        if not p.ground_truth:
            out[p.id] = "no ground truth"
            continue
        v = verifier_for(p, verifier_cfg)
        items.append((self_check_response(p.ground_truth, v), p.ground_truth, v))
        items.append((self_check_response(_PROBE.get(v, "0"), v), p.ground_truth, v))
        ids.append(p)
    if items:
        if pool is None:
            with GradingPool.from_config(verifier_cfg) as own:
                grades = own.map(items)
        else:
            grades = pool.map(items)
        for i, p in enumerate(ids):
            own, probe = grades[2 * i], grades[2 * i + 1]
            if probe.score is None:
                out[p.id] = f"gold {p.ground_truth[:60]!r} not gradable: {probe.reason}"
            elif own.score != 1.0:
                what = "not gradable" if own.score is None else "not accepted as its own answer"
                out[p.id] = f"gold {p.ground_truth[:60]!r} {what}: {own.reason}"
    order = {p.id: i for i, p in enumerate(problems)}
    return dict(sorted(out.items(), key=lambda kv: order[kv[0]]))
