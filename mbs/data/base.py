"""The loader registry and the errors and report every loader shares.

Loaders (``mbs.data``'s own, :mod:`mbs.data.reasoning_gym`, or a user's) register here with
:func:`register_loader`; :func:`mbs.data.load_problems` dispatches on ``data.loader``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mbs.errors import UserError
from mbs.records import Problem
from mbs.registry import Registry


class DataError(UserError, ValueError):
    """A bad input record; the message names file, line/row and field."""


@dataclass
class LoadReport:
    """What a loader read and skipped (written into the stage manifest)."""

    loaded: int = 0
    skipped: int = 0
    unverifiable: int = 0
    errors: list[str] = field(default_factory=list)
    by_answer_type: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "loaded": self.loaded,
            "skipped": self.skipped,
            "unverifiable_dropped": self.unverifiable,
            "by_answer_type": dict(sorted(self.by_answer_type.items())),
            "errors": self.errors[:50],
        }


#: A loader: ``fn(data_cfg, report) -> list[Problem]``.
Loader = Callable[[Any, LoadReport], list[Problem]]

#: ``data.loader`` name -> loader.
LOADERS: Registry[Loader] = Registry("data loader")


def register_loader(name: str) -> Callable[[Loader], Loader]:
    """Decorator adding a loader ``fn(data_cfg, report) -> list[Problem]`` to :data:`LOADERS`."""
    return LOADERS.register(name)
