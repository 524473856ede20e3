"""Calibration: N rollouts per problem for every student and budget L, graded, banded.

Run: ``mbs-calibrate data=champ data.limit=4 calibrate.n=4 calibrate.budgets=[64,128] hydra.run.dir=DIR``
(or ``students=champ_recorded`` for the four recorded CHAMP models).

Writes into ``out_dir``: ``rollouts.*.jsonl`` (one :class:`~mbs.records.Rollout` per sample,
appended as each is graded), ``calibrations.*.jsonl`` (one :class:`~mbs.records.Calibration`
per problem, policy and budget), ``conditioned.*.jsonl`` (recorded answers given hints or
partial solutions), ``hard_seeds.*.jsonl`` (failed_all problems of the target policy, the
input of synthesis), ``summary.json`` (bands, reclassification, tokens, grading report),
``figures/`` and ``manifest.json`` last. Killed and rerun with the same ``hydra.run.dir``, it
resumes: finished rollouts are read back, and the LLM cache makes redrawn samples free.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig
from tqdm.auto import tqdm

from mbs.calibration import calibrate_group, settled, trap_summary
from mbs.data import load_problems
from mbs.io import RunDir, Shard
from mbs.llm import build_backend
from mbs.records import Calibration, Problem, Rollout
from mbs.sampling import Group, Policy, RolloutWriter, draw, policies_from_cfg, verifier_for
from mbs.verify.pool import GradingPool

log = logging.getLogger(__name__)

STAGE = "calibrate"


def calibrate_live(
    policy: Policy,
    problems: Sequence[Problem],
    budgets: Sequence[int],
    ccfg: DictConfig,
    cfg: DictConfig,
    writer: RolloutWriter,
    stats: Counter,
) -> None:
    """Draw, grade and write N rollouts per (problem, budget) for a live policy (see :func:`mbs.sampling.draw`)."""
    groups = [Group.of(p, L, ccfg.templates, cfg.verifier) for L in budgets for p in problems]
    draw(
        policy, groups, int(ccfg.n), writer, cfg.paths.cache_dir,
        temperature=float(ccfg.temperature), top_p=float(ccfg.top_p), seed=int(cfg.seed),
        early_stop=ccfg.early_stop, stats=stats, desc=f"calibrate {policy.name}",
    )


def calibrate_recorded(
    policy: Policy, problems: Sequence[Problem], writer: RolloutWriter, cond_writer: RolloutWriter, cfg: DictConfig
) -> None:
    """Grade a recorded CHAMP model's answers: no-hint settings are its rollouts (budget ``None``).

    Answers recorded under hint or partial-solution settings are graded too and written by
    ``cond_writer`` (their ``setting`` names the condition): the offline analogue of the
    effectivity test. Answers already graded (in either writer's ``done``) are skipped.

    Raises:
        ValueError: The problems are not CHAMP problems (recorded answers exist only there).
    """
    from mbs.data.champ import recorded_answers

    todo: list[tuple[Rollout, Problem, bool]] = []
    for p in problems:
        if not p.id.startswith("champ/"):
            raise ValueError(f"students: recorded policy {policy.name} needs data=champ, got problem {p.id}")
        answers = sorted(recorded_answers(p.id.split("/", 1)[1], policy.model), key=lambda a: a.setting)
        samples = [a for a in answers if a.kind == "sample"]
        others = [a for a in answers if a.kind != "sample"]
        for i, a in enumerate(samples + others):
            is_sample = a.kind == "sample"
            r = Rollout(
                problem_id=p.id,
                policy=policy.name,
                budget=None,
                sample_index=i,
                text=a.final or a.solution,
                finish_reason=a.finish_reason,
                setting=a.setting,
            )
            if r.key not in (writer.done if is_sample else cond_writer.done):
                todo.append((r, p, is_sample))
    for r, p, is_sample in tqdm(todo, desc=f"grade {policy.name}", unit="answer", dynamic_ncols=True):
        (writer if is_sample else cond_writer).add(r, p.ground_truth or "", verifier_for(p, cfg.verifier))
    writer.flush(wait=True)
    cond_writer.flush(wait=True)


def recorded_report(problems: Sequence[Problem], rollouts: Sequence[Rollout], conditioned: Sequence[Rollout]) -> dict[str, Any]:
    """How recorded answers were graded, grading agreement with CHAMP's first-wrong-step
    annotations (a human spot-check: "no mistake" should grade correct), and per-policy
    accuracy without and with hints / partial solutions (the offline effectivity analogue).
    """
    from mbs.data.champ import recorded_answers

    fws: dict[tuple[str, str, str], bool] = {}
    for p in problems:
        if not p.id.startswith("champ/"):
            continue
        pid = p.id.split("/", 1)[1]
        for model in {r.policy for r in rollouts if r.budget is None}:
            for a in recorded_answers(pid, model) if model in _recorded_models() else []:
                if a.fws_correct is not None:
                    fws[(p.id, model, a.setting)] = a.fws_correct
    every = [r for r in rollouts if r.budget is None] + list(conditioned)
    how = Counter(_reason_kind(r.reason) for r in every)
    agree = [(r.reward == 1.0) == fws[(r.problem_id, r.policy, r.setting)] for r in every if (r.problem_id, r.policy, r.setting) in fws]
    # "no mistake" annotations should grade correct; a marked wrong step usually means a wrong answer
    no_mistake = [r.reward == 1.0 for r in every if fws.get((r.problem_id, r.policy, r.setting)) is True]
    acc: dict[str, dict[str, Any]] = {}
    per_problem: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in every:
        kind = "sample" if r.setting and not (r.setting.endswith("w/ H") or r.setting.endswith("Soln")) else (
            "hint" if r.setting and r.setting.endswith("w/ H") else "partial_solution"
        )
        per_problem[r.policy][r.problem_id][kind].append(1.0 if r.reward == 1.0 else 0.0)
    for policy, probs in sorted(per_problem.items()):
        row: dict[str, Any] = {}
        for kind in ("sample", "hint", "partial_solution"):
            # by problem id, with fsum: the same number whatever order the shards came in
            vals = [math.fsum(probs[pid][kind]) / len(probs[pid][kind]) for pid in sorted(probs) if probs[pid][kind]]
            row[f"acc_{kind}"] = math.fsum(vals) / len(vals) if vals else None
        both = [(sum(v["sample"]) / len(v["sample"]), sum(v["hint"]) / len(v["hint"])) for v in probs.values() if v["sample"] and v["hint"]]
        row["hint_raises_acc_share"] = sum(1 for a, b in both if b > a) / len(both) if both else None
        row["hint_lowers_acc_share"] = sum(1 for a, b in both if b < a) / len(both) if both else None
        acc[policy] = row
    return {
        "answers": len(every),
        "graded": sum(1 for r in every if r.reward is not None),
        "ungraded": sum(1 for r in every if r.reward is None),
        "by_extraction": dict(sorted(how.items())),
        "fws_spot_check": {
            "annotated": len(agree),
            "agreement": (sum(agree) / len(agree)) if agree else None,
            "no_mistake_annotated": len(no_mistake),
            "no_mistake_graded_correct": (sum(no_mistake) / len(no_mistake)) if no_mistake else None,
        },
        "accuracy": acc,
    }


def _recorded_models() -> tuple[str, ...]:
    from mbs.data.champ import RECORDED_MODELS

    return RECORDED_MODELS


def _reason_kind(reason: str) -> str:
    return (reason or "none").split(":")[0].strip() or "none"


def early_stop_simulation(calibrations_full: Sequence[Calibration], rollouts: Sequence[Rollout], batch: int, decision: str, alpha: float) -> dict[str, Any]:
    """Replay sequential early stopping on fully drawn groups: rollouts it would save, and
    whether every decision (band, usability) is identical to the full draw."""
    by_group: dict[tuple, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        by_group[(r.problem_id, r.policy, r.budget)].append(r)
    total = saved = same = 0
    for c in calibrations_full:
        rs = sorted(by_group[c.key], key=lambda r: r.sample_index)[: c.n_target]
        n = len(rs)
        k = n
        for stop in range(batch, n + batch, batch):
            stop = min(stop, n)
            if settled(rs[:stop], n, decision, alpha):
                k = stop
                break
        early = calibrate_group(rs[:k], n, decision, alpha)
        total += n
        saved += n - k
        if decision == "band":
            same += (early.band, early.usable) == (c.band, c.usable)
        else:
            same += (early.successes > alpha * n if k < n else c.pass_rate > alpha) == (c.pass_rate > alpha)
    return {
        "rollouts": total,
        "saved": saved,
        "saved_share": saved / total if total else 0.0,
        "identical_decisions": same,
        "groups": len(calibrations_full),
        "batch": batch,
        "decision": decision,
    }



def _draw_all(
    policies: Sequence[Policy],
    problems: Sequence[Problem],
    budgets: Sequence[int],
    ccfg: DictConfig,
    cfg: DictConfig,
    writer: RolloutWriter,
    stats: Counter,
    cond_writer: RolloutWriter,
    backends: dict[str, Any],
) -> None:
    """Draw and grade the rollouts of every policy (live or recorded); record backend usage."""
    for policy in policies:
        if policy.source == "recorded":
            calibrate_recorded(policy, problems, writer, cond_writer, cfg)
            continue
        backend = build_backend(policy.backend, cfg.paths.cache_dir)
        before = backend.stats.as_dict()
        calibrate_live(policy, problems, budgets, ccfg, cfg, writer, stats)
        after = backend.stats.as_dict()
        keys = ("calls", "samples", "cache_hits", "prompt_tokens", "completion_tokens", "seconds")
        backends[policy.name] = {k: after[k] - before[k] for k in keys}
        backends[policy.name]["model_id"] = backend.model_id


def run(cfg: DictConfig) -> Path:
    """Calibrate every student of ``cfg.students`` on ``cfg.data`` at ``cfg.calibrate.budgets``.

    Returns:
        The run directory.

    Raises:
        mbs.data.DataError: Bad input data (``data.on_error=raise``).
        mbs.llm.BackendError: A backend failed after its retries (finished work is kept).
    """
    logging.getLogger("mbs").setLevel(cfg.log_level)
    out = RunDir(cfg.out_dir, STAGE, cfg.shard.index, cfg.shard.count)
    out.write_config(cfg)
    t0 = time.perf_counter()
    problems, report = load_problems(cfg.data, cfg.shard.index, cfg.shard.count)
    out.timings["load"] = time.perf_counter() - t0
    by_id = {p.id: p for p in problems}
    ccfg = cfg.calibrate
    policies = policies_from_cfg(cfg.students)
    budgets = [int(b) for b in ccfg.budgets]
    live = [p.name for p in policies if p.source == "live"]
    recorded = [p.name for p in policies if p.source == "recorded"]
    log.info(
        "calibrating %d problems: %s",
        len(problems),
        "; ".join(
            part
            for part in (
                f"live {live} at budgets {budgets}, N={ccfg.n}" if live else "",
                f"recorded {recorded} (their no-hint answers are the rollouts)" if recorded else "",
            )
            if part
        ),
    )

    shard = out.shard("rollouts", Rollout)
    cond_shard = out.shard("conditioned", Rollout)
    done = {r.key: r for r in shard.read() if r.problem_id in by_id}
    cond_done = {r.key: r for r in cond_shard.read() if r.problem_id in by_id}
    resumed = len(done)
    stats: Counter = Counter()
    backends: dict[str, Any] = {}
    t1 = time.perf_counter()
    with GradingPool.from_config(cfg.verifier) as pool, shard, cond_shard:
        writer = RolloutWriter(pool, shard, done)
        cond_writer = RolloutWriter(pool, cond_shard, cond_done)
        try:
            _draw_all(policies, problems, budgets, ccfg, cfg, writer, stats, cond_writer, backends)
        finally:  # a failing backend must not lose gradings already under way
            writer.flush(wait=True)
            cond_writer.flush(wait=True)
    out.timings["rollouts"] = time.perf_counter() - t1
    if not cond_done:
        cond_shard.path.unlink(missing_ok=True)
    return finalize(
        out, cfg, problems, list(done.values()), list(cond_done.values()),
        stats={**stats, "resumed": resumed}, backends=backends, load_report=report.as_dict(),
    )


def finalize(
    out: RunDir,
    cfg: DictConfig,
    problems: Sequence[Problem],
    rollouts: Sequence[Rollout],
    conditioned: Sequence[Rollout] = (),
    *,
    stats: dict[str, int] | None = None,
    backends: dict[str, Any] | None = None,
    load_report: dict[str, Any] | None = None,
) -> Path:
    """Derive everything else of a calibration run from its graded rollouts.

    Writes calibrations, hard seeds, ``summary.json``, figures and, last, ``manifest.json``.
    Everything here is a pure function of the rollouts, so rerunning (or merging the rollout
    shards of several processes and finalising once) gives identical files.

    Args:
        out: The run directory (this process's shard index names the files written).
        cfg: The stage config.
        problems: The problems calibrated (for hard seeds and reports).
        rollouts: Every graded rollout (recorded policies: budget ``None``).
        conditioned: Graded recorded answers under hint / partial-solution settings.
        stats: ``resumed`` and ``rollouts_saved`` counters of the drawing phase.
        backends: Per-policy backend usage of the drawing phase.
        load_report: The data loader's report.

    Returns:
        The run directory.
    """
    stats = dict(stats or {})
    backends = dict(backends or {})
    ccfg = cfg.calibrate
    policies = policies_from_cfg(cfg.students)
    budgets = [int(b) for b in ccfg.budgets]
    n_target = int(ccfg.n)
    has_live = any(p.source == "live" for p in policies)
    groups: dict[tuple, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        groups[(r.problem_id, r.policy, r.budget)].append(r)
    es = ccfg.early_stop
    calibrations = []
    for key in sorted(groups, key=lambda k: (k[1], -1 if k[2] is None else k[2], k[0])):
        rs = sorted(groups[key], key=lambda r: r.sample_index)
        n_group = len(rs) if key[2] is None else n_target  # recorded: every no-hint setting is a rollout
        calibrations.append(calibrate_group(rs[:n_group], n_group, es.decision, float(es.alpha)))
    _rewrite(out.shard("calibrations", Calibration), calibrations)
    hard = hard_seeds(calibrations, problems, cfg)
    _rewrite(out.shard("hard_seeds", Problem), hard)

    summary = trap_summary(calibrations)
    summary.update(
        {
            "problems": len(problems),
            "policies": [p.name for p in policies],
            "target_policy": str(cfg.students.target),
            # budgets L and N of the live policies (recorded ones have no budget; their N is
            # the number of no-hint settings, in counts[policy]["recorded"])
            "budgets": budgets if has_live else [],
            "n": n_target if has_live else None,
            "hard_seeds": len(hard),
            "hard_seed_budget": _hard_seed_budget(cfg, policies),
            "rollouts": {
                "drawn": len(rollouts),
                "resumed": int(stats.get("resumed", 0)),
                "saved_by_early_stopping": int(stats.get("rollouts_saved", 0)),
                "ungraded": sum(1 for r in rollouts if r.reward is None),
                "completion_tokens": sum(r.completion_tokens for r in rollouts),
                "truncated": sum(1 for r in rollouts if r.finish_reason == "length"),
            },
            "grading": dict(sorted(Counter(_reason_kind(r.reason) for r in rollouts).items())),
            "data": load_report or {},
            "backends": backends,
        }
    )
    from mbs.difficulty import difficulty_fields

    summary.update(difficulty_fields(calibrations, problems))  # band shares per (difficulty level, L)
    full = [c for c in calibrations if c.n == c.n_target]
    if full and not es.enabled:
        summary["early_stop_simulation"] = early_stop_simulation(
            full, rollouts, int(es.batch), str(es.decision), float(es.alpha)
        )
    if any(p.source == "recorded" for p in policies):
        from mbs.data.champ import gold_report

        summary["recorded"] = recorded_report(problems, rollouts, conditioned)
        summary["champ_gold"] = gold_report()
    out.write_summary(summary)
    if ccfg.figures:
        from mbs.figures.calibration import calibration_figures

        t2 = time.perf_counter()
        calibration_figures(out.path, out.path / "figures")
        out.timings["figures"] = time.perf_counter() - t2
    out.write_manifest(
        {
            "problems": len(problems),
            "rollouts": len(rollouts),
            "calibrations": len(calibrations),
            "hard_seeds": len(hard),
            "skipped_records": (load_report or {}).get("skipped", 0),
            # rollouts read back from this run directory's own files (a resumed or repeated run)
            "resumed_rollouts": int(stats.get("resumed", 0)),
        },
        backends=backends,
        backend_calls=sum(b["calls"] for b in backends.values()),
        cache_hits=sum(b["cache_hits"] for b in backends.values()),
    )
    log.info("calibration written to %s", out.path)
    return out.path


def _rewrite(shard: Shard, records: Sequence[Any]) -> None:
    """Replace a derived shard's content (derived files are recomputed in full, never appended)."""
    shard.path.unlink(missing_ok=True)
    with shard:
        shard.append(records)


def _hard_seed_budget(cfg: DictConfig, policies: Sequence[Policy]) -> int | None:
    if cfg.calibrate.hard_seed_budget is not None:
        return int(cfg.calibrate.hard_seed_budget)
    target = next((p for p in policies if p.name == str(cfg.students.target)), None)
    if target is None:
        raise ValueError(f"students.target={cfg.students.target!r} is not a policy name: {[p.name for p in policies]}")
    if target.source == "recorded":
        return None
    budgets = [int(b) for b in cfg.calibrate.budgets]
    if target.budget is not None and int(target.budget) in budgets:
        return int(target.budget)
    return max(budgets)


def hard_seeds(calibrations: Sequence[Calibration], problems: Sequence[Problem], cfg: DictConfig) -> list[Problem]:
    """Problems the target policy fails on every rollout at the hard-seed budget (synthesis input)."""
    policies = policies_from_cfg(cfg.students)
    budget = _hard_seed_budget(cfg, policies)
    target = str(cfg.students.target)
    failed = {c.problem_id for c in calibrations if c.policy == target and c.budget == budget and c.band == "failed_all"}
    return [p for p in problems if p.id in failed]
