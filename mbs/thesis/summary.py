"""The thesis run's ``summary.json``: accuracies, paired tests, zero-std shares, band migration.

:func:`summarize` is a pure function of what :mod:`mbs.stages.thesis` drew and trained (the
evaluation and re-calibration rollouts, each training run's ``metrics.jsonl``, the corpus
calibration), so a rerun that draws nothing new writes the same numbers. The arithmetic is
:mod:`mbs.thesis.statistics`; the zero-std forecast is :func:`mbs.training.forecast.trap_forecast`.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mbs.calibration import calibrate_group
from mbs.records import Calibration, Rollout
from mbs.thesis.screen import STRICT_ROUTE, extraction_route, task_of
from mbs.thesis.sets import ARM_SET, ARMS, SETS
from mbs.thesis.statistics import (
    accuracy_summary,
    contrasts,
    crossed_difference,
    holm,
    migration,
    per_problem_accuracy,
    zero_std_counts,
)
from mbs.training.forecast import compare_observed, counts_from_calibrations, trap_forecast
from mbs.training.prior import BetaPrior, resolve_prior
from mbs.training.trap import metrics_rows, zero_std_steps

__all__ = ["SECONDARY", "summarize"]

#: The secondary contrasts (A - B) at the final step and budget L, Holm-corrected together; the
#: primary one is ``thesis.primary`` (goldilocks - uncalibrated), left out of this list when it is in it.
SECONDARY = (("goldilocks", "trapped"), ("goldilocks", "uncalibrated"), ("goldilocks", "dynamic"), ("dynamic", "uncalibrated"),
             ("uncalibrated", "trapped"), ("goldilocks", "base"), ("dynamic", "base"), ("uncalibrated", "base"),
             ("trapped", "base"))


def _drawn(root: Path, arm: str, seed: int) -> dict[int, int]:
    """Rollouts one training run drew up to each step (``metrics.jsonl``), cumulated; empty before it counted them."""
    out, total = {}, 0
    for row in metrics_rows(root / "runs" / arm / f"seed{seed}" / "metrics.jsonl", "rollouts_drawn"):
        total += int(row["rollouts_drawn"])
        out[int(row["step"])] = total
    return out


def _by(rollouts: Sequence[Rollout]) -> dict[tuple[str, int], list[Rollout]]:
    out: dict[tuple[str, int], list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if r.budget is None:  # the thesis draws every rollout live, at a budget
            raise ValueError(f"thesis rollout without a budget: {r.key}")
        out[(r.policy, int(r.budget))].append(r)
    return out


def _accuracy(groups: Mapping[tuple[str, int], list[Rollout]], name: str, budget: int, ids: Sequence[str], k: int) -> dict[str, float] | None:
    want = set(ids)
    rs = [r for r in groups.get((name, budget), []) if r.problem_id in want]
    acc = per_problem_accuracy(rs, k) if rs else {}
    return acc if len(acc) == len(want) else None


def _bands(rollouts: Sequence[Rollout], name: str, n: int) -> dict[str, str]:
    by: dict[str, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        if r.policy == name:
            by[r.problem_id].append(r)
    return {pid: calibrate_group(sorted(rs, key=lambda r: r.sample_index)[:n], n).band for pid, rs in by.items() if len(rs) >= n}


def _zero_std(root: Path, name: str, seeds: Sequence[int], cals: Sequence[Calibration], prior: BetaPrior,
              group_size: int, prompts_per_step: int, level: float = 0.9) -> dict[str, Any]:
    """Observed zero-std share of one set's training steps (every seed) beside the calibration's forecast.

    ``prior`` is fitted on the whole corpus (every band: the sets are chosen from it by band), and
    its Laplace covariance goes into the intervals (issue 41: a fixed prior dropped it)."""
    # (step, zero-std share, groups drawn) of every logged step of every seed; groups drawn exceed
    # prompts_per_step where dynamic sampling drew rounds
    logged: list[tuple[int, float, int]] = []
    per_seed: dict[str, dict[int, float]] = {}
    for s in seeds:
        steps = zero_std_steps(root / "runs" / name / f"seed{s}" / "metrics.jsonl", prompts_per_step)
        per_seed[str(s)] = {st: v for st, v, _ in steps}
        logged += steps
    values, drawn = [v for _, v, _ in logged], [g for *_, g in logged]
    first, first_drawn = [v for st, v, _ in logged if st == 1], [g for st, _, g in logged if st == 1]
    # the seeds' sets pooled: a problem two seeds drew counts twice, as it was trained twice
    # (counts_from_calibrations refuses repeats: one training set of one run has none)
    k, n, early = [c.successes for c in cals], [c.n for c in cals], [c.early_stopped for c in cals]
    block: dict[str, Any] = {"observed": zero_std_counts(values, prompts_per_step, drawn),
                             "observed_step1": zero_std_counts(first, prompts_per_step, first_drawn),
                             "per_seed": per_seed, "problems": len(cals)}
    if values:
        fc = trap_forecast(k, n, group_size, prompts_per_step, early_stopped=early, prior=prior, level=level, steps=len(values))
        cmp = compare_observed(fc, values, groups=drawn)
        block["forecast"] = {"expected_share": fc.expected_zero_std_share, "interval": cmp["forecast_mean_interval"],
                             "per_step_interval": cmp["per_step_interval"], "level": level, "within": cmp["mean_within_forecast"],
                             "p_value": cmp["mean_p_value"], "difference": cmp["difference"],
                             "prior": {**prior.to_dict(), "from": "corpus (empirical Bayes)"}}
        if first:
            f1 = trap_forecast(k, n, group_size, prompts_per_step, early_stopped=early, prior=prior, level=level, steps=len(first))
            c1 = compare_observed(f1, first, groups=first_drawn)
            block["forecast_step1"] = {"expected_share": f1.expected_zero_std_share, "interval": c1["forecast_mean_interval"],
                                       "within": c1["mean_within_forecast"], "p_value": c1["mean_p_value"]}
    return block


def _task(problem_id: str) -> str:
    try:
        return task_of(problem_id)
    except ValueError:
        return "unknown"


def primary_by_task(finals: Mapping[str, Mapping[int, Mapping[str, float]]], primary: Sequence[str],
                    heldout: Sequence[str]) -> dict[str, Any]:
    """The primary contrast on each task's held-out problems (the claim reported per task), its
    sign-flip p-values Holm-corrected across the tasks (``p_holm``); empty with one task.

    Returns:
        ``{task: crossed_difference(...) + p_holm}`` (:func:`mbs.thesis.statistics.crossed_difference`);
        a task whose arms lack results is left out.
    """
    tasks: dict[str, set[str]] = defaultdict(set)
    for pid in heldout:
        tasks[_task(pid)].add(pid)
    a, b = primary
    if len(tasks) < 2 or a not in finals or b not in finals:
        return {}
    pick = lambda by_seed, ids: {seed: {p: v for p, v in acc.items() if p in ids} for seed, acc in by_seed.items()}
    out = {task: {"contrast": f"{a} - {b}", **crossed_difference(pick(finals[a], ids), pick(finals[b], ids))}
           for task, ids in sorted(tasks.items())}
    for task, p in holm({task: v["sign_flip_p"] for task, v in out.items()}).items():
        out[task]["p_holm"] = p
    return out


def construct_validity(ev: Mapping[tuple[str, int], list[Rollout]], seeds: Sequence[int], budget: int, heldout: Sequence[str],
                       k: int, levels: Mapping[str, str], band_of: Mapping[str, str]) -> dict[str, Any]:
    """What the held-out gains measure (issue 43), per arm at the final step and budget L.

    Returns:
        ``{arm: {"samples", "rewarded", "routes"`` (rewarded samples by extraction route),
        ``"strict"`` (avg@k when only an answer in the answer tag counts: :func:`accuracy_summary`),
        ``"by_level"``, ``"by_band"``, ``"by_task"`` (avg@k over the held-out problems of each
        Reasoning Gym level, calibrated band and task, with their intervals)``}``; arms without a finished
        evaluation are left out.
    """
    held = set(heldout)
    out: dict[str, Any] = {}
    for arm in ("base", *ARMS):
        who = {seed: f"base/seed{seed}" if arm == "base" else f"{arm}/seed{seed}/final" for seed in seeds}
        rs = {seed: [r for r in ev.get((w, budget), []) if r.problem_id in held and r.sample_index < k] for seed, w in who.items()}
        rs = {seed: v for seed, v in rs.items() if len(v) == len(held) * k}
        if not rs:
            continue
        rewarded = [r for v in rs.values() for r in v if r.reward == 1.0]
        strict = {seed: per_problem_accuracy([dataclasses.replace(r, reward=float(r.reward == 1.0 and extraction_route(r.reason) == STRICT_ROUTE))
                                              for r in v], k) for seed, v in rs.items()}
        plain = {seed: per_problem_accuracy(v, k) for seed, v in rs.items()}

        def subset(by: Mapping[str, str], plain: Mapping[int, Mapping[str, float]] = plain) -> dict[str, Any]:
            groups: dict[str, list[str]] = defaultdict(list)
            for pid in sorted(held):
                groups[str(by.get(pid, "unknown"))].append(pid)
            return {g: accuracy_summary({seed: {p: acc[p] for p in ids} for seed, acc in plain.items()}) for g, ids in groups.items()}

        out[arm] = {"samples": sum(map(len, rs.values())), "rewarded": len(rewarded),
                    "routes": dict(sorted(Counter(extraction_route(r.reason) for r in rewarded).items())),
                    "strict": accuracy_summary(strict), "by_level": subset(levels), "by_band": subset(band_of),
                    "by_task": subset({pid: _task(pid) for pid in held})}
    return out


def summarize(t: Any, root: Path, corpus: Sequence[Calibration], heldout: Sequence[str], sets: Mapping[int, Mapping[str, Sequence[str]]],
              steps: Sequence[int], seeds: Sequence[int], budgets: Sequence[int], evals: Sequence[Rollout],
              recals: Sequence[Rollout], policy: Any, trained: Mapping[str, str],
              levels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The thesis ``summary.json`` (see the module docstring; keys documented in docs/thesis.md).

    Args:
        t: The thesis settings (the ``thesis`` node: budget, n, eval_k, prompts_per_step, ...).
        root: The run directory (each training run's ``metrics.jsonl`` is read from ``runs/``).
        corpus: Calibrations of the exported corpus at L (policy of the thesis).
        heldout: Held-out problem ids.
        sets: ``{training seed: {set: problem ids}}`` (each seed draws its own sets).
        steps: Evaluation steps (0 first).
        seeds: Training seeds.
        budgets: Evaluation budgets (L and the extra ones), tokens.
        evals: Every evaluation rollout (policy ``base/seed<s>``, ``<set>/seed<s>/step<t>``, ``<set>/seed<s>/final``).
        recals: Every re-calibration rollout (``base/seed<s>``, ``<set>/seed<s>/final``).
        policy: The trained policy (:class:`mbs.training.policy.TrainPolicy`).
        trained: ``{"<set>/seed<s>": run folder relative to root}``.
        levels: ``{problem id: difficulty level}`` of the held-out problems (``None``: not known).
    """
    L, N, k, B = int(t.budget), int(t.n), int(t.eval_k), int(t.prompts_per_step)
    ev = _by(evals)
    held_set = set(heldout)
    band_of = {c.problem_id: c.band for c in corpus}
    cal_of = {c.problem_id: c for c in corpus}
    curves: dict[str, Any] = {}
    for name in ARMS:
        curves[name] = {}
        drawn = {seed: _drawn(root, name, seed) for seed in seeds}
        for s in steps:
            by_seed = {}
            for seed in seeds:
                who = f"base/seed{seed}" if s == 0 else f"{name}/seed{seed}/step{s}"
                acc = _accuracy(ev, who, L, heldout, k)
                if acc is not None:
                    by_seed[seed] = acc
            if by_seed:
                # the rollouts each seed's run drew up to step s (dynamic sampling draws more than s x B x N)
                counts = [drawn[x].get(s, s * B * N) if s else 0 for x in by_seed]
                curves[name][str(s)] = {**accuracy_summary(by_seed), "rollouts_drawn": float(np.mean(counts)),
                                        "rollouts_drawn_seeds": counts}
    final: dict[str, Any] = {}
    finals: dict[str, dict[int, dict[str, float]]] = {}
    for name in ("base", *ARMS):
        final[name] = {}
        for b in budgets:
            by_seed = {}
            for seed in seeds:
                acc = _accuracy(ev, f"base/seed{seed}" if name == "base" else f"{name}/seed{seed}/final", b, heldout, k)
                if acc is not None:
                    by_seed[seed] = acc
            if by_seed:
                names = [f"base/seed{x}" if name == "base" else f"{name}/seed{x}/final" for x in by_seed]
                toks = [r.completion_tokens for w in names for r in ev.get((w, b), []) if r.problem_id in held_set]
                final[name][str(b)] = {**accuracy_summary(by_seed), "completion_tokens_mean": sum(toks) / len(toks),
                                       "truncated_share": sum(r.finish_reason == "length" for w in names for r in ev.get((w, b), [])
                                                              if r.problem_id in held_set) / len(toks)}
                if b == L:
                    finals[name] = by_seed
    primary = tuple(str(x) for x in t.primary)
    tests = contrasts(finals, primary, [pair for pair in SECONDARY if tuple(pair) != primary])
    tests["by_task"] = primary_by_task(finals, primary, heldout)
    corpus_k, corpus_n, _ = counts_from_calibrations(corpus)  # the prior: fitted to the whole corpus, every band
    prior = resolve_prior("empirical", np.asarray(corpus_k), np.asarray(corpus_n), fitted_on="thesis corpus, all bands")
    # the forecast of an arm's steps over every seed: the seeds' sets pooled (each problem as often as it was drawn)
    zero = {name: _zero_std(root, name, seeds, [cal_of[i] for seed in seeds for i in sets[seed][ARM_SET[name]]], prior, N, B)
            for name in ARMS}
    moves: dict[str, Any] = {}
    for name in ARMS:
        calib_to_after: Counter = Counter()
        base_to_after: Counter = Counter()
        calib_to_base: Counter = Counter()
        seeds_done = []
        for seed in seeds:
            after = _bands(recals, f"{name}/seed{seed}/final", N)
            base = {i: b for i, b in _bands(recals, f"base/seed{seed}", N).items() if i in set(sets[seed][ARM_SET[name]])}
            if not after:
                continue
            seeds_done.append(seed)
            before = {i: band_of[i] for i in sets[seed][ARM_SET[name]]}
            for key, m in (("c", migration(before, after)), ("b", migration(base, after)), ("cb", migration(before, base))):
                target = {"c": calib_to_after, "b": base_to_after, "cb": calib_to_base}[key]
                for a, row in m.items():
                    for z, v in row.items():
                        target[(a, z)] += v
        as_matrix = lambda c: {a: {z: c[(a, z)] for z in ("solved_all", "goldilocks", "failed_all")}
                               for a in ("solved_all", "goldilocks", "failed_all")}
        moves[name] = {"seeds": seeds_done, "calibration_to_trained": as_matrix(calib_to_after),
                       "base_to_trained": as_matrix(base_to_after), "calibration_to_base": as_matrix(calib_to_base)}
    return {
        "budget": L, "n": N, "eval_k": k, "extra_budgets": [b for b in budgets if b != L], "budgets": list(budgets),
        "steps": list(steps), "seeds": list(seeds), "prompts_per_step": B, "learning_rate": float(t.learning_rate),
        "set_size": int(t.set_size), "temperature": float(t.temperature), "top_p": float(t.top_p),
        "policy": policy.summary(),
        "corpus": {"problems": len(corpus), "bands": dict(Counter(c.band for c in corpus)),
                   "usable": sum(c.usable for c in corpus)},
        "heldout": {"problems": len(heldout), "bands": dict(Counter(band_of[i] for i in heldout))},
        "sets": {name: _set_block([sets[seed][name] for seed in seeds], band_of, held_set) for name in SETS},
        "arms": {name: ARM_SET[name] + (" with dynamic sampling" if name == "dynamic" else "") for name in ARMS},
        "curves": curves, "final": final, "contrasts": tests, "zero_std": zero, "migration": moves,
        "construct_validity": construct_validity(ev, seeds, L, heldout, k, levels or {}, band_of),
        "trained": dict(trained),
        "train_seconds": _train_seconds(root, trained),
    }


def _set_block(draws: Sequence[Sequence[str]], band_of: Mapping[str, str], heldout: set[str]) -> dict[str, Any]:
    """One training set over the seeds' draws: its size, how many distinct problems the draws held,
    the bands summed over draws, and the overlap with the held-out set (0 by construction)."""
    drawn = [i for ids in draws for i in ids]
    return {"problems": len(draws[0]) if draws else 0, "draws": len(draws), "distinct_problems": len(set(drawn)),
            "bands": dict(Counter(band_of[i] for i in drawn)), "overlap_with_heldout": len(set(drawn) & heldout)}


def _train_seconds(root: Path, trained: Mapping[str, str]) -> dict[str, Any]:
    """Seconds per TRL step, from each run's last ``metrics.jsonl`` line (``elapsed_s`` of its last segment)."""

    out = {}
    for tag, rel in trained.items():
        path = root / rel / "metrics.jsonl"
        if path.is_file():
            lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            out[tag] = {"steps": len(lines), "last_elapsed_s": lines[-1].get("elapsed_s") if lines else None}
    return out
