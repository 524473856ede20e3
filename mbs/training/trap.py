"""The trap forecast of a training run: the training rows' calibrations in, the summary block out.

Before training, :func:`training_calibrations` finds the calibration of every exported training
row for the policy that trains (each row names its problem, ``extra_info.id``, and the run that
calibrated it, ``extra_info.run_dir``), and :func:`forecast_block` turns them into the forecast of
:mod:`mbs.training.forecast` at the training group size and prompts per step. Its Beta prior is
fitted on the population the rows were chosen from (:func:`training_prior`, issue 41): every
calibration of those runs for the same (policy, L), all bands; failing that, on the rows with the
likelihood truncated to 0 < k < N when the export kept Goldilocks rows only (``export.select``
usable or goldilocks, or a synthesis run's problems). After training it
puts the observed per-step zero-std share (``frac_reward_zero_std`` in ``metrics.jsonl``) beside
the forecast: ``summary.json``'s ``trap_forecast`` block, drawn by :mod:`mbs.figures.forecast`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from mbs.io import Shard, shard_files
from mbs.records import Calibration
from mbs.runs.calibration import CalibrationSummary
from mbs.runs.export import ExportSummary
from mbs.runs.summary import SummaryError
from mbs.training.dynamic_sampling import compare_draws, draw_forecast
from mbs.training.forecast import compare_observed, counts_from_calibrations, trap_forecast
from mbs.training.prior import MIN_EMPIRICAL, BetaPrior, fit_prior

__all__ = ["export_selection", "forecast_block", "observed_draws", "observed_zero_std", "training_calibrations",
           "training_prior", "zero_std_steps"]

#: ``export.select`` values that keep Goldilocks rows only (a synthesis run's problems are too).
GOLDILOCKS_ONLY = ("usable", "goldilocks")


def training_calibrations(rows: Iterable[dict], policy: str, budget: int | None,
                          population: list[Calibration] | None = None) -> tuple[list[Calibration], dict[str, int]]:
    """The calibrations of exported training rows for ``policy`` at ``budget`` (tokens).

    Args:
        rows: Exported rows (dicts with ``extra_info.id`` and ``extra_info.run_dir``).
        policy: The calibrated policy's name, as in the calibration records.
        budget: Its budget L.
        population: When given, every calibration of ``policy`` at ``budget`` of the rows' runs
            (every band; problems whose gold the run found ungradable, which no export keeps, left
            out) is appended to it: what the rows were chosen from.

    Returns:
        ``(calibrations, report)``: one calibration per row that has one (a problem exported
        twice counts once), and ``{"rows", "found", "missing"}``.
    """
    by_run: dict[str, list[str]] = {}
    total = 0
    for r in rows:
        info = r.get("extra_info") or {}
        total += 1
        by_run.setdefault(str(info.get("run_dir") or ""), []).append(str(info.get("id")))
    out: dict[str, Calibration] = {}
    for run_dir, ids in by_run.items():
        want = set(ids)
        if not run_dir or not Path(run_dir).is_dir():
            continue
        ungradable = _ungradable(run_dir) if population is not None else set()
        for path in shard_files(run_dir, "calibrations"):
            for c in Shard(path, Calibration).read():
                if c.policy != policy or c.budget != budget:
                    continue
                if c.problem_id in want:
                    out[c.problem_id] = c
                if population is not None and c.problem_id not in ungradable:
                    population.append(c)
    return list(out.values()), {"rows": total, "found": len(out), "missing": total - sum(
        1 for ids in by_run.values() for i in ids if i in out)}


def _ungradable(run_dir: str) -> set[str]:
    """Problem ids a calibration run's summary lists as ungradable golds (none without a summary)."""
    try:
        return set(CalibrationSummary.read(run_dir).ungradable)
    except SummaryError:
        return set()


def export_selection(data_dir: str | Path, sources: Iterable[str]) -> str | None:
    """How the export chose the rows of ``sources``: ``goldilocks`` when each kept Goldilocks
    problems only (``export.select`` in :data:`GOLDILOCKS_ONLY`, or a synthesis run: its problems
    passed a Goldilocks filter), else the one ``export.select`` they share; ``None`` when the
    export's ``summary.json`` does not say (missing, an unknown source, or different selections)."""
    try:
        described = ExportSummary.read(data_dir)
    except SummaryError:
        return None
    seen = set()
    for name in set(sources):
        s = described.source(name)
        if s is None:
            return None
        select = "goldilocks" if s.kind == "synthesis" else s.select
        seen.add("goldilocks" if select in GOLDILOCKS_ONLY else select)
    return seen.pop() if len(seen) == 1 and None not in seen else None


def training_prior(cals: Sequence[Calibration], population: Sequence[Calibration], selection: str | None) -> BetaPrior | str:
    """The Beta prior of the training rows' forecast (:mod:`mbs.training.prior`).

    Args:
        cals: The training rows' calibrations.
        population: Every calibration of the rows' runs at the same (policy, L)
            (:func:`training_calibrations`).
        selection: :func:`export_selection` of the rows' sources.

    Returns:
        Fitted on ``population`` when it has :data:`~mbs.training.prior.MIN_EMPIRICAL` problems,
        else on the rows; with the likelihood truncated to 0 < k < N when every problem fitted on
        is Goldilocks (0 < k < n observed) and the export did not say it kept every band (the
        source run held the selected problems only); the rows as they are with fewer than the
        minimum: ``"empirical"`` (Jeffreys).
    """
    fitted, where = (population, "source calibration") if len(population) >= MIN_EMPIRICAL else (cals, "training rows")
    if len(fitted) < MIN_EMPIRICAL:
        return "empirical"
    truncated = selection in (None, "goldilocks") and all(0 < c.successes < c.n for c in fitted)
    return fit_prior([c.successes for c in fitted], [c.n for c in fitted], [c.n_target for c in fitted], truncated=truncated,
                     fitted_on=f"{where} ({len(fitted)} problems, "
                               + ("likelihood truncated to 0 < k < N)" if truncated else "every band)"))


def metrics_rows(metrics_path: str | Path, key: str) -> list[dict[str, Any]]:
    """The lines of a TRL run's ``metrics.jsonl`` that log ``key`` (not null), in order; none when
    the file is missing (a run that has not logged a step)."""
    path = Path(metrics_path)
    if not path.is_file():
        return []
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return [row for row in rows if row.get(key) is not None]


def observed_zero_std(metrics_path: str | Path) -> tuple[list[int], list[float]]:
    """``(steps, frac_reward_zero_std)`` of every logged step of a TRL run's ``metrics.jsonl``."""
    rows = metrics_rows(metrics_path, "frac_reward_zero_std")
    return [int(r["step"]) for r in rows], [float(r["frac_reward_zero_std"]) for r in rows]


def zero_std_steps(metrics_path: str | Path, prompts_per_step: int) -> list[tuple[int, float, int]]:
    """``(step, frac_reward_zero_std, groups drawn)`` of every logged step of a TRL run's
    ``metrics.jsonl``: groups drawn exceed ``prompts_per_step`` where dynamic sampling drew rounds
    (``groups_drawn``; steps logged without it drew ``prompts_per_step``)."""
    return [(int(r["step"]), float(r["frac_reward_zero_std"]), int(r.get("groups_drawn") or prompts_per_step))
            for r in metrics_rows(metrics_path, "frac_reward_zero_std")]


def observed_draws(metrics_path: str | Path) -> tuple[list[int], list[int]]:
    """Per logged step of ``metrics.jsonl``, the generation rounds and the rollouts drawn (steps
    logged before these were counted are left out)."""
    rows = metrics_rows(metrics_path, "rollouts_drawn")
    return [int(r.get("rounds", 1)) for r in rows], [int(r["rollouts_drawn"]) for r in rows]


def forecast_block(data_dir: str | Path, policy: str | None, budget: int | None, group_size: int, prompts_per_step: int,
                   metrics_path: str | Path | None = None, seed: int = 0, exclude: Iterable[str] = (),
                   steps: int | None = None, max_rounds: int | None = None,
                   gen_batch_size: int | None = None) -> dict[str, Any]:
    """The ``trap_forecast`` block of a training summary (``{"skipped": reason}`` when it cannot be made).

    Args:
        data_dir: The export folder (``train.parquet``).
        policy: The calibrated policy's name (``None``: no calibrated policy, nothing to forecast).
        budget: Its budget L in tokens.
        group_size: GRPO group size G of the training run.
        prompts_per_step: Prompts per optimizer step B.
        metrics_path: The run's ``metrics.jsonl`` (``None`` or missing: the forecast alone).
        seed: Monte Carlo seed.
        exclude: Export sources whose rows the run did not train on.
        steps: Optimizer steps the run trains (for the forecast of what dynamic sampling draws).
        max_rounds: Dynamic sampling's round cap per step (``None``: dynamic sampling off; the
            forecast of what it would draw, with ``steps``, is given all the same with verl's
            default cap of 10 rounds).
        gen_batch_size: Prompts per dynamic-sampling round (``None``: ``prompts_per_step``).

    Returns:
        ``{"forecast": TrapForecast.to_dict(), "calibrations": {"rows", "found", "missing",
        "population"}, "export_selection", "observed": compare_observed(...), "dynamic_sampling":
        {"enabled", "forecast", "observed"}}`` (``forecast.prior`` says what the prior was fitted on,
        :func:`training_prior`; ``population``: calibrations of the rows' runs at that (policy, L))
        (``observed`` only once steps were logged; ``dynamic_sampling`` only with ``steps``: its
        ``forecast`` is :func:`mbs.training.dynamic_sampling.draw_forecast`, its ``observed``
        :func:`mbs.training.dynamic_sampling.compare_draws`, with dynamic sampling on).
    """
    if policy is None:
        return {"skipped": "the export names no calibrated policy: no pass rates to forecast from"}
    drop = set(exclude)
    rows = [r for r in pq.read_table(Path(data_dir) / "train.parquet", columns=["extra_info"]).to_pylist()
            if (r.get("extra_info") or {}).get("source") not in drop]
    population: list[Calibration] = []
    cals, report = training_calibrations(rows, policy, budget, population)
    if not cals:
        return {"skipped": f"no training row has a calibration of {policy} at L={budget}", "calibrations": report}
    k, n, early = counts_from_calibrations(cals)
    planned = steps
    logged = zero_std_steps(metrics_path, prompts_per_step) if metrics_path else []
    values = [v for _, v, _ in logged]
    selection = export_selection(data_dir, {str((r.get("extra_info") or {}).get("source")) for r in rows})
    prior = training_prior(cals, population, selection)
    fc = trap_forecast(k, n, group_size, prompts_per_step, early_stopped=early, prior=prior, steps=max(1, len(values)),
                       seed=seed)
    block: dict[str, Any] = {"forecast": fc.to_dict(), "calibrations": {**report, "population": len(population)},
                             "export_selection": selection}
    if values:
        block["observed"] = compare_observed(fc, values, steps=[st for st, *_ in logged], groups=[g for *_, g in logged])
    if planned is not None:
        ds = draw_forecast(fc.zbar_draws, prompts_per_step, group_size, int(planned), int(max_rounds or 10), level=fc.level,
                           seed=seed, gen_batch_size=gen_batch_size)
        block["dynamic_sampling"] = {"enabled": max_rounds is not None, "forecast": ds}
        rounds, rollouts = observed_draws(metrics_path) if metrics_path else ([], [])
        if max_rounds is not None and rounds:
            block["dynamic_sampling"]["observed"] = compare_draws(
                ds if len(rounds) == int(planned) else draw_forecast(
                    fc.zbar_draws, prompts_per_step, group_size, len(rounds), int(max_rounds), level=fc.level, seed=seed),
                rounds, rollouts)
    return block
