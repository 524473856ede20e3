"""The figures of each stage's run directory: :data:`BY_STAGE`, with real imports.

A stage's figure function is ``fn(run_dir, out_dir, formats, width) -> {"written": [...],
"skipped": {...}}`` (optionally ``"tables"`` and ``"html"``). Synthesis methods name their
figures in their own spec (:class:`mbs.synth.methods.MethodSpec`), so :data:`BY_STAGE` holds
the other stages; :func:`mbs.report.render` reads both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mbs.figures.calibration import calibration_figures
from mbs.figures.evaluation import evaluation_figures
from mbs.figures.export import export_tables
from mbs.figures.forecast import train_figures
from mbs.figures.thesis import thesis_figures
from mbs.registry import Registry

#: ``fn(run_dir, out_dir, formats, width) -> {"written": [...], "skipped": {...}, ...}``.
FigureFn = Callable[..., dict[str, Any]]

#: summary ``stage`` -> the function drawing its figures (synthesis: the method's spec).
BY_STAGE: Registry[FigureFn] = Registry("figure set")
BY_STAGE.add("calibrate", calibration_figures)
BY_STAGE.add("evaluate", evaluation_figures)
BY_STAGE.add("export", export_tables)
BY_STAGE.add("train", train_figures)
BY_STAGE.add("thesis", thesis_figures)
