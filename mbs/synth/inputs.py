"""Inputs of a synthesis run: the hard seeds and calibrations of a ``mbs-calibrate`` run
directory, and the live student set."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mbs.calibration.sampling import Policy
from mbs.calibration.students import StudentSet
from mbs.data import DataError, in_shard
from mbs.errors import ConfigError, InputNotFoundError
from mbs.io import Shard, read_records, shard_files
from mbs.records import Calibration, Problem
from mbs.runs.calibration import CalibrationSummary
from mbs.runs.summary import SummaryError
from mbs.synth.settings import SeedInputs

log = logging.getLogger(__name__)


def calibration_dir(inputs: SeedInputs) -> Path:
    """The calibration run directory named by ``calibration_dir``.

    Raises:
        ValueError: ``calibration_dir`` is not set.
        FileNotFoundError: The folder does not exist or has no ``hard_seeds.*.jsonl``.
    """
    if not inputs.calibration_dir:
        raise ConfigError("calibration_dir is not set: pass calibration_dir=<a mbs-calibrate run directory>")
    path = Path(inputs.calibration_dir).expanduser()
    if not path.is_dir():
        raise InputNotFoundError(f"calibration_dir={path}: no such directory")
    if not shard_files(path, "hard_seeds"):
        raise InputNotFoundError(
            f"calibration_dir={path}: no hard_seeds.*.jsonl (is it a finished mbs-calibrate run directory?)"
        )
    return path


def load_seeds(inputs: SeedInputs) -> list[Problem]:
    """The hard seeds of ``calibration_dir`` in this shard, at most ``synth.seeds_limit``.

    Raises:
        ValueError, FileNotFoundError: See :func:`calibration_dir`.
        mbs.records.RecordError: A malformed hard-seed record (names file and line).
        ValueError: Two hard seeds share an id, or a seed has no ground truth.
    """
    path = calibration_dir(inputs)
    seeds = read_records(path, "hard_seeds", Problem)
    seen: set[str] = set()
    for s in seeds:
        if s.id in seen:
            raise DataError(f"{path}: hard seed id {s.id!r} occurs twice in hard_seeds.*.jsonl")
        if s.ground_truth is None:
            raise DataError(f"{path}: hard seed {s.id!r} has no ground_truth (field ground_truth is null)")
        seen.add(s.id)
    seeds = [s for s in seeds if in_shard(s.id, inputs.shard_index, inputs.shard_count)]
    if inputs.seeds_limit is not None:
        seeds = seeds[: inputs.seeds_limit]
    return seeds


def seed_provenance(inputs: SeedInputs, target: Policy) -> dict[str, Any]:
    """Which policy and budget made the seeds hard, against the target synthesis calibrates for.

    Hard seeds are failed_all for the calibration run's target policy at its hard-seed budget;
    synthesis qualifies problems for ``students.target`` at its own budget. When the two
    differ (e.g. seeds from the recorded GPT-4 Turbo study, synthesis for the embedded
    model), a warning says so and the summary records it.

    Returns:
        ``{"calibration_target", "calibration_budget", "same_target"}`` (``None`` values when
        the calibration run has no summary).
    """
    path = calibration_dir(inputs)
    try:
        summary: CalibrationSummary | None = CalibrationSummary.read(path)
    except SummaryError:
        summary = None
    cal_target, cal_budget = (summary.target_policy, summary.hard_seed_budget) if summary else (None, None)
    same = cal_target == target.name and cal_budget == target.budget
    if summary and not same:
        log.warning(
            "hard seeds of %s are failed_all for %s at L=%s; synthesis qualifies problems for %s at L=%s "
            "(set students.target / budget.L to match, if that is not intended)",
            path, cal_target, cal_budget, target.name, target.budget,
        )
    return {"calibration_target": cal_target, "calibration_budget": cal_budget, "same_target": same}


def load_base_calibrations(
    inputs: SeedInputs, cells: set[tuple[str, int | None]] | None = None
) -> dict[tuple[str, str, int | None], Calibration]:
    """acc(S, p) measured by the calibration run: ``{(problem id, policy, budget): Calibration}``.

    Args:
        inputs: Where the seeds come from (``calibration_dir``).
        cells: Keep only these ``(policy, budget)`` (the live students at their budgets); the
            calibrations stream through, so a run of other policies and budgets costs no memory.
    """
    path = calibration_dir(inputs)
    files = shard_files(path, "calibrations")
    if not files:
        log.warning("%s has no calibrations.*.jsonl: acc(S, p) of the seeds will be measured", path)
    return {
        c.key: c
        for f in files
        for c in Shard(f, Calibration).iter()
        if cells is None or (c.policy, c.budget) in cells
    }


def live_students(students: StudentSet) -> tuple[list[Policy], Policy]:
    """The live students (in config order) and the target policy (:meth:`StudentSet.live_target`).

    Raises:
        ConfigError: No live student, a live student without a budget, or the target is not a
            live policy of ``students``.
    """
    policies, live = students.policies, students.live
    skipped = [p.name for p in policies if p.source != "live"]
    if skipped:
        log.warning("students %s are recorded policies: they cannot be sampled, synthesis leaves them out", skipped)
    if not live:
        raise ConfigError("students: synthesis needs at least one live student (recorded policies cannot be sampled)")
    for p in live:
        if p.budget is None:
            raise ConfigError(f"students: live policy {p.name!r} has no budget")
    return live, students.live_target("synthesis")
