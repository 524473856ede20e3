"""The training run's contract: the engine, the policy that trained (with the calibrated one it
came from) and the result, read here from ``mbs-train``'s ``summary.json``.

``mbs-train`` writes the ``policy`` block with :meth:`mbs.training.policy.TrainPolicy.summary`
(whose ``calibrated`` entry is :meth:`mbs.runs.policy.CalibratedPolicy.to_dict`) and the
``result`` of the engine; the pipeline's evaluation and the thesis read them with
:meth:`TrainingSummary.read`. The report's summary reads what trained on what, the zero-std
share against the calibration's forecast and the draws of dynamic sampling with
:class:`TrainingOutcome` (which reads summaries whose policy block is partial, too).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from mbs.runs.policy import CalibratedPolicy
from mbs.runs.summary import Fields, Record, load_summary

STAGE = "train"


@dataclass(frozen=True)
class TrainedPolicy:
    """The ``policy`` block of a training run: what trained.

    Attributes:
        model: The checkpoint folder or name training started from.
        group_size: N, completions per prompt.
        max_completion_length: L in tokens.
        temperature, top_p: Sampling parameters.
        top_k, min_p: Filters (``None``: off).
        calibrated: The calibrated policy it trains (``None``: the export named none).
    """

    model: str
    group_size: int | None
    max_completion_length: int | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    calibrated: CalibratedPolicy | None

    @property
    def name(self) -> str:
        """The calibrated policy's name (``policy`` when the export named none)."""
        return str((self.calibrated.policy if self.calibrated else None) or "policy")


@dataclass(frozen=True)
class TrainingSummary:
    """A training run's ``summary.json``, read back.

    Attributes:
        run_dir: The run folder.
        engine: ``trl`` or ``verl``.
        dry_run: Whether nothing trained (the plan only).
        policy: What trained.
        steps: GRPO steps taken (``None``: not waited for, or a dry run).
        final: The final checkpoint folder (``None``: none written here).
    """

    run_dir: str
    engine: str
    dry_run: bool
    policy: TrainedPolicy
    steps: int | None
    final: str | None

    @classmethod
    def read(cls, run_dir: str | os.PathLike) -> TrainingSummary:
        """Read a training run's summary.

        Raises:
            SummaryError: No ``summary.json``, another stage's, or a field of the wrong type
                (names the file and the field; ``policy.model`` is required).
        """
        f = load_summary(run_dir, STAGE)
        p = f.block("policy")
        cal = p.get("calibrated", dict, None)
        policy = TrainedPolicy(
            model=p.get("model", str), group_size=p.opt_int("group_size"),
            max_completion_length=p.opt_int("max_completion_length"), temperature=p.get("temperature", float, None),
            top_p=p.get("top_p", float, None), top_k=p.opt_int("top_k"), min_p=p.get("min_p", float, None),
            calibrated=None if cal is None else CalibratedPolicy.from_dict(cal),
        )
        result = f.block("result")
        return cls(str(run_dir), f.get("engine", str, ""), bool(f.get("dry_run", bool, False)), policy,
                   result.opt_int("steps"), result.opt_str("final"))


@dataclass(frozen=True)
class ZeroStdForecast:
    """``trap_forecast.forecast``: the zero-std share of GRPO groups the calibration forecasts.

    Attributes:
        level: The interval's level (``0.9``; ``None``: not recorded).
        expected_zero_std_share: Expected share of groups whose rewards are all equal.
        share_ci: Its predictive interval ``(lo, hi)`` (``None``: not recorded).
    """

    level: float | None
    expected_zero_std_share: float | None
    share_ci: Any


@dataclass(frozen=True)
class ZeroStdObserved:
    """``trap_forecast.observed``: the zero-std share the training steps logged, against the forecast.

    Attributes:
        level: The forecast interval's level (``None``: not recorded).
        n_steps: Steps logged (``None``: not recorded).
        prompts_per_value: Groups per logged value (``1`` when not recorded).
        observed_mean: Mean zero-std share over the steps.
        forecast_expected_share: The forecast's expected share.
        forecast_mean_interval: The forecast's interval for the mean over ``n_steps`` steps.
        mean_within_forecast: Whether the observed mean lies in it.
    """

    level: float | None
    n_steps: int | None
    prompts_per_value: int
    observed_mean: float | None
    forecast_expected_share: float | None
    forecast_mean_interval: Any
    mean_within_forecast: bool


@dataclass(frozen=True)
class Draws:
    """``draws``: rollouts drawn in training (dynamic sampling draws more rounds).

    Attributes:
        dynamic_sampling: Whether zero-std groups were dropped and more drawn.
        rollouts_drawn, rounds, groups_drawn, groups_kept: Counts (``None``: not recorded).
    """

    dynamic_sampling: bool = False
    rollouts_drawn: int | None = None
    rounds: int | None = None
    groups_drawn: int | None = None
    groups_kept: int | None = None


@dataclass(frozen=True)
class TrainingOutcome(Record):
    """What a training run trained on and what its steps logged, as the report's summary tells
    it. Every key may be missing (``None``, empty); numbers stay as written.

    Attributes:
        engine: ``trl`` or ``verl`` (``None``: not recorded).
        dry_run: Whether nothing trained.
        steps: GRPO steps taken (``None``: submitted, not waited for, or not recorded).
        model: ``policy.model``: the checkpoint training started from.
        group_size, max_completion_length, temperature: N, L in tokens and the temperature of ``policy``.
        calibrated_policy, calibrated_source, calibrated_rows: ``policy.calibrated``'s policy name,
            export source and rows.
        data_trained: ``data.trained``: rows trained on.
        forecast_rows: ``trap_forecast.calibrations.rows``: rows the forecast found calibrations for.
        forecast: The forecast (``None``: none made).
        observed: The logged share against it (``None``: no step logged).
        forecast_skipped: Why no forecast was made (``None``: one was, or not recorded).
        draws: The rollouts drawn.
    """

    STAGE = "train"

    engine: str | None = None
    dry_run: bool = False
    steps: int | None = None
    model: str | None = None
    group_size: int | None = None
    max_completion_length: int | None = None
    temperature: float | None = None
    calibrated_policy: str | None = None
    calibrated_source: str | None = None
    calibrated_rows: int | None = None
    data_trained: int | None = None
    forecast_rows: int | None = None
    forecast: ZeroStdForecast | None = None
    observed: ZeroStdObserved | None = None
    forecast_skipped: str | None = None
    draws: Draws = Draws()

    @classmethod
    def from_fields(cls, f: Fields) -> TrainingOutcome:
        """The outcome of the training summary ``f``.

        Raises:
            SummaryError: A field of the wrong type (names the file and the dotted field).
        """
        p, tf, d = f.block("policy"), f.block("trap_forecast"), f.block("draws")
        cal = p.block("calibrated")
        fc, obs = tf.block("forecast"), tf.block("observed")
        return cls(
            engine=f.opt_str("engine"), dry_run=bool(f.get("dry_run", bool, False)), steps=f.block("result").opt_int("steps"),
            model=p.opt_str("model"), group_size=p.opt_int("group_size"),
            max_completion_length=p.opt_int("max_completion_length"), temperature=p.num("temperature"),
            calibrated_policy=cal.opt_str("policy"), calibrated_source=cal.opt_str("source"), calibrated_rows=cal.opt_int("rows"),
            data_trained=f.block("data").opt_int("trained"), forecast_rows=tf.block("calibrations").opt_int("rows"),
            forecast=ZeroStdForecast(fc.num("level"), fc.num("expected_zero_std_share"), fc.get("share_ci", list, None))
            if fc.data else None,
            observed=ZeroStdObserved(obs.num("level"), obs.opt_int("n_steps"), obs.get("prompts_per_value", int, 1),
                                     obs.num("observed_mean"), obs.num("forecast_expected_share"),
                                     obs.get("forecast_mean_interval", list, None),
                                     bool(obs.get("mean_within_forecast", bool, False))) if obs.data else None,
            forecast_skipped=tf.opt_str("skipped"),
            draws=Draws(bool(d.get("dynamic_sampling", bool, False)), d.opt_int("rollouts_drawn"), d.opt_int("rounds"),
                        d.opt_int("groups_drawn"), d.opt_int("groups_kept")),
        )
