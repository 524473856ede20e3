"""The thesis's sampler (:class:`Sampler`): draws the evaluation and re-calibration rollouts of a
named policy into a shard, skipping what a resumed run holds (the only part of :mod:`mbs.thesis`
that calls a backend)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mbs.calibration.sampling import Group, Policy, RolloutWriter, draw
from mbs.llm import close_all


class Sampler:
    """Draws k samples per group for a named policy into a shard, skipping what is done.

    Args:
        writer: Grades and writes the rollouts (``writer.done``: those already in the shard).
        cache_dir: The LLM cache folder.
        temperature: Sampling temperature.
        top_p: Nucleus sampling mass, in (0, 1].
    """

    def __init__(self, writer: RolloutWriter, cache_dir: str, temperature: float, top_p: float):
        self.writer, self.cache_dir, self.temperature, self.top_p = writer, cache_dir, temperature, top_p

    def done(self, name: str, groups: Sequence[Group], k: int) -> bool:
        """Whether policy ``name`` has all ``k`` samples of every group of ``groups``."""
        return all((g.id, name, g.budget, i) in self.writer.done for g in groups for i in range(k))

    def __call__(self, name: str, backend: dict[str, Any], groups: list[Group], k: int, seed: int) -> None:
        """Draw what is missing of ``k`` samples per group for policy ``name`` on ``backend``
        (a backend config node), flush the grading, and close the backend (one checkpoint in
        memory at a time).

        Raises:
            mbs.llm.BackendError: The backend failed after its retries (finished work is kept).
        """
        if self.done(name, groups, k):
            return
        draw(Policy(name=name, source="live", backend=backend), groups, k, self.writer, self.cache_dir,
             temperature=self.temperature, top_p=self.top_p, seed=int(seed), desc=name)
        self.writer.flush(wait=True)
        close_all()  # one checkpoint in memory at a time
