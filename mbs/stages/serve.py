"""mbs-serve: start, stop or show an inference service (``vllm serve`` as a job, its URL published).

Run: ``mbs-serve hydra/launcher=slurm_gpu service.model=Qwen/Qwen3-8B hydra.run.dir=runs/serve/qwen3``
(then ``mbs-serve service.action=stop hydra.run.dir=runs/serve/qwen3`` when the array is done).
The service itself (the job, its state files, the server's idle watch) is :mod:`mbs.service`;
this entry reads the ``serve`` config and calls it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from mbs.service import STATE, ServiceError, read_state, spec_from_cfg, start, stop


def run(cfg: DictConfig, launcher: Mapping[str, Any] | None = None) -> Path:
    """mbs-serve: ``service.action`` = start, stop or status for the service in ``cfg.out_dir``.

    Args:
        cfg: The ``serve`` config.
        launcher: The ``hydra.launcher`` node the job is submitted with (the CLI passes the
            composed one; ``None``: a local background process).

    Returns:
        The service's run directory.

    Raises:
        mbs.service.ServiceError: See :func:`mbs.service.start` and :func:`mbs.service.stop`;
            an unknown action.
    """
    logging.getLogger("mbs").setLevel(cfg.log_level)
    run_dir = Path(cfg.out_dir)
    action = str(cfg.service.action)
    if action == "start":
        state = start(spec_from_cfg(cfg.service), run_dir, launcher, local_gpus=int(cfg.service.local_gpus))
        print(f"service ready at {state['base_url']} ({run_dir / STATE})")
        print("point a stage at it with: " + " ".join(state["overrides"]))
    elif action == "stop":
        state = stop(run_dir, float(cfg.service.stop_timeout_s))
        print(f"service {state.get('state', 'not found')}: {state.get('reason', '')}")
    elif action == "status":
        print(read_state(run_dir) or f"no service in {run_dir}")
    else:
        raise ServiceError(f"service.action={action!r}: valid values are start, stop, status")
    return run_dir
