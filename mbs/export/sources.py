"""Where exported problems come from: run directories of earlier stages, or any data config.

A run directory is recognised by the ``stage`` of its ``summary.json``:

* ``synthesize``: every synthesis method writes its final problems as
  :class:`~mbs.records.Problem` records in ``problems.*.jsonl`` (MBS and direct: math
  problems; Golden Goose: ``mcq`` problems whose ground truth is the option letter). All of
  them are exported.
* ``calibrate``: the original problems, chosen by their calibration (``export.select``):
  ``usable`` (default; the Goldilocks band with a complete correct response within L, the
  problems that teach the policy, seed paper "Background"), ``goldilocks``, ``failed_all``,
  ``solved_all`` or ``all``, for one policy (default: the run's target policy) at one budget
  (default: the run's hard-seed budget); problems whose gold the verifier cannot grade
  (the run summary's ``ungradable``) are never exported. Calibration runs store calibrations, not problems:
  the problems are loaded again through the ``data`` node of the run's own ``config.yaml``
  (with its limit and shard lifted) and matched by id.
* ``pipeline``: each step (``steps`` in its summary) is a source of its own, named after
  the step.

``export.include_data=true`` adds every problem of the ``data`` config (any dataset).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.data import load_problems
from mbs.errors import UserError
from mbs.io import SUMMARY, Shard, read_records, shard_files
from mbs.records import Calibration, Problem
from mbs.runs.calibration import CalibrationSummary
from mbs.runs.pipeline import pipeline_steps
from mbs.runs.summary import run_stage
from mbs.runs.synthesis import SynthesisSummary
from mbs.validate import EXPORT_SELECTIONS

log = logging.getLogger(__name__)

#: Which calibrated problems of a run become rows (``export.select``; the range of its rule in
#: :data:`mbs.validate.RULES`).
SELECTIONS = EXPORT_SELECTIONS


class SourceError(UserError, ValueError):
    """A source run directory cannot be exported (the message names it and the cause)."""


@dataclass
class Source:
    """The problems of one source.

    Attributes:
        name: Source name (summary keys, ``export.weights`` keys, ``extra_info.source``).
        kind: ``calibration``, ``synthesis`` or ``data``.
        run_dir: The run folder it came from (empty for ``data``).
        problems: Its problems in source order.
        templates: Prompt templates the run used per answer type (``None``: not recorded).
        selection: How problems were chosen (calibration sources).
    """

    name: str
    kind: str
    run_dir: str
    problems: list[Problem]
    templates: dict[str, str] | None = None
    selection: dict[str, Any] = field(default_factory=dict)


def _run_config(run_dir: Path) -> DictConfig:
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise SourceError(f"{run_dir}: no config.yaml (not an mbs run directory?)")
    return OmegaConf.load(path)  # type: ignore[return-value]  # a run's config.yaml is a mapping


def _stage(run_dir: Path) -> str | None:
    """The ``stage`` of a run folder's summary (``None``: no summary.json)."""
    if not (run_dir / SUMMARY).is_file():
        return None
    return run_stage(run_dir)


def sources_from_run(run_dir: str | Path, select: str, policy: str | None, budget: int | None, name: str | None = None) -> list[Source]:
    """The sources of one run directory (several for a pipeline run).

    Args:
        run_dir: A calibrate, synthesize or pipeline run folder.
        select: Which calibrated problems to keep (:data:`SELECTIONS`).
        policy: Policy whose calibration selects (``None``: the run's target policy).
        budget: Budget L whose calibration selects (``None``: the run's hard-seed budget).
        name: Source name (default: the stage, ``synthesize_<method>`` for synthesis).

    Raises:
        SourceError: No summary, an unsupported stage, an unknown selection, or
            calibrations naming problems the run's data config no longer yields.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    stage = _stage(run_dir)
    if stage is None:
        raise SourceError(f"{run_dir}: no summary.json (did the stage finish?)")
    if stage == "pipeline":
        out: list[Source] = []
        for step, step_dir in pipeline_steps(run_dir).items():
            if _stage(step_dir) in ("calibrate", "synthesize"):
                out.extend(sources_from_run(step_dir, select, policy, budget, name=step))
        if not out:
            raise SourceError(f"{run_dir}: pipeline run without a calibrate or synthesize step")
        return out
    if stage == "synthesize":
        _run_config(run_dir)
        synth = SynthesisSummary.read(run_dir)
        problems = read_records(run_dir, "problems", Problem)
        return [Source(name or f"synthesize_{synth.method}", "synthesis", str(run_dir), problems, synth.templates())]
    if stage == "calibrate":
        return [_calibration_source(run_dir, CalibrationSummary.read(run_dir), select, policy, budget, name or "calibrate")]
    raise SourceError(f"{run_dir}: stage {stage!r} cannot be exported; valid: calibrate, synthesize, pipeline")


def _calibration_source(run_dir: Path, summary: CalibrationSummary, select: str, policy: str | None, budget: int | None,
                        name: str) -> Source:
    if select not in SELECTIONS:
        raise SourceError(f"export.select={select!r}: valid values are {list(SELECTIONS)}")
    cfg = _run_config(run_dir)
    policy, budget = summary.selection(policy, budget)
    want = budget
    have: set[tuple] = set()
    mine = 0
    # problems whose gold the verifier cannot grade (mbs.verify.gold): never exported
    ungradable = set(summary.ungradable)
    chosen: list[str] = []  # problem ids; the calibrations stream through (a run may hold millions)
    for path in shard_files(run_dir, "calibrations"):
        for c in Shard(path, Calibration).iter():
            have.add((c.policy, c.budget))
            if c.policy != policy or c.budget != want:
                continue
            mine += 1
            if c.problem_id in ungradable:
                continue
            if select == "all" or (c.usable if select == "usable" else c.band == select):
                chosen.append(c.problem_id)
    if have and not mine:
        raise SourceError(f"{run_dir}: no calibration of policy {policy!r} at budget {budget}; the run has {sorted(have, key=str)}")
    data_cfg = OmegaConf.create(OmegaConf.to_container(cfg.data, resolve=False))
    data_cfg.limit = None  # calibrations say which problems were used; reload them all
    problems, _ = load_problems(data_cfg)
    by_id = {p.id: p for p in problems}
    missing = [pid for pid in chosen if pid not in by_id]
    if missing:
        raise SourceError(
            f"{run_dir}: calibrated problem(s) {missing[:5]} are not in the run's data config "
            f"({run_dir / 'config.yaml'}: data.loader={data_cfg.loader}); has the dataset changed?"
        )
    ids = set(chosen)
    templates = summary.templates()
    return Source(
        name,
        "calibration",
        str(run_dir),
        [p for p in problems if p.id in ids],
        templates,
        {"select": select, "policy": policy, "budget": budget, "calibrated": mine, "ungradable_left_out": len(ungradable)},
    )


def data_source(data_cfg: Any) -> Source:
    """Every problem of a data config (``data=jsonl data.path=...``, ``data=champ``, ...)."""
    problems, _ = load_problems(data_cfg)
    return Source("data", "data", "", problems)
