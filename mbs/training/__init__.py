"""Training the calibrated policy on an export: provenance, policy resolution and the engines.

* :mod:`mbs.training.provenance`: which policy calibrated an export's rows (model file or name, L,
  N, sampling and chat-template settings), recorded by ``mbs-export`` in its ``summary.json``;
* :mod:`mbs.training.policy`: that policy merged with the user's ``train.*`` settings (a mismatch
  is refused unless ``train.override`` names it);
* :mod:`mbs.training.settings`: what ``mbs-train`` reads of its config, typed, built once at the
  stage boundary (the engines, the verl command, the TRL trainer, the policy and the launcher read
  these, never the config);
* :mod:`mbs.training.engines`: the engines by ``train.engine`` (verl, TRL), each
  ``fn(settings, out, policy, summary) -> counts``;
* :mod:`mbs.training.launch`: local and submitit launches, the row check of the parquet files;
* :mod:`mbs.training.verl_command`: the ``verl.trainer.main_ppo`` command line;
* :mod:`mbs.training.trl_engine`: TRL's ``GRPOTrainer`` in this process (CPU or GPUs);
* :mod:`mbs.training.forecast`: the zero-std group share a GRPO run should see, from calibration;
* :mod:`mbs.training.prior`: its Beta prior of pass rates, fitted on the population the rows were
  chosen from (or truncated to the selection), with the fit's uncertainty;
* :mod:`mbs.training.trap`: that forecast for a run's training rows, beside what each step logged.
"""
