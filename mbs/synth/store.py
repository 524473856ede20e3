"""Outputs and resume of a synthesis run.

:class:`SeedStore`: ``trees.<shard>.jsonl`` (every :class:`~mbs.records.TreeNode` of a seed,
its root written last) and ``problems.<shard>.jsonl`` (the qualified problems) are appended
as each seed finishes. A seed is finished when its root node is in the trees shard; a rerun
skips finished seeds and drops the partial records of unfinished ones, and the LLM cache
serves every teacher and student sample drawn before the kill, so nothing is paid for twice.
"""

from __future__ import annotations

import logging

from mbs.io import RunDir
from mbs.records import Problem, Rollout, TreeNode

log = logging.getLogger(__name__)


def root_id(seed_id: str) -> str:
    """Node id of a seed's root (``<seed id>/0``); children append ``.k``."""
    return f"{seed_id}/0"


class SeedStore:
    """The trees and problems shards of a synthesis run, written per finished seed.

    Args:
        out: The run directory.

    On construction, records of seeds whose root node is missing (a run killed while
    writing them) are dropped from both shards.
    """

    def __init__(self, out: RunDir):
        self.trees = out.shard("trees", TreeNode)
        self.problems = out.shard("problems", Problem)
        nodes = self.trees.read()
        problems = self.problems.read()
        roots = {n.seed_id for n in nodes if n.node_id == root_id(n.seed_id)}
        self.nodes = [n for n in nodes if n.seed_id in roots]
        self.qualified = [p for p in problems if p.metadata.get("seed_id") in roots]
        if len(self.nodes) < len(nodes):
            self.trees.rewrite(self.nodes)
            log.info("%s: dropped the records of unfinished seeds (%d kept)", self.trees.path.name, len(self.nodes))
        if len(self.qualified) < len(problems):
            self.problems.rewrite(self.qualified)
            log.info("%s: dropped the records of unfinished seeds (%d kept)", self.problems.path.name, len(self.qualified))
        self.finished = roots

    def write(self, nodes: list[TreeNode], problems: list[Problem]) -> None:
        """Append one finished seed: its problems, then its nodes with the root last."""
        root = [n for n in nodes if n.depth == 0]
        rest = [n for n in nodes if n.depth != 0]
        if len(root) != 1:
            raise ValueError(f"a seed tree needs exactly one root node, got {len(root)}")
        self.problems.append(problems)
        self.trees.append(rest + root)
        self.nodes.extend(rest + root)
        self.qualified.extend(problems)
        self.finished.add(root[0].seed_id)

    def close(self) -> None:
        self.trees.close()
        self.problems.close()


def read_rollouts(out: RunDir) -> dict[tuple, Rollout]:
    """Rollouts already graded in this run directory, by key (resume)."""
    done: dict[tuple, Rollout] = {}
    for r in out.shard("rollouts", Rollout).read():
        done.setdefault(r.key, r)
    return done
