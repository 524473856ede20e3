"""Sizing thread pools from the cores this process may use."""

from __future__ import annotations

import os

import pytest

from mbs import resources
from mbs.resources import split_cpus, usable_cpus


@pytest.fixture
def four_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(resources, "_cgroup_quota", lambda: None)


def test_affinity_not_the_machine_count(four_cores, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cpus({}) == 4


def test_slurm_allocation_caps_the_cores(four_cores):
    assert usable_cpus({"SLURM_CPUS_PER_TASK": "2"}) == 2
    assert usable_cpus({"SLURM_CPUS_PER_TASK": "16"}) == 4  # never more than the mask allows
    assert usable_cpus({"SLURM_CPUS_PER_TASK": "garbage"}) == 4


def test_cgroup_quota_caps_the_cores(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    quota = tmp_path / "cpu.max"
    quota.write_text("150000 100000\n")
    assert resources._cgroup_quota(quota) == 2
    quota.write_text("max 100000\n")
    assert resources._cgroup_quota(quota) is None
    monkeypatch.setattr(resources, "_cgroup_quota", lambda: 3)
    assert usable_cpus({}) == 3


def test_grading_pool_share(caplog):
    assert split_cpus(None, cpus=2) == (2, 1)
    assert split_cpus(None, cpus=16) == (16, 8)
    assert split_cpus(None, cpus=2, generating=False) == (2, 2)  # nothing generates: every core grades
    assert split_cpus(1, cpus=2, generating=False) == (2, 1)  # a set verifier.workers is kept
    assert split_cpus(0, cpus=2) == (2, 0)  # in-process grading stays in-process
    assert split_cpus(8, cpus=2) == (2, 2) and "exceeds the 2 usable cores" in caplog.text


def test_llamacpp_engine_is_sized_from_usable_cores(monkeypatch):
    pytest.importorskip("llama_cpp")
    from mbs.llm import llamacpp

    monkeypatch.setattr(llamacpp, "usable_cpus", lambda: 4)
    b = llamacpp.LlamaCppBackend()
    assert (b.instances, b.n_threads) == (1, 4) and b.preferred_batch >= 1 << 20  # batched: every request at once
    b = llamacpp.LlamaCppBackend(instances=4, batch_samples=1)
    assert (b.instances, b.n_threads, b.preferred_batch) == (4, 1, 1 << 20)
    b = llamacpp.LlamaCppBackend(n_threads=2)
    assert (b.instances, b.n_threads) == (2, 2)
    with pytest.raises(ValueError, match="instances"):
        llamacpp.LlamaCppBackend(instances=0)
    with pytest.raises(ValueError, match=r"batch_samples \(-1\) must be 0..256"):
        llamacpp.LlamaCppBackend(batch_samples=-1)
    assert llamacpp.LlamaCppBackend(batch_samples=0).batch_samples == 1  # one at a time
    assert llamacpp.LlamaCppBackend().batch_samples == 16
    with pytest.raises(ValueError, match=r"prefix_cache_mib \(-1\) must be >= 0"):
        llamacpp.LlamaCppBackend(prefix_cache_mib=-1)


def test_openmp_wait_set_where_unset():
    env = {"OMP_WAIT_POLICY": "active"}  # a user's choice stays
    resources.set_openmp_wait(env)
    assert env == {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "1000"}
    env = {}
    resources.set_openmp_wait(env)
    assert env == {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "1000"}


def test_llamacpp_sets_openmp_wait_before_llama_cpp_loads():
    """libgomp reads the variables when llama_cpp is first imported: the backend sets them first."""
    pytest.importorskip("llama_cpp")
    import subprocess
    import sys

    code = (
        "import os, sys\n"
        "from mbs.llm.llamacpp import LlamaCppBackend\n"
        "assert 'llama_cpp' not in sys.modules\n"
        "LlamaCppBackend(batch_samples=1)._load()\n"
        "print(os.environ['OMP_WAIT_POLICY'], os.environ['GOMP_SPINCOUNT'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in resources.OPENMP_WAIT}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["passive", "1000"]
