"""The thesis's second task, chosen by a screening calibration the experiment runs first (issue 43).

A claim about calibrated data should not rest on one task, nor on a verifier that rewards an answer
the response never states: Reasoning Gym's verifier falls back to the last number of a response
when its oracle answer is a number (:func:`mbs.verify.reasoning_gym.extract_rg_answer`), so a
policy can gain reward on ``chain_sum`` by ending on the right number without ever writing the
answer tag the prompt asks for. The second task is therefore screened under the strict format:

* each candidate (a Reasoning Gym task with its levels, ``thesis.screen.candidates``, in the order
  given) is calibrated with the thesis's policy at N = ``thesis.n`` and L = ``thesis.budget``;
* each rollout is re-graded strictly: rewarded only when the verifier rewarded it *and* found the
  answer in the answer tag (:data:`STRICT_ROUTE`);
* the first candidate whose strict calibration has problems in all three bands (``solved_all``,
  ``goldilocks``, ``failed_all``) joins the corpus; none qualifying is a result, recorded in the
  thesis summary (``screen``), and the experiment goes on with ``thesis.data`` alone.

Pure functions of the screening rollouts; :mod:`mbs.stages.thesis` runs the calibration.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mbs.calibration import band_of
from mbs.records import BANDS, Rollout
from mbs.verify.reasoning_gym import ANSWER_TAG

__all__ = ["STRICT_ROUTE", "extraction_route", "screen_tasks", "strict_reward", "task_of"]

#: The extraction route a strict grade accepts (the Reasoning Gym template asks for an answer tag).
STRICT_ROUTE = ANSWER_TAG


def extraction_route(reason: str | None) -> str:
    """The extraction route of a grade (``answer tag``, ``boxed``, ``last number``, ``no answer
    found``): the prefix of its reason, as :func:`mbs.verify.reasoning_gym.grade_reasoning_gym` writes it.

    Examples:
        >>> extraction_route("last number: score_answer 1")
        'last number'
        >>> extraction_route(None)
        'none'
    """
    return (reason or "").split(":", 1)[0].strip() or "none"


def strict_reward(rollout: Rollout) -> float | None:
    """The rollout's reward when only an answer in the answer tag counts (``None``: ungraded)."""
    if rollout.reward is None:
        return None
    return float(rollout.reward == 1.0 and extraction_route(rollout.reason) == STRICT_ROUTE)


def task_of(problem_id: str) -> str:
    """The Reasoning Gym task of a problem id (``reasoning_gym/<task>/<level>-<hash>/<i>``).

    Raises:
        ValueError: Not a Reasoning Gym problem id.
    """
    parts = problem_id.split("/")
    if len(parts) < 3 or parts[0] != "reasoning_gym":
        raise ValueError(f"{problem_id!r} is not a Reasoning Gym problem id (reasoning_gym/<task>/<level>/<i>)")
    return parts[1]


def screen_tasks(rollouts: Iterable[Rollout], candidates: Sequence[str], n: int) -> dict[str, Any]:
    """Choose the second task: the first candidate whose strict calibration has all three bands.

    Args:
        rollouts: The screening calibration's rollouts (one policy, one budget L), N per problem.
        candidates: Task names in the order they are tried.
        n: Rollouts per problem (N); a problem with fewer graded rollouts is left out.

    Returns:
        ``{"chosen": task or None, "strict_route": "answer tag", "n": N, "candidates": {task:
        {"problems", "bands" (strict grade), "bands_any_route" (the verifier's own grade),
        "routes" (rewarded samples by extraction route), "qualifies"}}}``, candidates in the order given.

    Raises:
        ValueError: A rollout of a task that is not a candidate (the screening ran other tasks).
    """
    by_problem: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if task_of(r.problem_id) not in candidates:
            raise ValueError(f"screening rollout of {r.problem_id}: task {task_of(r.problem_id)!r} is not a candidate {list(candidates)}")
        by_problem[r.problem_id].append(r)
    out: dict[str, Any] = {"chosen": None, "strict_route": STRICT_ROUTE, "n": int(n), "candidates": {}}
    for task in candidates:
        strict: Counter[str] = Counter()
        loose: Counter[str] = Counter()
        routes: Counter[str] = Counter()
        problems = 0
        for pid, rs in sorted(by_problem.items()):
            graded = [r for r in rs if r.reward is not None]
            if task_of(pid) != task or len(graded) < n:
                continue
            graded = sorted(graded, key=lambda r: r.sample_index)[:n]
            problems += 1
            strict[band_of(sum(int(strict_reward(r) == 1.0) for r in graded), n)] += 1
            loose[band_of(sum(int(r.reward == 1.0) for r in graded), n)] += 1
            routes.update(extraction_route(r.reason) for r in graded if r.reward == 1.0)
        qualifies = problems > 0 and all(strict[b] > 0 for b in BANDS)
        out["candidates"][task] = {"problems": problems, "bands": {b: strict[b] for b in BANDS},
                                   "bands_any_route": {b: loose[b] for b in BANDS}, "routes": dict(sorted(routes.items())),
                                   "qualifies": qualifies}
        if qualifies and out["chosen"] is None:
            out["chosen"] = task
    return out


def with_task(data: Mapping[str, Any], task: str, levels: Mapping[str, Any] | None) -> dict[str, Any]:
    """The corpus node ``data`` (a ``data/reasoning_gym`` node) with ``task`` and its levels added,
    as a strict task (``strict_tasks``: training and evaluation reward only the answer tag, the
    format the screening graded)."""
    out = dict(data)
    out["tasks"] = [*list(data.get("tasks") or []), task]
    out["strict_tasks"] = [*list(data.get("strict_tasks") or []), task]
    out["levels"] = {**dict(data.get("levels") or {}), **({task: dict(levels)} if levels else {})}
    return out
