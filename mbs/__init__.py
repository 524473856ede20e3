"""mbs: manufacture calibrated RLVR training data and prove it helps.

Four jobs, each a plain ``run(cfg)`` behind a thin Hydra entry (``mbs.cli``):
calibrate (pass rates and the zero-advantage trap), synthesize (MagicBeanStalk, Golden
Goose, direct teacher prompting), export/train/evaluate (verl GRPO), and figures.
"""

__version__ = "0.1.0"
