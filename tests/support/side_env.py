"""The interpreter of a side environment built by a ``.ci/*_env.sh`` script (``.venv-verl``,
``.venv-vllm``): tests that need it skip without it, or fail when CI requires it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def side_python(venv: str, what: str, script: str, minutes: int, require: str) -> Path:
    """``<repo>/<venv>/bin/python``; skips when it is missing, or fails when ``$<require>`` is ``1``.

    Args:
        venv: The environment's folder under the repository (``.venv-verl``).
        what: What it holds, for the message (``verl's environment``).
        script: The script that builds it (``.ci/verl_env.sh``).
        minutes: About how long the build takes.
        require: The environment variable that makes a missing interpreter a failure.
    """
    python = REPO / venv / "bin" / "python"
    if not python.is_file():
        why = f"{python} not found: build {what} with {script} (about {minutes} minutes)"
        if os.environ.get(require) == "1":
            pytest.fail(f"{require}=1 but {why}")
        pytest.skip(why)
    return python
