"""Run directories as typed records: one reader per run kind, each module writing and reading its
stage's ``summary.json`` contract (the keys a later stage or a figure relies on).

* :mod:`mbs.runs.policy`: :class:`~mbs.runs.policy.CalibratedPolicy`, the calibrated policy
  (engine, weights and their hash, sampler order, N, L, sampling parameters, template
  arguments) that travels from calibration to export to training, with each training engine's
  known differences as data (:data:`~mbs.runs.policy.TRAINERS`);
* :mod:`mbs.runs.calibration`: :class:`~mbs.runs.calibration.CalibrationSummary` (the head later
  stages read) and :class:`~mbs.runs.calibration.CalibrationResults` (bands, counts, intervals,
  reclassification: what the figures and the report draw);
* :mod:`mbs.runs.synthesis`: :class:`~mbs.runs.synthesis.SynthesisSummary` and
  :class:`~mbs.runs.synthesis.SynthesisResults` (MBS and direct: yield, funnel, rejections);
* :mod:`mbs.runs.goose`: :class:`~mbs.runs.goose.GooseSummary` (Golden Goose's findings);
* :mod:`mbs.runs.evaluation`: :class:`~mbs.runs.evaluation.EvaluationSummary`;
* :mod:`mbs.runs.export`: :class:`~mbs.runs.export.ExportSummary` and the ``policy`` block
  (:func:`~mbs.runs.export.policy_block`, :class:`~mbs.runs.export.ExportProvenance`);
* :mod:`mbs.runs.training`: :class:`~mbs.runs.training.TrainingSummary` and
  :class:`~mbs.runs.training.TrainingOutcome` (the report's account of a training run);
* :mod:`mbs.runs.thesis`: :class:`~mbs.runs.thesis.ThesisResults` (curves, final accuracies,
  zero-std shares, band migration and the contrasts: what the thesis figures and tables draw);
* :mod:`mbs.runs.pipeline`: the pipeline's steps and :class:`~mbs.runs.pipeline.StepTimes`;
* :mod:`mbs.runs.summary`: reading fields typed, a bad one named by file and field
  (:class:`~mbs.runs.summary.SummaryError`); :class:`~mbs.runs.summary.Record`, the base of the
  records above (``read`` a run folder, or ``of`` a summary already loaded),
  :class:`~mbs.runs.summary.RunKind` and :class:`~mbs.runs.summary.Headline`.

Summaries written by older code read with defaults for the keys they lack.
"""
