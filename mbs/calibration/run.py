"""A calibration run: drawing every policy's rollouts (:func:`draw_policies`, ``mbs-calibrate``)
and its derived outputs from the graded rollouts (:func:`finalize`, shared by ``mbs-calibrate``
and ``mbs-merge``): calibrations, hard seeds and ``summary.json``, then ``manifest.json``
(:class:`Finalized`) once the stage has drawn the figures.

The derived outputs are a pure function of the rollouts, so rerunning (or merging the rollout
shards of several processes and finalising once) gives identical files.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mbs.calibration import calibrate_group, settled, trap_summary
from mbs.calibration.difficulty import difficulty_fields
from mbs.calibration.grouping import RolloutIndex
from mbs.calibration.independence import IndexCorrelation
from mbs.calibration.recorded import calibrate_recorded, recorded_report
from mbs.calibration.sampling import Group, Policy, RolloutWriter, draw
from mbs.calibration.students import StudentSet
from mbs.data.champ import gold_report
from mbs.errors import ConfigError
from mbs.io import RunDir
from mbs.llm.meter import BackendMeter
from mbs.records import Calibration, Graded, Problem, Rollout, reason_kind
from mbs.runs.calibration import head
from mbs.verify.gold import ungradable_golds
from mbs.verify.rules import extraction_report

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CalibrationSettings:
    """What a calibration run needs from its config, derived once at the stage boundary.

    Attributes:
        policies: The student set (``students``), in config order.
        budgets: Budgets L of the live policies, in tokens (``calibrate.budgets``).
        n: Rollouts N per (problem, policy, budget) (``calibrate.n``).
        target: The target policy's name (``students.target``).
        hard_seed_budget: The budget at which hard seeds are failed_all for the target
            (``None`` for a recorded target).
        early_stop: Sequential early stopping on (``calibrate.early_stop.enabled``).
        decision: What early stopping keeps identical: ``band`` or ``above_alpha``.
        alpha: Threshold of ``above_alpha``.
        batch: Rollouts per early-stopping round.
        figures: Draw the stage's figures (``calibrate.figures``).
        verifier: The ``verifier`` config node (grading pool settings, ``path``): which gold
            answers it cannot grade (:mod:`mbs.verify.gold`).
    """

    policies: tuple[Policy, ...]
    budgets: tuple[int, ...]
    n: int
    target: str
    hard_seed_budget: int | None
    early_stop: bool
    decision: str
    alpha: float
    batch: int
    figures: bool
    verifier: Any = None

    @classmethod
    def from_cfg(cls, calibrate: DictConfig, students: DictConfig, verifier: Any = None) -> CalibrationSettings:
        """Read the ``calibrate`` and ``students`` config nodes once (``verifier``: the
        ``verifier`` node, kept for the gold check).

        Raises:
            ValueError: A bad student set, or ``students.target`` is not a policy name (when
                the hard-seed budget is derived from it).
        """
        ccfg, es = calibrate, calibrate.early_stop
        student_set = StudentSet.from_cfg(students)
        policies, target = student_set.policies, student_set.target_name
        budgets = tuple(int(b) for b in ccfg.budgets)
        if bool(es.enabled) and str(es.decision) != "band":
            raise ConfigError(
                f"calibrate.early_stop.decision={str(es.decision)!r} with calibrate.early_stop.enabled=true: mbs-calibrate "
                "reports bands, pass rates and hard seeds, and only decision=band stops a group once its band is "
                "settled (above_alpha would label a stopped 0/2 group failed_all and make it a hard seed); "
                "above_alpha is the rule synthesis applies to candidates"
            )
        return cls(
            policies=policies, budgets=budgets, n=int(ccfg.n), target=target,
            hard_seed_budget=_hard_seed_budget(ccfg.hard_seed_budget, budgets, student_set),
            early_stop=bool(es.enabled), decision=str(es.decision), alpha=float(es.alpha), batch=int(es.batch),
            figures=bool(ccfg.figures), verifier=verifier,
        )


def _hard_seed_budget(explicit: Any, budgets: Sequence[int], students: StudentSet) -> int | None:
    if explicit is not None:
        return int(explicit)
    target = students.target()
    if target.source == "recorded":
        return None
    if target.budget is not None and int(target.budget) in budgets:
        return int(target.budget)
    return max(budgets)


def _extraction(graded: Iterable[tuple[str | None, float | None]]) -> dict[str, Any]:
    """Rollouts and rewards per extraction rule (:func:`mbs.verify.rules.extraction_report`);
    warns when the rewards rest mostly on the last-sentence fallback."""
    report = extraction_report(graded)
    if report["mostly_fallback"]:
        log.warning(
            "%.0f%% of rewarded rollouts were graded by the last-sentence fallback (no box or answer "
            "line): check that the prompt asks for a marked final answer",
            100 * report["fallback_share_of_rewards"],
        )
    return report


def early_stop_group(rollouts: Sequence[Graded], full: Calibration, batch: int, decision: str, alpha: float) -> tuple[int, int, bool]:
    """Replay sequential early stopping on one fully drawn group.

    Args:
        rollouts: The group's rollouts (or :class:`mbs.calibration.grouping.Outcome`), sorted by sample index.
        full: The group's calibration over all ``full.n_target`` rollouts.
        batch: Rollouts per early-stopping round.
        decision: ``band`` or ``above_alpha``.
        alpha: Threshold of ``above_alpha``.

    Returns:
        ``(rollouts drawn in full, rollouts early stopping saves, same decision as the full draw)``.
    """
    rs = list(rollouts[: full.n_target])
    n = len(rs)
    k = n
    for stop in range(batch, n + batch, batch):
        stop = min(stop, n)
        if settled(rs[:stop], n, decision, alpha):
            k = stop
            break
    early = calibrate_group(rs[:k], n, decision, alpha)
    if decision == "band":
        same = (early.band, early.usable) == (full.band, full.usable)
    else:
        same = (early.successes > alpha * n if k < n else full.pass_rate > alpha) == (full.pass_rate > alpha)
    return n, n - k, same


def early_stop_simulation(calibrations_full: Sequence[Calibration], rollouts: Sequence[Rollout], batch: int, decision: str, alpha: float) -> dict[str, Any]:
    """Replay sequential early stopping on fully drawn groups: rollouts it would save, and
    whether every decision (band, usability) is identical to the full draw (see
    :func:`early_stop_group`)."""
    by_group: dict[tuple, list[Rollout]] = defaultdict(list)
    for r in rollouts:
        by_group[(r.problem_id, r.policy, r.budget)].append(r)
    sim = _EarlyStopTally(batch, decision, alpha)
    for c in calibrations_full:
        sim.add(sorted(by_group[c.key], key=lambda r: r.sample_index), c)
    return sim.report()


class _EarlyStopTally:
    """:func:`early_stop_simulation`, one group at a time."""

    def __init__(self, batch: int, decision: str, alpha: float):
        self.batch, self.decision, self.alpha = batch, decision, alpha
        self.total = self.saved = self.same = self.groups = 0

    def add(self, rollouts: Sequence[Graded], full: Calibration) -> None:
        n, saved, same = early_stop_group(rollouts, full, self.batch, self.decision, self.alpha)
        self.total += n
        self.saved += saved
        self.same += same
        self.groups += 1

    def report(self) -> dict[str, Any]:
        return {
            "rollouts": self.total,
            "saved": self.saved,
            "saved_share": self.saved / self.total if self.total else 0.0,
            "identical_decisions": self.same,
            "groups": self.groups,
            "batch": self.batch,
            "decision": self.decision,
        }


def draw_policies(
    settings: CalibrationSettings,
    problems: Sequence[Problem],
    writer: RolloutWriter,
    cond_writer: RolloutWriter,
    *,
    templates: Any,
    cache_dir: str | None,
    temperature: float,
    top_p: float,
    seed: int,
    early_stop: Any,
    stats: Counter,
) -> dict[str, Any]:
    """Draw and grade the rollouts of every policy of ``settings`` (live or recorded).

    A live policy gets ``settings.n`` rollouts per (problem, budget), drawn, graded and written
    by :func:`mbs.calibration.sampling.draw`; a recorded one its dataset answers
    (:func:`mbs.calibration.recorded.calibrate_recorded`, hint settings into ``cond_writer``).

    Args:
        settings: The calibration settings (policies, budgets L in tokens, N, the verifier node).
        problems: The problems to calibrate.
        writer: Writes the graded rollouts (skips those in ``writer.done``).
        cond_writer: Writes recorded answers under hint / partial-solution settings.
        templates: The ``calibrate.templates`` node (answer type -> prompt template).
        cache_dir: The LLM cache folder.
        temperature: Sampling temperature.
        top_p: Nucleus sampling mass, in (0, 1].
        seed: The run's seed (sample ``i`` of a group is seeded by it and ``i``).
        early_stop: The ``calibrate.early_stop`` node (see :func:`mbs.calibration.sampling.draw`).
        stats: Counters of the drawing phase (rollouts saved by early stopping), updated.

    Returns:
        Per live policy, its backend usage over the run (:class:`mbs.llm.meter.BackendMeter`).

    Raises:
        mbs.llm.BackendError: A backend failed after its retries (finished work is kept).
    """
    backends: dict[str, Any] = {}
    verifier = settings.verifier
    for policy in settings.policies:
        if policy.source == "recorded":
            calibrate_recorded(policy, problems, writer, cond_writer, verifier.path)
            continue
        meter = BackendMeter([(policy.name, policy.backend)], cache_dir)
        groups = [Group.of(p, L, templates, verifier) for L in settings.budgets for p in problems]
        draw(
            policy, groups, settings.n, writer, cache_dir, temperature=temperature, top_p=top_p, seed=seed,
            early_stop=early_stop, stats=stats, desc=f"calibrate {policy.name}",
        )
        backends.update(meter.report())
    return backends


@dataclass(frozen=True)
class Finalized:
    """A calibration run whose records and summary are written, before its manifest.

    The stage draws the figures (they read ``summary.json``), then calls :meth:`write_manifest`
    (``manifest.json`` is written last).

    Attributes:
        out: The run directory.
        counts: The manifest's counts (problems, rollouts, calibrations, hard seeds, skipped
            records, resumed rollouts).
        backends: Per-policy backend usage of the drawing phase.
    """

    out: RunDir
    counts: dict[str, Any]
    backends: dict[str, Any]

    def write_manifest(self) -> Path:
        """Write ``manifest.json`` (counts, backend usage, the run's timings) last.

        Returns:
            The run directory.
        """
        self.out.write_manifest(
            self.counts,
            backends=self.backends,
            backend_calls=sum(b["calls"] for b in self.backends.values()),
            cache_hits=sum(b["cache_hits"] for b in self.backends.values()),
        )
        log.info("calibration written to %s", self.out.path)
        return self.out.path


def finalize(
    out: RunDir,
    settings: CalibrationSettings,
    problems: Sequence[Problem],
    rollouts: Iterable[Rollout],
    conditioned: Sequence[Rollout] = (),
    *,
    stats: dict[str, int] | None = None,
    backends: dict[str, Any] | None = None,
    load_report: dict[str, Any] | None = None,
) -> Finalized:
    """Derive everything else of a calibration run from its graded rollouts.

    Writes calibrations, hard seeds and ``summary.json``; the stage then draws the figures
    (:func:`mbs.figures.calibration.calibration_figures`, when ``settings.figures``) and writes
    ``manifest.json`` last (:meth:`Finalized.write_manifest`).
    Everything here is a pure function of the rollouts, so rerunning (or merging the rollout
    shards of several processes and finalising once) gives identical files.

    The rollouts are streamed once into a :class:`mbs.calibration.grouping.RolloutIndex` (no text kept,
    memory bounded) and read back one (problem, policy, budget) group at a time; calibrations
    are written as they are computed. Nothing is written before ``rollouts`` is exhausted, so
    an iterator that raises (e.g. on a rollout of an unknown problem) leaves the run as it was.

    Args:
        out: The run directory (this process's shard index names the files written).
        settings: The calibration settings (derived once from the stage config).
        problems: The problems calibrated (for hard seeds and reports).
        rollouts: Every graded rollout (recorded policies: budget ``None``), any order, read
            once; a rollout given twice (same key) counts once, the last one given.
        conditioned: Graded recorded answers under hint / partial-solution settings.
        stats: ``resumed`` and ``rollouts_saved`` counters of the drawing phase.
        backends: Per-policy backend usage of the drawing phase.
        load_report: The data loader's report.

    Returns:
        What the manifest records (:class:`Finalized`), written by the stage after its figures.
    """
    stats = dict(stats or {})
    backends = dict(backends or {})
    policies = settings.policies
    budgets = list(settings.budgets)
    n_target = settings.n
    has_live = any(p.source == "live" for p in policies)
    recorded: dict[tuple, Rollout] = {}  # recorded policies' answers, for the CHAMP report (a few thousand)

    def keep_recorded(stream: Iterable[Rollout]) -> Iterator[Rollout]:
        for r in stream:
            if r.budget is None:
                recorded[r.key] = r
            yield r

    with RolloutIndex() as index:
        index.add(keep_recorded(rollouts))
        totals = index.totals()
        target = (settings.target, settings.hard_seed_budget)
        failed: set[str] = set()  # the target's failed_all problems at the hard-seed budget
        sim = None if settings.early_stop else _EarlyStopTally(settings.batch, settings.decision, settings.alpha)
        by_index = IndexCorrelation()

        def calibrations() -> Iterator[Calibration]:
            for rs in index.groups():
                first = rs[0]
                n_group = len(rs) if first.budget is None else n_target  # recorded: every no-hint setting is a rollout
                batch = settings.batch if settings.early_stop and first.budget is not None else None
                c = calibrate_group(rs[:n_group], n_group, settings.decision, settings.alpha, batch)
                if (c.policy, c.budget) == target and c.band == "failed_all":
                    failed.add(c.problem_id)
                if sim is not None and c.n == c.n_target:
                    sim.add(rs, c)
                if first.budget is not None and c.n == c.n_target:
                    by_index.add(c.policy, first.budget, [o.reward for o in rs[:n_group]])
                yield c

        cal_shard = out.shard("calibrations", Calibration)
        n_calibrations = cal_shard.rewrite(calibrations())
        grading: Counter[str] = Counter()

        def graded() -> Iterator[tuple[str | None, float | None]]:  # one scan for both reports
            for reason, reward in index.graded():
                grading[reason_kind(reason)] += 1
                yield reason, reward

        extraction = _extraction(graded())
    ungradable = ungradable_golds(problems, settings.verifier)  # never hard seeds: no trace can verify them
    hard = [p for p in problems if p.id in failed and p.id not in ungradable]
    out.shard("hard_seeds", Problem).rewrite(hard)

    # the trap shares are of gradable problems: an ungradable gold fails every rollout, which
    # says nothing about the policy, so those problems leave every denominator (reported below)
    def gradable() -> Iterator[Calibration]:
        return (c for c in cal_shard.iter() if c.problem_id not in ungradable)

    summary = trap_summary(gradable())
    summary.update(
        {
            **head(problems=len(problems), policies=[p.name for p in policies], target_policy=settings.target,
                   budgets=budgets if has_live else [], n=n_target if has_live else None, hard_seeds=len(hard),
                   ungradable=ungradable, hard_seed_budget=settings.hard_seed_budget),
            "rollouts": {
                "drawn": totals["drawn"],
                "resumed": int(stats.get("resumed", 0)),
                "saved_by_early_stopping": int(stats.get("rollouts_saved", 0)),
                "ungraded": totals["ungraded"],
                "completion_tokens": totals["completion_tokens"],
                "truncated": totals["truncated"],
            },
            "grading": dict(sorted(grading.items())),
            "extraction": extraction,
            "data": load_report or {},
            "backends": backends,
        }
    )
    summary.update(difficulty_fields(gradable(), problems))  # band shares per (difficulty level, L)
    # are sample i's outcomes independent across problems? (seeds salted with the problem id, issue 41)
    summary["sample_index_correlation"] = by_index.report()
    if sim is not None and sim.groups:
        summary["early_stop_simulation"] = sim.report()
    if any(p.source == "recorded" for p in policies):
        summary["recorded"] = recorded_report(problems, list(recorded.values()), conditioned)
        summary["champ_gold"] = gold_report()
    out.write_summary(summary)
    return Finalized(
        out,
        {
            "problems": len(problems),
            "rollouts": totals["drawn"],
            "calibrations": n_calibrations,
            "hard_seeds": len(hard),
            "skipped_records": (load_report or {}).get("skipped", 0),
            # rollouts read back from this run directory's own files (a resumed or repeated run)
            "resumed_rollouts": int(stats.get("resumed", 0)),
        },
        backends,
    )
