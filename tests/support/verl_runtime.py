"""Running verl's own code on the CPU in ``.venv-verl`` (the tests under ``tests/verl_checks``).

verl 0.9.1 pins ``transformers>=5.5.3,<5.11``, so it lives in its own virtual environment
(``.ci/verl_env.sh`` builds it: mbs with its ``train`` extra, torch's CPU build, gguf). The
tests run in the main environment and call verl through that interpreter as subprocesses
(``tests/verl_checks/scripts/*.py``, with this checkout first on ``PYTHONPATH``). Without
``.venv-verl`` they skip, naming the script; with ``MBS_REQUIRE_VERL=1`` (set by ``.ci/run``)
they fail instead, so CI never passes without running them.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from support.side_env import side_python

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-verl"
SCRIPTS = REPO / "tests" / "verl_checks" / "scripts"


def verl_python() -> Path:
    """``.venv-verl/bin/python``; skips (or fails under ``MBS_REQUIRE_VERL=1``) when it is missing."""
    return side_python(".venv-verl", "verl's environment", ".ci/verl_env.sh", 2, "MBS_REQUIRE_VERL")


def run_script(name: str, request: dict[str, Any], tmp_path: Path, timeout: float = 600, env: dict[str, str] | None = None) -> dict:
    """Run ``tests/verl_checks/scripts/<name>`` in ``.venv-verl`` with ``request`` (as a JSON file); its last stdout line as JSON.

    The subprocess starts in ``tmp_path`` (never the repository root, so ``mbs`` comes from
    ``PYTHONPATH``: this checkout) with verl's and Hugging Face's caches there and no network.

    Raises:
        AssertionError: The script exited with an error (its output is in the message).
    """
    python = verl_python()
    req = tmp_path / f"{name}.request.json"
    req.write_text(json.dumps(request))
    full_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_DATASETS_CACHE": str(tmp_path / "hf" / "datasets"),
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        **(env or {}),
    }
    res = subprocess.run([str(python), str(SCRIPTS / name), str(req)], cwd=tmp_path, env=full_env,
                         capture_output=True, text=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"{name} exited with {res.returncode}\n--- stdout\n{res.stdout[-4000:]}\n--- stderr\n{res.stderr[-6000:]}"
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"{name} printed no JSON\n--- stdout\n{res.stdout[-4000:]}\n--- stderr\n{res.stderr[-4000:]}"
    return json.loads(lines[-1])


def run_mbs(tool: str, overrides: list[str], tmp_path: Path, out: str, timeout: float = 600) -> Path:
    """Run an mbs console script (``mbs-export``, ``mbs-train``) of ``.venv-verl``: mbs beside verl,
    as ``pip install 'mbs[train]'`` installs it; outputs and caches under ``tmp_path``.

    Returns:
        The run folder (``tmp_path / out``).

    Raises:
        AssertionError: The tool exited with an error (its output is in the message).
    """
    exe = verl_python().parent / tool
    args = [str(exe), f"paths.root={tmp_path}", f"paths.cache_dir={tmp_path / 'cache'}", f"out_dir={tmp_path / out}",
            f"hydra.run.dir={tmp_path / 'hydra' / out}", *overrides]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "HF_HOME": str(tmp_path / "hf"), "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"{tool} exited with {res.returncode}\n--- stdout\n{res.stdout[-3000:]}\n--- stderr\n{res.stderr[-6000:]}"
    return tmp_path / out
