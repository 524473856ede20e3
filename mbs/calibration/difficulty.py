"""Trap bands grouped by difficulty level as well as by budget L, and what moved where.

Difficulty is relative to (problem, policy, budget L) (seed paper, "Background"): a problem
generated at a harder level of a procedural generator, or given a smaller budget, should move
from ``solved_all`` through the Goldilocks band to ``failed_all``. A problem's level is its
``metadata["difficulty"]`` (set by :mod:`mbs.data.reasoning_gym` as ``<task>/<level>``; any
loader may set it, e.g. a ``difficulty`` field of a JSONL record) and its order on the axis
``metadata["difficulty_rank"]``.

:func:`difficulty_summary` is ``summary.json``'s ``by_difficulty``; :func:`describe_moves`
turns it into the short sentences the report and the pipeline print.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from mbs.calibration import budget_key, budget_sort_key, trap_summary
from mbs.records import BANDS, Calibration, Problem

__all__ = ["describe_moves", "difficulty_fields", "difficulty_of", "difficulty_summary"]


def difficulty_of(problem: Problem) -> str | None:
    """The difficulty level of a problem (``metadata["difficulty"]`` as text), or ``None``."""
    level = (problem.metadata or {}).get("difficulty")
    return None if level is None or isinstance(level, (dict, list)) else str(level)


def _level_order(problems: Sequence[Problem]) -> list[str]:
    """Levels sorted by task (first appearance), then ``difficulty_rank``, then first appearance."""
    first: dict[str, tuple[int, int, int]] = {}
    tasks: dict[str, int] = {}
    for i, p in enumerate(problems):
        level = difficulty_of(p)
        if level is None or level in first:
            continue
        task = level.split("/", 1)[0] if "/" in level else ""
        tasks.setdefault(task, len(tasks))
        rank = (p.metadata or {}).get("difficulty_rank")
        first[level] = (tasks[task], int(rank) if isinstance(rank, int) else 1 << 30, i)
    return sorted(first, key=first.__getitem__)


def difficulty_summary(calibrations: Iterable[Calibration], problems: Sequence[Problem]) -> dict[str, Any] | None:
    """Band shares per (difficulty level, policy, budget L) and the moves between budgets.

    Args:
        calibrations: Every calibration of the run (read once: a stream will do).
        problems: The run's problems (their ``metadata["difficulty"]`` names the level).

    Returns:
        ``None`` when no problem has a difficulty level; else ``{"levels": [...] (axis order),
        "bands": {level: {policy: {budget: {solved_all, goldilocks, failed_all}}}}`` (fractions
        summing to 1), ``"counts"`` (same nesting: band counts, ``n_problems``,
        ``pass_rate_mean``), and ``"moves": {level: {policy: {"L1|L2": {"A->B": count}}}}``:
        for each pair of budgets of a policy, how many problems went from band A at L1 to
        band B at L2 (unchanged ones under ``"A->A"``).
    """
    level_of = {p.id: difficulty_of(p) for p in problems}
    levels = _level_order(problems)
    if not levels:
        return None
    by_level: dict[str, list[Calibration]] = defaultdict(list)
    for c in calibrations:
        level = level_of.get(c.problem_id)
        if level is not None:
            by_level[level].append(c)
    bands: dict[str, Any] = {}
    counts: dict[str, Any] = {}
    moves: dict[str, Any] = {}
    for level in levels:
        if not by_level[level]:
            continue
        trap = trap_summary(by_level[level])
        bands[level] = trap["bands"]
        counts[level] = {
            pol: {b: {k: v[k] for k in (*BANDS, "n_problems", "pass_rate_mean")} for b, v in per.items()}
            for pol, per in trap["counts"].items()
        }
        moves[level] = _moves(by_level[level])
    return {"levels": [lv for lv in levels if lv in bands], "bands": bands, "counts": counts, "moves": moves}


def _moves(cals: Sequence[Calibration]) -> dict[str, dict[str, dict[str, int]]]:
    grid: dict[str, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    for c in cals:
        if c.budget is not None:
            grid[c.policy][budget_key(c.budget)][c.problem_id] = c.band
    out: dict[str, dict[str, dict[str, int]]] = {}
    for policy, per in sorted(grid.items()):
        keys = sorted(per, key=budget_sort_key)
        for x, y in itertools.pairwise(keys):
            common = sorted(set(per[x]) & set(per[y]))
            moved = Counter(f"{per[x][pid]}->{per[y][pid]}" for pid in common)
            out.setdefault(policy, {})[f"{x}|{y}"] = dict(sorted(moved.items()))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def describe_moves(by_difficulty: dict[str, Any] | None) -> list[str]:
    """Short sentences, computed from :func:`difficulty_summary`, saying what moved where.

    One sentence per policy and budget across the levels (the failed_all share from the easiest
    to the hardest level), one per policy and level across budgets (mean pass rate and band
    shares at the smallest and largest L, and the problems that changed band), and one naming
    how many cells of the grid reached each band.

    Returns:
        The sentences (empty for ``None``).
    """
    if not by_difficulty:
        return []
    levels, bands, moves = by_difficulty["levels"], by_difficulty["bands"], by_difficulty.get("moves", {})
    policies = sorted({p for lv in levels for p in bands[lv]})
    out: list[str] = []
    for policy in policies:
        budgets = sorted({b for lv in levels for b in bands[lv].get(policy, {}) if b != "recorded"}, key=budget_sort_key)
        for b in budgets:
            cells = [(lv, bands[lv][policy][b]) for lv in levels if b in bands[lv].get(policy, {})]
            if len(cells) >= 2:
                path = " -> ".join(f"{_pct(s['failed_all'])} ({lv})" for lv, s in cells)
                gold = " -> ".join(_pct(s["goldilocks"]) for _, s in cells)
                out.append(f"{policy}, L={b}: failed_all {path}; Goldilocks {gold} as difficulty grows.")
        for lv in levels:
            per = bands[lv].get(policy, {})
            keys = [b for b in budgets if b in per]
            if len(keys) < 2:
                continue
            lo, hi = per[keys[0]], per[keys[-1]]
            changed: Counter[str] = Counter()
            for pair in (moves.get(lv, {}).get(policy, {}) or {}).values():
                for k, v in pair.items():
                    a, _, z = k.partition("->")
                    if a != z:
                        changed[k] += v
            moved = ", ".join(f"{v} {k}" for k, v in sorted(changed.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"
            rate = [by_difficulty["counts"][lv][policy][k]["pass_rate_mean"] for k in (keys[0], keys[-1])]
            out.append(
                f"{policy}, {lv}: L={keys[0]} -> L={keys[-1]}: mean pass rate {_pct(rate[0])} -> {_pct(rate[1])}, "
                f"failed_all {_pct(lo['failed_all'])} -> "
                f"{_pct(hi['failed_all'])}, Goldilocks {_pct(lo['goldilocks'])} -> {_pct(hi['goldilocks'])}, "
                f"solved_all {_pct(lo['solved_all'])} -> {_pct(hi['solved_all'])} (problems that changed band: {moved})."
            )
        reached = {
            band: [f"{lv} @ L={b}" for lv in levels for b, s in sorted(bands[lv].get(policy, {}).items(), key=lambda kv: budget_sort_key(kv[0])) if s[band] > 0]
            for band in BANDS
        }
        parts = [f"{band} at {len(cells)} of {sum(len(bands[lv].get(policy, {})) for lv in levels)} cells" for band, cells in reached.items()]
        missing = [band for band, cells in reached.items() if not cells]
        out.append(
            f"{policy}: " + "; ".join(parts) + (f" (never {', '.join(missing)})." if missing else " (all three bands reached on the grid).")
        )
    return out


def difficulty_fields(calibrations: Iterable[Calibration], problems: Sequence[Problem]) -> dict[str, Any]:
    """The ``summary.json`` keys of a calibration with difficulty levels: ``by_difficulty``
    (:func:`difficulty_summary`) and ``difficulty_moves`` (:func:`describe_moves`); empty when
    no problem has a level."""
    by_difficulty = difficulty_summary(calibrations, problems)
    if by_difficulty is None:
        return {}
    return {"by_difficulty": by_difficulty, "difficulty_moves": describe_moves(by_difficulty)}
