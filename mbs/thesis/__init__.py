"""The thesis experiment's library (issue 28): the training sets, the sampler, the statistics, the
table and the run's summary.

Both source papers rest on one claim: a problem teaches a GRPO policy only when its rollouts
disagree (a group whose rewards are all equal has zero advantage everywhere: the zero-advantage
trap; seed paper, "Background"; Shao et al. 2024, DeepSeekMath §4.1), so data calibrated to the
policy and budget L trains better per step than data that is not. :mod:`mbs.stages.thesis` runs
the experiment; this package decides what it trains on and what its numbers are:

* :mod:`mbs.thesis.sets`: the held-out set and the three training sets of equal size
  (goldilocks, trapped, uncalibrated) and the arms trained on them;
* :mod:`mbs.thesis.sampling`: the sampler of evaluation and re-calibration rollouts (the only
  module here that calls a backend);
* :mod:`mbs.thesis.statistics`: avg@k with its intervals, the contrasts between arms (seeds and
  problems crossed, Holm-corrected), zero-std shares and band migration;
* :mod:`mbs.thesis.table`: the final accuracies and the contrasts as Markdown and LaTeX;
* :mod:`mbs.thesis.summary`: the run's ``summary.json`` from what the stage drew and trained.

Import from the modules; this file imports nothing, so each module's imports are its own.
"""
