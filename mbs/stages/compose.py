"""The stage configs as Hydra composes them: where ``conf/`` is (:func:`config_dir`, the one place
its path is computed) and one node of another stage's config (:func:`compose_node`).

A stage that runs other stages' steps (``mbs-pipeline``, ``mbs-thesis``) takes their config nodes
from Hydra's compose API, with the same defaults lists and groups as their own entry points, never
by reading the YAML files itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf


def config_dir() -> str:
    """Absolute path of the ``conf/`` folder (the repository root of an editable install).

    Raises:
        FileNotFoundError: mbs is installed without its ``conf/`` folder (use ``pip install -e .``).
    """
    path = Path(__file__).resolve().parent.parent.parent / "conf"
    if not (path / "base.yaml").is_file():
        raise FileNotFoundError(
            f"mbs configs not found at {path}: install mbs from a checkout with `pip install -e .`"
        )
    return str(path)


def compose_node(stage: str, key: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The ``key`` node of stage ``stage``'s config as Hydra composes it (``conf/<stage>.yaml``, its
    defaults list and ``overrides``), unresolved: interpolations resolve in the caller's config.

    Inside an entry point (``@hydra.main``, whose search path is :func:`config_dir`) Hydra is
    initialised already and composes there; elsewhere (tests, library callers) this initialises it
    on :func:`config_dir` for the one call and leaves it as it was.

    Args:
        stage: The stage's primary config (``train``, ``evaluate``, ...).
        key: The node to return (``train``, ``eval``, ``backend``, ...).
        overrides: Hydra overrides of the composition (``backend=transformers``, ``~eval``).

    Returns:
        The node as a plain container.

    Raises:
        hydra.errors.HydraException: An unknown stage, group or option.
        TypeError: The node is not a mapping.
    """
    if GlobalHydra.instance().is_initialized():
        cfg = compose(config_name=stage, overrides=list(overrides))
    else:
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            cfg = compose(config_name=stage, overrides=list(overrides))
    node = OmegaConf.to_container(cfg[key], resolve=False)
    if not isinstance(node, dict):
        raise TypeError(f"{stage}.{key} is not a mapping: {node!r}")
    return {str(k): v for k, v in node.items()}


def backend_node(name: str) -> dict[str, Any]:
    """The ``backend`` group's option ``name`` as ``mbs-evaluate`` composes it (``backend=<name>``),
    unresolved: the backend a stage's step samples checkpoints with (``transformers``)."""
    return compose_node("evaluate", "backend", [f"backend={name}"])
