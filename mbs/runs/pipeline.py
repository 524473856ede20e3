"""The pipeline run's contract: the ``steps`` block of its ``summary.json`` (step name -> its
run folder, relative to the pipeline's), written and read here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from mbs.runs.summary import SummaryError, load_summary

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
