"""A FakeBackend that takes its time, so a SLURM test can kill or preempt a task midway.

SLURM jobs unpickle their task in a fresh process: the tests put ``tests/`` on ``PYTHONPATH``
in the job environment, and configs name this class ``slurm.slow_backend.SlowFakeBackend``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from support.fakes import FakeBackend

from mbs.llm.base import ChatRequest, Completion


class SlowFakeBackend(FakeBackend):
    """:class:`support.fakes.FakeBackend` that sleeps ``delay_s`` seconds per request.

    ``preferred_batch`` is 1, so the cache hands over one request at a time and every
    request's rollouts are graded and written before the next one starts.

    Args:
        delay_s: Seconds slept before answering each request.
        **kwargs: :class:`~support.fakes.FakeBackend` arguments.
    """

    preferred_batch = 1

    def __init__(self, delay_s: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.delay_s = float(delay_s)

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            time.sleep(self.delay_s)
            out.extend(super().generate([req]))
        return out
