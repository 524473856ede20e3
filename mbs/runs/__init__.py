"""Run directories as typed records: one reader per run kind, each module writing and reading its
stage's ``summary.json`` contract (the keys a later stage or a figure relies on).

* :mod:`mbs.runs.policy`: :class:`~mbs.runs.policy.CalibratedPolicy`, the calibrated policy
  (engine, weights and their hash, sampler order, N, L, sampling parameters, template
  arguments) that travels from calibration to export to training, with each training engine's
  known differences as data (:data:`~mbs.runs.policy.TRAINERS`);
* :mod:`mbs.runs.calibration`: :class:`~mbs.runs.calibration.CalibrationSummary`;
* :mod:`mbs.runs.synthesis`: :class:`~mbs.runs.synthesis.SynthesisSummary`;
* :mod:`mbs.runs.export`: :class:`~mbs.runs.export.ExportSummary` and the ``policy`` block
  (:func:`~mbs.runs.export.policy_block`, :class:`~mbs.runs.export.ExportProvenance`);
* :mod:`mbs.runs.training`: :class:`~mbs.runs.training.TrainingSummary`;
* :mod:`mbs.runs.summary`: reading fields typed, a bad one named by file and field
  (:class:`~mbs.runs.summary.SummaryError`).

Summaries written by older code read with defaults for the keys they lack.
"""
