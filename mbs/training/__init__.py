"""Library code for training runs (used by :mod:`mbs.stages.train`): :mod:`mbs.training.forecast`
predicts the zero-variance ("trap") share of GRPO groups from calibrated pass rates and checks it
against what the trainer logged."""
