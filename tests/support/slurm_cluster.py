"""Whether the local SLURM cluster (``slurm/local_cluster.sh start``) accepts jobs."""

from __future__ import annotations

import shutil
import subprocess


def slurm_ready() -> str | None:
    """``None`` when a SLURM node accepts jobs, else why not."""
    missing = [tool for tool in ("srun", "sbatch", "sinfo") if not shutil.which(tool)]
    if missing:
        return f"no SLURM client ({'/'.join(missing)}) on PATH: run `slurm/local_cluster.sh start` (as root)"
    try:
        res = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"sinfo failed ({err}): run `slurm/local_cluster.sh start`"
    states = res.stdout.split()
    if res.returncode != 0 or not any(s.rstrip("*") in ("idle", "mixed", "allocated", "completing") for s in states):
        return f"no SLURM node accepts jobs (sinfo: {res.stdout.strip() or res.stderr.strip()}): run `slurm/local_cluster.sh start`"
    return None
