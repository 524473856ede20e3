"""Verifiers with a known cost, for the grading pool's time limits (``pkg.mod:fn`` paths).

The response is the number of seconds to spend; the Grade is 1.0 when the time was spent.
"""

from __future__ import annotations

import time

from mbs.verify import Grade


def sleeping(response: str, ground_truth: str) -> Grade:
    """Wait ``float(response)`` seconds of wall-clock time using no CPU (blocked, like I/O)."""
    time.sleep(float(response))
    return Grade(1.0, response, "slept")


def spinning(response: str, ground_truth: str) -> Grade:
    """Use ``float(response)`` seconds of CPU time (a busy loop, like a long sympy call)."""
    end = time.process_time() + float(response)
    while time.process_time() < end:
        pass
    return Grade(1.0, response, "spun")
