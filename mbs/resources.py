"""How many CPU cores this process may use (not how many the machine has).

On a shared SLURM node ``os.cpu_count()`` reports every core of the node while the job was
given a few; sizing thread pools from it oversubscribes the allocation, and llama.cpp threads
that spin-wait on each other collapse when cores are shared (issue 22: 2 threads on 2 busy
cores ran at 6-44 tokens/s, 1 thread at 118-146). :func:`usable_cpus` takes the smallest of
the CPU affinity mask (what ``taskset``, cgroups cpusets and SLURM's task binding allow),
``SLURM_CPUS_PER_TASK`` and a cgroup v2 CPU quota (containers), and
:func:`split_cpus` shares them between generation and the grading pool.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


def _cgroup_quota(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> int | None:
    """Cores allowed by a cgroup v2 ``cpu.max`` quota (rounded up), or ``None`` when unlimited."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        return max(1, -(-int(quota) // int(period)))
    except (ValueError, ZeroDivisionError):
        return None


def usable_cpus(environ: dict[str, str] | None = None) -> int:
    """Cores this process may run on (>= 1).

    The minimum of ``os.sched_getaffinity(0)`` (``os.cpu_count()`` where the platform has no
    affinity), ``SLURM_CPUS_PER_TASK`` when set, and the cgroup v2 CPU quota when set.

    Args:
        environ: Environment to read SLURM variables from (default ``os.environ``).
    """
    env = os.environ if environ is None else environ
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    slurm = env.get("SLURM_CPUS_PER_TASK")
    if slurm and slurm.strip().isdigit() and int(slurm) > 0:
        n = min(n, int(slurm))
    quota = _cgroup_quota()
    if quota is not None:
        n = min(n, quota)
    return max(1, n)


#: How llama.cpp's OpenMP threads wait at its barriers (libgomp reads these once, when it loads):
#: asleep (``passive``) after 1,000 spins (about 10 microseconds). Measured on 2 cores, llama.cpp's
#: own loop at 16 sequences (2026-12-03, tokens/s): quiet, 157 passive with no spin, 198 with 1,000
#: spins, 202 with libgomp's default (300,000 spins, about 3 ms); beside one busy process, 105,
#: 104 and 9.7. A step has some 600 barriers, so sleeping at once costs a wake-up each; spinning
#: long starves whatever shares the cores (the grading pool, other jobs).
OPENMP_WAIT = {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "1000"}


def set_openmp_wait(environ: dict[str, str] | None = None) -> None:
    """Set :data:`OPENMP_WAIT` in the environment where not set already (a user's values stay).

    Call before ``llama_cpp`` is first imported in the process (libgomp reads them then); a later
    call changes nothing for a libgomp already loaded.

    Args:
        environ: Environment to update (default ``os.environ``).
    """
    env = os.environ if environ is None else environ
    for key, value in OPENMP_WAIT.items():
        env.setdefault(key, value)


def split_cpus(grading_workers: int | None, cpus: int | None = None, generating: bool = True) -> tuple[int, int]:
    """Share the usable cores between the LLM engine and the grading pool.

    Generation gets every core (grading is bursty: a worker sleeps until a completion arrives
    and grades it in milliseconds); the grading pool gets ``grading_workers`` when set, else
    one worker per two cores (at least one), or every core when nothing generates beside it
    (``generating=False``: a calibration of recorded policies only, whose 13,824 CHAMP answers
    took 3 min 04 s on one worker of 2 cores). Engine threads wait passively
    (``OMP_WAIT_POLICY=passive``), so a busy grading worker takes a core only while it grades.

    Args:
        grading_workers: ``verifier.workers`` (``None``: automatic).
        cpus: Usable cores (default :func:`usable_cpus`).
        generating: Whether an LLM engine runs beside the pool in this process.

    Returns:
        ``(engine_cores, grading_workers)``.
    """
    cpus = usable_cpus() if cpus is None else max(1, int(cpus))
    if grading_workers is None:
        workers = max(1, cpus // 2) if generating else cpus
    else:
        workers = int(grading_workers)
    if workers > cpus:
        log.warning("verifier.workers=%d exceeds the %d usable cores; using %d", workers, cpus, cpus)
        workers = cpus
    return cpus, workers
