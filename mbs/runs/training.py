"""The training run's contract: the engine, the policy that trained (with the calibrated one it
came from) and the result, read here from ``mbs-train``'s ``summary.json``.

``mbs-train`` writes the ``policy`` block with :meth:`mbs.training.policy.TrainPolicy.summary`
(whose ``calibrated`` entry is :meth:`mbs.runs.policy.CalibratedPolicy.to_dict`) and the
``result`` of the engine; the pipeline's evaluation and the thesis read them with
:meth:`TrainingSummary.read`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mbs.runs.policy import CalibratedPolicy
from mbs.runs.summary import load_summary

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
