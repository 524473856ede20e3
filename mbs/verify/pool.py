"""Grade in worker processes with a hard wall-clock timeout per grading.

sympy can run for hours on some answers (``5^{5^{5^{5^5}}}`` is evaluated as an integer)
and math-verify's own ``signal.alarm`` timeouts neither work off the main thread nor
interrupt long C-level arithmetic. :class:`GradingPool` therefore grades in ``pebble``
worker processes, with two limits enforced from outside the grading code:

* a CPU-time limit of ``timeout_s`` per grading, set with ``setitimer(ITIMER_PROF)``
  before each grading: the kernel ends the worker (``SIGPROF``, default action) even
  inside one long C call. CPU time does not depend on how loaded the machine is, so the
  same answer gets the same verdict in a quiet single run and in a busy SLURM array;
* a hard wall-clock limit of ``wall_timeout_s`` (default ``8 x timeout_s``), enforced by
  the parent, for a grading that blocks without using CPU (and on systems without
  ``ITIMER_PROF``, where it is the only limit).

Either way the worker is replaced and the grading resolves to an ungraded Grade that says
which limit fired: ``Grade(None, None, "timeout after 5.0s")`` (the CPU-time limit) or
``Grade(None, None, "wall-clock timeout after 40.0s")``. The caller is never killed or stalled; a
hung grading costs about ``timeout_s`` of one worker on an idle machine.

Workers are forked from a ``forkserver`` that has already imported sympy and
math-verify (``set_forkserver_preload``), so a replacement worker starts in milliseconds,
and forking is safe even when the parent runs threads (llama.cpp, asyncio, verl). As with
any ``forkserver``/``spawn`` pool, a script that creates a pool at import time needs the
``if __name__ == "__main__":`` guard.

Example::

    with GradingPool(workers=2, timeout_s=5.0) as pool:
        grades = pool.map([(response, gold, "math") for response, gold in pairs])
"""

from __future__ import annotations

import concurrent.futures
import itertools
import multiprocessing
import signal
import time
from collections.abc import Iterable, Sequence
from multiprocessing.sharedctypes import RawArray
from typing import TYPE_CHECKING

from pebble import ProcessExpired, ProcessPool

from mbs.resources import split_cpus
from mbs.verify import Grade, get_verifier, grade

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["PRELOAD", "GradingPool", "GradingPoolError"]

#: Modules the forkserver imports once, so each (re)started worker inherits them: ``mbs.verify``
#: imports every answer type's grader, and the warm-up grades their samples.
PRELOAD = ["mbs.verify", "math_verify", "mbs.verify.warmup"]

#: Largest number of gradings sent to a worker as one task by :meth:`GradingPool.map`.
MAX_CHUNK = 32
#: Progress slots shared with workers (a chunk writes slot ``chunk_id % _SLOTS``).
_SLOTS = 4096

Item = tuple[str, str, str]


class GradingPoolError(RuntimeError):
    """The pool could not run a grading (its workers and forkserver were killed from outside,
    e.g. by SLURM's SIGTERM on scancel or preemption, or it was closed). The grading was not
    done; it is not a "could not grade" result and must not be stored as one."""


# Worker side: where the running chunk records which of its items it is grading.
_progress = None


#: Whether the kernel can limit a worker's CPU time per grading (POSIX ``ITIMER_PROF``).
CPU_LIMIT = hasattr(signal, "setitimer") and hasattr(signal, "SIGPROF")
# Worker side: CPU seconds one grading may use (0: no CPU limit).
_cpu_limit_s = 0.0


def _init_worker(progress, cpu_limit_s: float = 0.0) -> None:
    """Worker initializer: keep the progress array and CPU limit; let SIGTERM and SIGPROF kill.

    pebble installs a Python-level SIGTERM handler, which cannot run while sympy is
    inside one long C call (a huge integer power); the default action ends the worker
    immediately, so a timed-out worker is replaced without pebble's 3 s SIGKILL grace.
    ``SIGPROF``'s default action likewise ends the worker when a grading has used its CPU
    time (:func:`_limited_grade`).
    """
    global _progress, _cpu_limit_s
    _progress = progress
    _cpu_limit_s = cpu_limit_s if CPU_LIMIT else 0.0
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if CPU_LIMIT:
        signal.signal(signal.SIGPROF, signal.SIG_DFL)


def _limited_grade(item: Item) -> Grade:
    """Grade one item with the worker's CPU-time limit armed (the kernel sends
    ``SIGPROF`` after ``_cpu_limit_s`` CPU seconds, which ends the worker)."""
    if not _cpu_limit_s:
        return grade(*item)
    signal.setitimer(signal.ITIMER_PROF, _cpu_limit_s)
    try:
        return grade(*item)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


def _grade_task(response: str, ground_truth: str, verifier: str) -> Grade:
    """Worker entry point for one grading (module level: pickles by reference)."""
    return _limited_grade((response, ground_truth, verifier))


def _grade_chunk(chunk_id: int, items: list[Item], budget_s: float) -> list[Grade]:
    """Worker entry point for a chunk: grade items in order until ``budget_s`` is spent.

    Returns the Grades of a prefix of ``items`` (at least one); before each grading the
    chunk id and item index go to the shared progress slot, so that the parent knows
    which item was running if the chunk is killed.
    """
    slot = 2 * (chunk_id % _SLOTS)
    start = time.monotonic()
    out: list[Grade] = []
    for i, item in enumerate(items):
        if i and time.monotonic() - start > budget_s:
            break
        if _progress is not None:
            _progress[slot], _progress[slot + 1] = chunk_id, i
        out.append(_limited_grade(item))
    return out


#: Default wall-clock limit per grading, as a multiple of the CPU-time limit.
WALL_FACTOR = 8


def _cpu_exhausted(exc: BaseException) -> bool:
    """Whether a worker was ended by its CPU-time limit (``SIGPROF``)."""
    return CPU_LIMIT and isinstance(exc, ProcessExpired) and exc.exitcode == -signal.SIGPROF


def _mp_context() -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():  # e.g. Windows
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # takes effect if the forkserver is not yet running
    return ctx


class GradingPool:
    """Grades in worker processes with a hard wall-clock timeout per grading.

    Timeout semantics: every grading may use ``timeout_s`` seconds of CPU time and at
    least ``wall_timeout_s`` seconds of wall-clock time on a worker (queueing time is
    not counted); a grading that exceeds either resolves to a timeout Grade; nothing
    else is ever lost or reported as a timeout. Where the kernel cannot limit CPU time
    (no ``ITIMER_PROF``), ``timeout_s`` is the wall-clock limit.

    * :meth:`submit` sends one grading as one pebble task with ``timeout=timeout_s``.
    * :meth:`map` sends small chunks (up to :data:`MAX_CHUNK` items) to cut per-task IPC
      cost. A chunk stops starting new items once it has run ``budget_s``
      (``min(0.05, timeout_s / 20)`` seconds) and returns; items it did not reach are sent
      again. So each item starts at most ``budget_s`` after its chunk, and the chunk's
      pebble timeout is ``wall_timeout_s + budget_s``. When a chunk is killed, a shared-memory
      progress slot tells which item was running: that item (which has run for at least
      ``timeout_s``) resolves to a timeout Grade; the others are sent again. Without a
      readable slot every item of the chunk is retried as its own task.

    Args:
        workers: Number of worker processes. ``0`` grades in the calling process with no
            timeout (for debugging: breakpoints and tracebacks work, and a hanging input
            hangs the caller).
        timeout_s: CPU-time limit per grading, in seconds (the wall-clock limit where
            CPU time cannot be limited).
        wall_timeout_s: Hard wall-clock limit per grading, in seconds; ``None`` means
            ``8 x timeout_s`` (room for a heavily loaded machine: it is a backstop for gradings
            that block without using CPU, not the grading limit), or ``timeout_s`` without a
            CPU limit.

    Attributes:
        worker_restarts: Workers replaced so far because a task of theirs hit its CPU or
            wall-clock limit or their process died (each hang costs exactly one).

    Raises:
        ValueError: If ``workers < 0``, ``timeout_s <= 0`` or ``wall_timeout_s < timeout_s``.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0, wall_timeout_s: float | None = None):
        if workers < 0:
            raise ValueError(f"workers must be >= 0, got {workers}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if wall_timeout_s is not None and wall_timeout_s < timeout_s:
            raise ValueError(f"wall_timeout_s ({wall_timeout_s}) must be >= timeout_s ({timeout_s})")
        self.workers = workers
        self.timeout_s = float(timeout_s)
        default_wall = WALL_FACTOR * self.timeout_s if CPU_LIMIT else self.timeout_s
        self.wall_timeout_s = float(wall_timeout_s) if wall_timeout_s is not None else default_wall
        self.budget_s = min(0.05, self.timeout_s / 20)
        self.worker_restarts = 0
        self._closed = False
        self._chunk_ids = itertools.count(1)
        self._pool: ProcessPool | None = None
        if workers:
            self._progress = RawArray("q", 2 * _SLOTS)
            self._pool = ProcessPool(
                max_workers=workers,
                initializer=_init_worker,
                initargs=(self._progress, self.timeout_s),
                context=_mp_context(),
            )

    @classmethod
    def from_config(cls, verifier_cfg, generating: bool = True) -> GradingPool:
        """A pool from the ``verifier`` config group (``workers``, ``timeout_s``,
        ``wall_timeout_s``; see ``conf/verifier/default.yaml``). ``workers: null`` sizes the
        pool from the cores this process may use (:func:`mbs.resources.split_cpus`: half of
        them beside an LLM engine, all of them when ``generating`` is False), and more workers
        than usable cores are cut to that many."""
        wall = verifier_cfg.get("wall_timeout_s")
        workers = verifier_cfg.workers
        return cls(
            workers=split_cpus(None if workers is None else int(workers), generating=generating)[1],
            timeout_s=float(verifier_cfg.timeout_s),
            wall_timeout_s=None if wall is None else float(wall),
        )

    def submit(self, response: str, ground_truth: str, verifier: str = "math") -> concurrent.futures.Future:
        """Schedule one grading.

        Args:
            response: Model response.
            ground_truth: Gold answer.
            verifier: Registry name, ``"auto"``, or ``"pkg.module:function"``.

        Returns:
            A future resolving to a :class:`~mbs.verify.Grade`. A timeout resolves to
            ``Grade(None, None, "timeout after {timeout_s}s")``; a grading whose worker dies
            is retried once on a fresh worker, and dying again resolves to
            ``Grade(None, None, "error: worker died ...")``. When the pool itself fails (its
            workers and forkserver killed from outside, e.g. SLURM's SIGTERM on ``scancel``
            or preemption, or the pool closed) the future raises :class:`GradingPoolError`:
            the grading was not done and must not be stored as "could not grade".

        Raises:
            UnknownVerifierError: If ``verifier`` names no verifier (checked here, in the
                caller, so configuration errors are not hidden as ungradable items).
            RuntimeError: If the pool is closed.
        """
        return self._start([(response, ground_truth, verifier)], chunk=1)[0]

    def submit_many(self, items: Sequence[Sequence[str]]) -> list[concurrent.futures.Future]:
        """Schedule several gradings, sent to the workers as chunks of up to :data:`MAX_CHUNK`.

        One task per chunk instead of one per grading: the process round trip (about 4 ms on
        2 cores) costs ~80x a typical grading (0.05 ms for ``\\boxed{56}`` against ``56``).
        Limits, retries and failures are per grading, as :meth:`submit` describes.

        Args:
            items: ``(response, ground_truth, verifier)`` triples (a pair uses ``"math"``).

        Returns:
            One future per item, in order (see :meth:`submit`).

        Raises:
            UnknownVerifierError: As :meth:`submit`.
            RuntimeError: If the pool is closed.
        """
        triples = [(item[0], item[1], item[2] if len(item) > 2 else "math") for item in items]
        return self._start(triples, max(1, min(MAX_CHUNK, len(triples)))) if triples else []

    def map(self, items: Iterable[Sequence[str]]) -> list[Grade]:
        """Grade many items, in chunks; results keep the input order.

        Args:
            items: ``(response, ground_truth, verifier)`` triples (a pair uses ``"math"``).

        Returns:
            One :class:`~mbs.verify.Grade` per item; timeouts and crashed gradings are Grades too.

        Raises:
            UnknownVerifierError: If an item names no verifier.
            RuntimeError: If the pool is closed.
            GradingPoolError: The pool itself failed while grading.
        """
        triples = [(item[0], item[1], item[2] if len(item) > 2 else "math") for item in items]
        # Small chunks, several per worker, so the last ones do not leave workers idle.
        chunk = max(1, min(MAX_CHUNK, len(triples) // (8 * max(1, self.workers))))
        return [f.result() for f in self._start(triples, chunk)]

    def _start(self, items: list[Item], chunk: int) -> list[concurrent.futures.Future]:
        if self._closed:
            raise RuntimeError("GradingPool is closed")
        for verifier in {v for _, _, v in items}:
            if verifier != "auto":
                get_verifier(verifier)
        futures = [concurrent.futures.Future() for _ in items]
        if self._pool is None:
            for future, item in zip(futures, items):
                future.set_result(grade(*item))
            return futures
        pending = list(zip(items, futures))
        for i in range(0, len(pending), chunk):
            self._schedule(pending[i : i + chunk])
        return futures

    def _schedule(self, pending: list[tuple[Item, concurrent.futures.Future]], retried: bool = False) -> None:
        """Send items as one task (a single grading, or a chunk) and wire up the results.

        A single grading whose worker died is sent once more (``retried``): a worker killed
        from outside gets a second chance, a grading that kills its worker twice resolves to
        an "error: worker died" Grade.
        """
        try:
            if len(pending) == 1:
                task = self._pool.schedule(_grade_task, args=pending[0][0], timeout=self.wall_timeout_s)
                task.add_done_callback(lambda done: self._single_done(done, pending, retried))
                return
            chunk_id = next(self._chunk_ids)
            task = self._pool.schedule(
                _grade_chunk,
                args=(chunk_id, [item for item, _ in pending], self.budget_s),
                timeout=self.wall_timeout_s + self.budget_s,
            )
            task.add_done_callback(lambda done: self._chunk_done(done, chunk_id, pending))
        except Exception as exc:  # noqa: BLE001 - e.g. pool closed or broken while retrying
            for _, future in pending:
                future.set_exception(GradingPoolError(f"grading pool failed: {type(exc).__name__}: {exc}"[:300]))

    def _single_done(self, done: concurrent.futures.Future, pending: list, retried: bool) -> None:
        future = pending[0][1]
        try:
            future.set_result(done.result())
        except ProcessExpired as exc:
            self.worker_restarts += 1
            if retried or _cpu_exhausted(exc):
                future.set_result(self._failure(exc))
            else:
                self._schedule(pending, retried=True)
        except Exception as exc:  # noqa: BLE001 - timeouts become Grades, a broken pool an exception
            self.worker_restarts += isinstance(exc, TimeoutError)
            self._resolve_failure(future, exc)

    def _chunk_done(self, done: concurrent.futures.Future, chunk_id: int, pending: list) -> None:
        """Resolve a chunk's futures (runs in pebble's manager thread; must not block)."""
        try:
            grades = done.result()
        except (TimeoutError, ProcessExpired) as exc:
            self.worker_restarts += 1
            running = self._running_item(chunk_id)
            if running is None or (isinstance(exc, ProcessExpired) and not _cpu_exhausted(exc)):
                # unknown which item hung, or the worker died: each gets its own task
                for one in pending:
                    self._schedule([one])
                return
            pending[running][1].set_result(self._failure(exc))
            grades, rest = [], pending[:running] + pending[running + 1 :]
        except Exception as exc:  # noqa: BLE001 - a broken or closed pool
            for _, future in pending:
                self._resolve_failure(future, exc)
            return
        else:
            rest = pending[len(grades) :]
        for (_, future), result in zip(pending, grades):
            future.set_result(result)
        if rest:
            self._schedule(rest)

    def _running_item(self, chunk_id: int) -> int | None:
        """Index of the item a killed chunk was grading, from its progress slot."""
        slot = 2 * (chunk_id % _SLOTS)
        owner, index = self._progress[slot], self._progress[slot + 1]
        return index if owner == chunk_id and self._progress[slot] == chunk_id else None

    def _resolve_failure(self, future: concurrent.futures.Future, exc: BaseException) -> None:
        """A timeout resolves to a Grade; any other failure is the pool's, not the grading's."""
        if isinstance(exc, TimeoutError):
            future.set_result(self._failure(exc))
        else:
            future.set_exception(GradingPoolError(f"grading pool failed: {type(exc).__name__}: {exc}"[:300]))

    def _failure(self, exc: BaseException) -> Grade:
        if isinstance(exc, TimeoutError) and CPU_LIMIT:  # the parent's backstop, not the CPU limit
            return Grade(None, None, f"wall-clock timeout after {self.wall_timeout_s}s")
        if isinstance(exc, TimeoutError) or _cpu_exhausted(exc):
            return Grade(None, None, f"timeout after {self.timeout_s}s")
        if isinstance(exc, ProcessExpired):
            return Grade(None, None, f"error: worker died (exit code {exc.exitcode})")
        if isinstance(exc, concurrent.futures.CancelledError):
            return Grade(None, None, "error: cancelled (pool closed)")
        return Grade(None, None, f"error: {type(exc).__name__}: {exc}"[:300])

    def close(self, wait: bool = True) -> None:
        """Shut the workers down; the pool cannot be used afterwards.

        Args:
            wait: Finish the scheduled gradings first (bounded by their timeouts);
                ``False`` cancels pending ones, which resolve to an "error: cancelled" Grade.
        """
        self._closed = True
        if self._pool is None:
            return
        if wait:
            self._pool.close()
        else:
            self._pool.stop()
        self._pool.join()
        self._pool = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
