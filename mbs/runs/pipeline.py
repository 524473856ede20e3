"""The pipeline run's contract: the ``steps`` block of its ``summary.json`` (step name -> its
run folder, relative to the pipeline's), written and read here, and the time each step took
(:class:`StepTimes`, for the report)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mbs.runs.summary import Fields, Record, SummaryError, load_summary

STAGE = "pipeline"


def steps_block(root: str | os.PathLike, steps: Mapping[str, str | os.PathLike]) -> dict[str, str]:
    """The ``steps`` block: each step's run folder relative to the pipeline's folder ``root``.

    Raises:
        ValueError: A step's folder is not inside ``root``.
    """
    return {name: str(Path(p).relative_to(root)) for name, p in steps.items()}


def pipeline_steps(run_dir: str | os.PathLike) -> dict[str, Path]:
    """``{step name: its run folder}`` of a pipeline run, in step order.

    Raises:
        SummaryError: No ``summary.json``, another stage's, or a ``steps`` entry that is not a
            string (names the file and the field).
    """
    f = load_summary(run_dir, STAGE)
    steps = f.mapping("steps")
    for name, rel in steps.items():
        if not isinstance(rel, str):
            raise SummaryError(f"{f.where}: field 'steps.{name}': expected a string, got {rel!r}")
    return {name: Path(run_dir) / rel for name, rel in steps.items()}


@dataclass(frozen=True)
class StepTimes(Record):
    """``step_seconds`` of a pipeline's summary: wall-clock seconds per step, in step order
    (empty: a single stage's run, or not recorded).

    Attributes:
        seconds: ``{step name: seconds}``.
    """

    seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def from_fields(cls, f: Fields) -> StepTimes:
        """The step times of the summary ``f`` (of any stage).

        Raises:
            SummaryError: ``step_seconds`` is not an object of numbers (names the file and the field).
        """
        return cls(f.tree("step_seconds", 1, float))
