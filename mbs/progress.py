"""Progress of a job made of named steps (``mbs-pipeline``): a bar over the steps, and the
seconds each step took.

The bar counts steps (``[3/7] synthesize_mbs``) and shows the elapsed time; the ETA is on
the bar each stage draws below it while a step runs (rollouts drawn, answers graded), since the
steps differ too much in cost for a mean step time to predict the rest (on 2 shared cores the
recorded study alone took 31 min).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence

from tqdm.auto import tqdm

log = logging.getLogger(__name__)


class StepProgress:
    """A progress bar over the named steps of a job, timing each step.

    Args:
        names: The steps that will run, in order (a step not in it may still be timed).
        desc: The bar's label (the command's name).
        disable: Hide the bar (``None``: tqdm's default, shown on any stream).

    Attributes:
        seconds: Wall-clock seconds each finished step took, in the order they ran.
    """

    def __init__(self, names: Sequence[str], desc: str = "mbs", disable: bool | None = False):
        self.names = list(names)
        self.seconds: dict[str, float] = {}
        self._bar = tqdm(
            total=len(self.names), desc=desc, unit="step", dynamic_ncols=True, position=0, leave=True,
            disable=disable, bar_format="{desc}: {n_fmt}/{total_fmt} steps |{bar}| {elapsed} elapsed{postfix}",
        )

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time the step ``name`` (the bar names it while it runs and advances when it ends).

        The time is recorded even if the step raises, so a failed run still says how far it got.
        """
        index = self.names.index(name) + 1 if name in self.names else len(self.seconds) + 1
        self._bar.set_postfix_str(f"[{index}/{len(self.names)}] {name}")
        log.info("step %d/%d: %s", index, len(self.names), name)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = time.perf_counter() - start
            self._bar.update(1)
            log.info("step %s took %s", name, format_seconds(self.seconds[name]))

    def close(self) -> None:
        """End the bar (it stays on screen with the total time)."""
        self._bar.set_postfix_str("done")
        self._bar.close()

    def table(self) -> str:
        """The time of each step and the total, one line each (for the console)."""
        total = sum(self.seconds.values()) or 1.0
        width = max([len(n) for n in self.seconds] + [5])
        lines = [f"  {name:<{width}} {format_seconds(s):>9}  {100 * s / total:5.1f}%" for name, s in self.seconds.items()]
        lines.append(f"  {'total':<{width}} {format_seconds(sum(self.seconds.values())):>9}")
        return "\n".join(lines)


def format_seconds(seconds: float) -> str:
    """``"8.2 s"``, ``"3 min 05 s"`` or ``"1 h 51 min"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
