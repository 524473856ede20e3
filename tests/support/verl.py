"""verl's own config and dataset code, read from a ``pip install --no-deps`` copy, never imported.

verl's package ``__init__`` imports torch and tensordict, which the CPU test environment does
not have. The wheel ships its Hydra YAML (including the flattened generated trainer config,
``verl/trainer/config/_generated_ppo_trainer.yaml``) and its source, so tests install the pinned
wheel without dependencies into ``<repo>/.cache/verl-nodeps-<version>`` once, locate the package
folder with ``importlib.machinery.PathFinder.find_spec`` (which runs no package code) and read
files from it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

#: The verl release whose config mbs-train's overrides were checked against.
VERL_VERSION = "0.9.1"

REPO = Path(__file__).resolve().parents[2]


def verl_package_dir(version: str = VERL_VERSION) -> Path:
    """The ``verl/`` folder of the pinned wheel, installed without dependencies on first use.

    Raises:
        RuntimeError: pip could not install the wheel (its output is in the message).
    """
    target = REPO / ".cache" / f"verl-nodeps-{version}"
    spec = importlib.machinery.PathFinder.find_spec("verl", [str(target)])
    if spec is None:
        res = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), f"verl=={version}"],
            capture_output=True, text=True, timeout=1800, check=False,
        )
        if res.returncode != 0:
            raise RuntimeError(f"pip install --no-deps verl=={version} failed:\n{res.stdout}\n{res.stderr}")
        importlib.invalidate_caches()  # the finder of `target` was cached before the install
        spec = importlib.machinery.PathFinder.find_spec("verl", [str(target)])
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"verl package not found under {target}")
    return Path(next(iter(spec.submodule_search_locations)))


def trainer_config(verl_dir: Path) -> DictConfig:
    """verl's flattened PPO trainer config (every key ``main_ppo`` accepts without ``+``)."""
    return OmegaConf.load(verl_dir / "trainer" / "config" / "_generated_ppo_trainer.yaml")


_ABSENT = object()


def lookup(cfg: Any, dotted: str) -> Any:
    """The raw value at ``dotted`` in a config (``???`` stays a string), or ``_ABSENT``."""
    node = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def override_problems(pairs: Iterable[tuple[str, Any]], cfg: DictConfig) -> list[str]:
    """Why each ``(key, value)`` override would not fit verl's config (empty when all fit).

    A key must exist; a value must have the default's kind (bool, number, string, list, dict)
    unless the default is null, missing (``???``) or an interpolation.
    """
    problems = []
    for key, value in pairs:
        if key.startswith("+"):  # Hydra's "add": the key may be new, its parent must exist
            parent = key[1:].rsplit(".", 1)[0]
            if lookup(cfg, parent) is _ABSENT:
                problems.append(f"{key}: verl's trainer config has no {parent}")
            continue
        default = lookup(cfg, key)
        if default is _ABSENT:
            problems.append(f"{key}: not a key of verl's trainer config")
            continue
        if default is None or value is None or (isinstance(default, str) and (default == "???" or "${" in default)):
            continue
        if _kind(default) != _kind(value):
            problems.append(f"{key}={value!r}: verl's default {default!r} is a {_kind(default)}, got a {_kind(value)}")
    return problems


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "dict"
    return type(v).__name__


def source(verl_dir: Path, relative: str) -> str:
    """Text of one verl source file (e.g. ``utils/dataset/rl_dataset.py``)."""
    return (verl_dir / relative).read_text(encoding="utf-8")
