"""The run skeleton both MagicBeanStalk and the direct baseline use: grow every unfinished
seed (:func:`run_method`), writing each seed's records as it finishes, and the summary keys
they share (:func:`setup_summary`)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from mbs.calibration.sampling import RolloutWriter
from mbs.io import RunDir
from mbs.llm.meter import BackendMeter
from mbs.records import Problem, Rollout, TreeNode
from mbs.runs.synthesis import target_block
from mbs.synth.engine import Engine, run_tasks
from mbs.synth.grower import SynthBase
from mbs.synth.inputs import seed_provenance
from mbs.synth.settings import SynthSettings
from mbs.synth.store import SeedStore, read_rollouts
from mbs.verify.pool import GradingPool

log = logging.getLogger(__name__)


def setup_summary(settings: SynthSettings, grower: Any, state: Any) -> dict[str, Any]:
    """The summary keys MagicBeanStalk and direct synthesis share: thresholds, the student
    set and target (with :func:`seed_provenance`), the teacher pool, the generator, the
    engine and the backend counters of ``state``."""
    return {
        "thresholds": dict(settings.thresholds_record),
        "students": [p.name for p in grower.students],
        "target": target_block(grower.target.name, grower.target.budget, int(settings.thresholds.N)),
        "seeds_from": seed_provenance(settings.inputs, grower.target),
        "teachers": [t.name for t in grower.pool],
        "generator": grower.gen.name,
        "engine": state.engine,
        "backends": state.backends,
    }


@dataclass
class RunState:
    """What a finished synthesis run hands to its summary.

    Attributes:
        seeds: The hard seeds of this run.
        nodes: Every tree node of every finished seed (resumed ones included).
        qualified: The qualified problems.
        rollouts: Every student rollout in the run directory.
        resumed: Seeds finished by an earlier run of the same directory.
        engine: Counters of the batched execution (rounds, requests, rollouts saved).
        backends: Per-backend calls and tokens of this process (:class:`BackendMeter`).
    """

    seeds: list[Problem]
    nodes: list[TreeNode]
    qualified: list[Problem]
    rollouts: list[Rollout]
    resumed: int
    engine: dict[str, int]
    backends: dict[str, dict[str, Any]]


def run_method(settings: SynthSettings, out: RunDir, seeds: list[Problem], grower: SynthBase) -> RunState:
    """Grow every unfinished seed with ``grower``, writing each seed's records as it finishes.

    Raises:
        mbs.llm.BackendError: A backend failed after its retries (finished seeds are written,
            and every sample drawn is in the LLM cache).
    """
    store = SeedStore(out)
    todo = [s for s in seeds if s.id not in store.finished]
    resumed = len(seeds) - len(todo)
    if resumed:
        log.info("resuming: %d of %d seeds already finished", resumed, len(seeds))
    meter = BackendMeter(grower.roles(), settings.cache_dir)
    shard = out.shard("rollouts", Rollout)
    done = read_rollouts(out)

    def on_done(i: int, result: tuple[list[TreeNode], list[Problem]]) -> None:
        nodes, problems = result
        store.write(nodes, problems)
        log.info("seed %s: %s, %d qualified problem(s)", todo[i].id, nodes[0].status, len(problems))

    t0 = time.perf_counter()
    with GradingPool.from_config(settings.verifier) as pool, shard:
        writer = RolloutWriter(pool, shard, done)
        engine = Engine(settings.sampling, pool, writer)
        try:
            run_tasks([grower.grow(s) for s in todo], engine, on_done)
        finally:
            writer.flush(wait=True)
            store.close()
    out.timings["grow"] = time.perf_counter() - t0
    ids = {s.id for s in seeds}
    return RunState(
        seeds=seeds,
        nodes=[n for n in store.nodes if n.seed_id in ids],
        qualified=[p for p in store.qualified if p.metadata.get("seed_id") in ids],
        rollouts=list(done.values()),
        resumed=resumed,
        engine=dict(engine.stats),
        backends=meter.report(),
    )
