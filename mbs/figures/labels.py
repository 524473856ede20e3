"""Labels of run directories for comparisons: the config values that differ between runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from omegaconf import OmegaConf

#: Config keys that differ between runs without describing the experiment.
_IGNORED_PREFIXES = ("out_dir", "paths.", "run_dir", "hydra", "calibration_dir", "figures.run_dirs", "shard.", "log_level")


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    if isinstance(node, list):
        return {prefix[:-1]: tuple(node) if all(not isinstance(x, (dict, list)) for x in node) else str(node)}
    return {prefix[:-1]: node}


def run_labels(run_dirs: Sequence[Path]) -> list[str]:
    """One label per run: the config values that differ between the runs (``key=value, ...``).

    Falls back to the folder name when the configs are missing or identical.
    """
    flats = []
    for rd in run_dirs:
        path = Path(rd) / "config.yaml"
        flats.append(_flatten(OmegaConf.to_container(OmegaConf.load(path), resolve=False)) if path.is_file() else {})
    keys = sorted(set.intersection(*(set(f) for f in flats))) if flats else []  # keys every run has
    differing = [
        k for k in keys
        if not k.startswith(_IGNORED_PREFIXES) and len({repr(f.get(k)) for f in flats}) > 1
    ]
    labels = []
    for rd, flat in zip(run_dirs, flats):
        parts = [f"{k}={_fmt(flat.get(k))}" for k in differing]
        labels.append(", ".join(parts) if parts else Path(rd).name)
    if len(set(labels)) < len(labels):  # identical configs: disambiguate by folder
        labels = [f"{lab} ({Path(rd).name})" for lab, rd in zip(labels, run_dirs)]
    return labels


def _fmt(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)
