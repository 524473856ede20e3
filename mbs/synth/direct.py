"""The direct-prompting baseline: ask the teacher for variations of each hard seed.

Run: ``mbs-synthesize method=direct calibration_dir=CAL hydra.run.dir=DIR``.

For each hard seed the generator teacher writes ``direct.n_variants`` variations
(``direct_variant_v1``, one sample each, shown the seed and its answer). Each is parsed and
checked like an MBS candidate (tagged format, self-contained, answer verifies against its
own solution) and calibrated against the target policy exactly as MBS's synthetic problems
are: qualified = 0 < pass rate < 1 and >= 1 complete correct response within L. Same outputs
and accounting as MBS: one root :class:`~mbs.records.TreeNode` per seed holding the variants,
``problems.*.jsonl`` (data source ``mbs/math/<origin>-direct``), ``rollouts.*.jsonl`` and the
same summary keys (``seeds_with_trace`` is ``None``: there is no trace stage).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Any

from omegaconf import DictConfig

from mbs.io import RunDir
from mbs.prompts import user_messages
from mbs.records import Problem, TreeNode
from mbs.synth.candidate import KEPT, Status
from mbs.synth.engine import Task, generate
from mbs.synth.grower import SeedTree, SynthBase
from mbs.synth.inputs import load_seeds
from mbs.synth.judge import judge_summary
from mbs.synth.problems import clip, reason_kind
from mbs.synth.run import RunState, run_method, setup_summary
from mbs.synth.store import root_id
from mbs.synth.summary import base_summary

log = logging.getLogger(__name__)


#: Order of the funnel in summaries and figures.
FUNNEL = ("hard_seeds", "variants_proposed", "variants_valid", "synthetic_problems", "qualified_problems", "seeds_qualified")


class Direct(SynthBase):
    """The baseline's per-seed procedure (a coroutine per seed, batched like MBS)."""

    method = "direct"

    def __init__(self, cfg: DictConfig):
        super().__init__(cfg, cfg.direct)

    def grow(self, seed: Problem) -> Task:
        """Variations of one seed, checked and calibrated against the target.

        Returns:
            ``([root node], qualified problems)``.
        """
        root = TreeNode(node_id=root_id(seed.id), seed_id=seed.id, depth=0,
                        problem=dataclasses.replace(seed, metadata=dict(seed.metadata)), answer=seed.ground_truth)
        tree = SeedTree(seed, root)
        d = self.cfg.direct
        messages = user_messages(d.templates.variant, problem=clip(seed.prompt, self.max_chars), answer=seed.ground_truth or "")
        comps = (yield from generate(self.gen, [self.gen.request(messages, 0, int(d.n_variants))], tree.tally))[0]
        variants = [self.candidate(tree, f"{seed.id}/d{c.sample_index}", "direct", c, [seed.id], node_id=root.node_id) for c in comps]
        yield from self.check(variants)
        for v in variants:
            if v["status"] == Status.VALID:
                v["status"] = Status.KEPT
        root.variants = variants
        problems = yield from self.final(tree, [v for v in variants if v["status"] == Status.KEPT])
        root.status = "synthesized" if any(v["status"] in ("qualified", "unqualified") for v in variants) else "exhausted"
        if root.status == "exhausted":
            c = Counter(reason_kind(v.get("reason")) for v in variants)
            root.reject_reason = "no valid variation: " + ", ".join(f"{n} {k}" for k, n in sorted(c.items()))
        root.problem.metadata["direct"] = {"teacher_tokens": tree.tally.teacher_tokens, "teacher_samples": tree.tally.teacher_samples}
        return [root], problems


def summarize(cfg: DictConfig, state: RunState, grower: Direct) -> dict[str, Any]:
    """The baseline's summary: the contract keys, funnel, rejections, tokens, judges, backends."""
    variants = [v for n in state.nodes for v in n.variants]
    teacher_tokens = sum(n.problem.metadata.get("direct", {}).get("teacher_tokens", 0) for n in state.nodes)
    s = base_summary("direct", state.seeds, state.nodes, state.qualified, state.rollouts, teacher_tokens)
    f = {
        "hard_seeds": len(state.seeds),
        "variants_proposed": len(variants),
        "variants_valid": sum(1 for v in variants if v["status"] != Status.REJECTED),
        "synthetic_problems": sum(1 for v in variants if v["status"] in KEPT),
        "qualified_problems": len(state.qualified),
        "seeds_qualified": s["seeds_qualified"],
    }
    rej = Counter(f"direct/{reason_kind(v.get('reason'))}" for v in variants if v["status"] in (Status.REJECTED, Status.UNQUALIFIED))
    s.update(
        seeds_with_trace=None,
        funnel=f,
        funnel_order=list(FUNNEL),
        rejections=dict(sorted(rej.items())),
        judges=judge_summary(variants, grower.judges),
        n_variants=int(cfg.direct.n_variants),
        **setup_summary(cfg, grower, state),
        counts={
            "hard_seeds": len(state.seeds),
            "seeds_resumed": state.resumed,
            "variants": len(variants),
            "qualified_problems": len(state.qualified),
            "rollouts": len(state.rollouts),
        },
    )
    return s


def run(cfg: DictConfig, out: RunDir) -> dict[str, Any]:
    """Prompt the teacher for variations of every hard seed of ``cfg.calibration_dir``.

    Args:
        cfg: The composed ``synthesize`` config (``method=direct``).
        out: The run directory.

    Returns:
        The summary (same keys as MBS's); the stage writes it to ``summary.json``.

    Raises:
        ValueError, FileNotFoundError: Bad ``calibration_dir``, teacher pool or student set.
        mbs.llm.BackendError: A backend failed after its retries (finished seeds are written).
    """
    seeds = load_seeds(cfg)
    grower = Direct(cfg)
    log.info("direct: %d hard seeds, %d variations each from %s", len(seeds), int(cfg.direct.n_variants), grower.gen.name)
    state = run_method(cfg, out, seeds, grower)
    return summarize(cfg, state, grower)
