"""Which path of MagicBeanStalk a seed's qualified problems came through.

A seed whose 1 + N_d decompositions all fail is a leaf itself: its "harder variants" are direct
prompting plus a verified trace and the alpha_leaf filter. Such seeds count toward the
paper-faithful ``yield`` (share of hard seeds with >= 1 qualified problem), but a comparison
with direct prompting must show them apart. :func:`yield_by_path` splits the yield:

* ``decomposed``: share of hard seeds with a qualified problem that came through at least one
  passed decomposition (a leaf variant of a subproblem at depth >= 1, or a composed parent);
* ``root_only``: share of hard seeds whose qualified problems all are variants of the
  undecomposed seed (leaf variants of the root).

The two add up to ``yield`` (each qualifying seed is in exactly one). :func:`path_details`
gives the counts behind them, and the teacher tokens of each group of seeds, for the
MBS-versus-direct comparison table (:mod:`mbs.figures.mbs_vs_direct`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mbs.records import Problem, TreeNode

PATHS = ("decomposed", "root_only")


def problem_path(problem: Problem, depth_of: dict[str, int]) -> str:
    """``decomposed`` or ``root_only`` for one qualified MBS problem (from its metadata)."""
    meta = problem.metadata or {}
    if meta.get("kind") == "composed" or depth_of.get(str(meta.get("node_id")), 0) > 0:
        return "decomposed"
    return "root_only"


def seed_paths(nodes: Sequence[TreeNode], qualified: Sequence[Problem]) -> dict[str, str]:
    """``{seed id: path}`` of every seed with a qualified problem (``decomposed`` wins)."""
    depth_of = {n.node_id: n.depth for n in nodes}
    out: dict[str, str] = {}
    for p in qualified:
        sid = str(p.metadata.get("seed_id"))
        if out.get(sid) != "decomposed":
            out[sid] = problem_path(p, depth_of)
    return out


def yield_by_path(seeds: Sequence[Problem], nodes: Sequence[TreeNode], qualified: Sequence[Problem]) -> dict[str, float]:
    """``{"decomposed": share, "root_only": share}`` of the hard seeds (they sum to ``yield``)."""
    paths = seed_paths(nodes, qualified)
    ids = {s.id for s in seeds}
    n = len(seeds)
    return {k: (sum(1 for sid, path in paths.items() if path == k and sid in ids) / n if n else 0.0) for k in PATHS}


def path_details(seeds: Sequence[Problem], nodes: Sequence[TreeNode], qualified: Sequence[Problem]) -> dict[str, Any]:
    """Counts behind :func:`yield_by_path`, per path.

    Returns:
        ``{path: {"seeds_qualified", "qualified_problems", "seeds_grown", "teacher_tokens"}}``;
        ``qualified_problems`` counts the problems of that path; ``seeds_grown`` and
        ``teacher_tokens`` are the seeds whose root was decomposed (``decomposed``) or not
        (``root_only``: no passed decomposition, no trace included) and the teacher
        completion tokens spent on them, so ``teacher_tokens`` of both paths add up to the
        run's teacher tokens.
    """
    depth_of = {n.node_id: n.depth for n in nodes}
    paths = seed_paths(nodes, qualified)
    roots = {n.seed_id: n for n in nodes if n.depth == 0}
    ids = [s.id for s in seeds]
    out: dict[str, Any] = {}
    for k in PATHS:
        grown = [sid for sid in ids if sid in roots and bool(roots[sid].children) == (k == "decomposed")]
        out[k] = {
            "seeds_qualified": sum(1 for sid in ids if paths.get(sid) == k),
            "qualified_problems": sum(1 for p in qualified if problem_path(p, depth_of) == k and p.metadata.get("seed_id") in set(ids)),
            "seeds_grown": len(grown),
            "teacher_tokens": sum(int(roots[sid].problem.metadata.get("mbs", {}).get("teacher_tokens", 0)) for sid in grown),
        }
    return out
