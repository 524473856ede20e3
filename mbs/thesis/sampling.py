"""The thesis's sampler (:class:`Sampler`): draws the evaluation and re-calibration rollouts of a
named policy into a shard, skipping what a resumed run holds (the only part of :mod:`mbs.thesis`
that calls a backend)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mbs.calibration.sampling import Group, Policy, RolloutWriter, draw
from mbs.llm import NON_ARGS, close_all

#: The backend node (without its label) whose checkpoint is in memory, shared by every sampler of
#: the process: one checkpoint in memory at a time, loaded once for all the calls that use it.
_resident: dict[str, Any] = {}


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
        (a backend config node) and flush the grading. The backend stays loaded for the next call
        on the same checkpoint (the label aside); a call on another checkpoint closes it first (one
        checkpoint in memory at a time), and so does :func:`release`.

        Raises:
            mbs.llm.BackendError: The backend failed after its retries (finished work is kept).
        """
        if self.done(name, groups, k):
            return
        args = {key: value for key, value in backend.items() if key not in NON_ARGS}
        if args != _resident:  # another checkpoint: free the one in memory first
            close_all()
            _resident.clear()
            _resident.update(args)
        draw(Policy(name=name, source="live", backend=backend), groups, k, self.writer, self.cache_dir,
             temperature=self.temperature, top_p=self.top_p, seed=int(seed), desc=name)
        self.writer.flush(wait=True)


def release() -> None:
    """Close the sampler's backend (before training, which needs the memory, and at the end)."""
    close_all()
    _resident.clear()
