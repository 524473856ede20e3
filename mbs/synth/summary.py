"""Counters and the summary keys every synthesis method reports, and the rejections and effectivity
tests of MagicBeanStalk trees."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from mbs.records import REJECTIONS, Problem, Rollout, Status, TreeNode, reason_kind
from mbs.stats import share


def histogram(values: Iterable[int]) -> dict[str, int]:
    """``{value: how many}`` with string keys, in increasing value order."""
    c = Counter(values)
    return {str(k): c[k] for k in sorted(c)}


def per_qualified(total: int, qualified: int) -> float | None:
    """``total / qualified``, or ``None`` when nothing qualified."""
    return round(total / qualified, 1) if qualified else None


def base_summary(
    method: str,
    seeds: Sequence[Problem],
    nodes: Sequence[TreeNode],
    qualified: Sequence[Problem],
    rollouts: Iterable[Rollout],
    teacher_tokens: int,
) -> dict[str, Any]:
    """The summary keys every synthesis method reports (contract of ``summary.json``).

    Args:
        method: ``mbs`` or ``direct``.
        seeds: The hard seeds of this run (after shard and limit).
        nodes: Every tree node of the finished seeds.
        qualified: The qualified problems.
        rollouts: Every student rollout drawn by the run.
        teacher_tokens: Teacher completion tokens spent over all seeds.

    Returns:
        ``hard_seeds``, ``seed_ids`` (seed order, the order of ``qualified_per_seed``), ``seeds_qualified``, ``yield``, ``yield_ci`` (its count, n and 95% Wilson
        interval, :func:`mbs.stats.share`), ``qualified_problems``,
        ``qualified_per_seed`` (a list in seed order), ``qualified_per_seed_histogram``,
        ``teacher_tokens``, ``student_tokens`` and both per qualified problem; the cost of every
        token (issue 29): ``teacher_prompt_tokens`` (from the roots' ``metadata.<method>`` tallies,
        :class:`mbs.synth.engine.Tally`), ``student_rollouts`` and ``all_tokens`` (teacher prompt
        and completion tokens plus student completion tokens), and ``all_tokens_per_qualified``.
    """
    per_seed = Counter(p.metadata.get("seed_id") for p in qualified)
    counts = [per_seed.get(s.id, 0) for s in seeds]
    student_tokens = student_rollouts = 0
    for r in rollouts:
        student_tokens += r.completion_tokens
        student_rollouts += 1
    prompt_tokens = sum(int(n.problem.metadata.get(method, {}).get("teacher_prompt_tokens", 0)) for n in nodes if n.depth == 0)
    all_tokens = prompt_tokens + teacher_tokens + student_tokens
    n_q = len(qualified)
    seeds_q = sum(1 for c in counts if c > 0)
    return {
        "hard_seeds": len(seeds),
        "seed_ids": [x.id for x in seeds],
        "seeds_finished": len({n.seed_id for n in nodes}),
        "seeds_qualified": seeds_q,
        "yield": seeds_q / len(seeds) if seeds else 0.0,
        "yield_ci": share(seeds_q, len(seeds)),
        "qualified_problems": n_q,
        "qualified_per_seed": counts,
        "qualified_per_seed_histogram": histogram(counts),
        "teacher_tokens": teacher_tokens,
        "student_tokens": student_tokens,
        "teacher_tokens_per_qualified": per_qualified(teacher_tokens, n_q),
        "student_tokens_per_qualified": per_qualified(student_tokens, n_q),
        "teacher_prompt_tokens": prompt_tokens,
        "student_rollouts": student_rollouts,
        "all_tokens": all_tokens,
        "all_tokens_per_qualified": per_qualified(all_tokens, n_q),
    }


def rejections(nodes: list[TreeNode]) -> dict[str, int]:
    """Every recorded rejection by ``<what>/<reason kind>`` (trace, decomposition, subproblem, ...)."""
    c: Counter = Counter()
    for n in nodes:
        if n.depth == 0:
            for a in n.problem.metadata.get("mbs", {}).get("trace_attempts", []):
                if a["score"] != 1.0:
                    kind = "cut by the token limit" if a.get("finish_reason") == "length" else "not verified"
                    c["trace/" + ("no reference solution" if a["index"] is None else kind)] += 1
        for a in n.effectivity.get("attempts", []):
            if not a.get("passed"):
                c["decomposition/" + reason_kind(a.get("reason"))] += 1
            for s in a.get("subproblems", []):
                if s["status"] == Status.REJECTED:
                    c["subproblem/" + reason_kind(s.get("reason"))] += 1
        for v in n.variants:
            if v["status"] in REJECTIONS:
                c[f"{v['kind']}/" + reason_kind(v.get("reason"))] += 1
        if n.reject_reason:
            c[f"node/{n.status}: " + reason_kind(n.reject_reason)] += 1
    return dict(sorted(c.items()))


def effectivity_summary(nodes: list[TreeNode]) -> dict[str, Any]:
    """Effectivity tests run and passed, overall and per student."""
    tests = [a for n in nodes for a in n.effectivity.get("attempts", []) if "students" in a]
    per: dict[str, dict[str, int]] = {}
    for a in tests:
        for s, r in a["students"].items():
            row = per.setdefault(s, {"tests": 0, "passed": 0})
            row["tests"] += 1
            row["passed"] += int(bool(r["passed"]))
    return {"tests": len(tests), "passed": sum(1 for a in tests if a["passed"]), "per_student": per}
