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

**Cost-matched** (``direct.cost_match_run=<an MBS run directory>``): each seed gets the work MBS
spent on it in that run (:class:`mbs.synth.engine.Tally`; ``direct.cost_match_on``): by default
every token, teacher prompt and completion tokens (Stage 1 traces and judges included) and the
students' rollout tokens (effectivity tests, leaf and parent filters, qualification), or the
teacher completion tokens alone. Variations are drawn, checked and calibrated in rounds of
``direct.n_variants`` (sample indices go on: round r draws samples r*n_variants ..
(r+1)*n_variants-1) until the seed's cost reaches MBS's, or ``direct.cost_match_max_variants``
were drawn. The summary's ``cost_match`` reports, for each cost (teacher prompt and completion
tokens, student rollouts and tokens, all tokens), both runs' totals and their ratio.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Any

from mbs.io import RunDir, read_records
from mbs.prompts import user_messages
from mbs.records import KEPT, NodeStatus, Problem, Status, TreeNode, reason_kind
from mbs.synth.engine import Tally, Task, generate
from mbs.synth.grower import SeedTree, SynthBase
from mbs.synth.inputs import load_seeds
from mbs.synth.judge import judge_summary
from mbs.synth.problems import clip
from mbs.synth.run import RunState, run_method, setup_summary
from mbs.synth.settings import SynthSettings
from mbs.synth.store import root_id
from mbs.synth.summary import base_summary
from mbs.verify.gold import shown_answer
from mbs.verify.sources import verifier_for

log = logging.getLogger(__name__)


#: Order of the funnel in summaries and figures.
FUNNEL = ("hard_seeds", "variants_proposed", "variants_valid", "synthetic_problems", "qualified_problems", "seeds_qualified")


class Direct(SynthBase):
    """The baseline's per-seed procedure (a coroutine per seed, batched like MBS).

    Args:
        settings: The run's settings (``settings.direct`` its own).
        seeds: The hard seeds (the cost-matched run's budgets are read for them).

    Raises:
        ValueError, FileNotFoundError: See :class:`SynthBase` and :func:`mbs_spending`.
    """

    method = "direct"

    def __init__(self, settings: SynthSettings, seeds: list[Problem] | None = None):
        super().__init__(settings, settings.direct.grower)
        self.d = d = settings.direct
        self.cost_on = d.cost_match_on
        # what MBS spent on each seed (read once: the budgets here, the comparison in the summary)
        self.mbs_spent = mbs_spending(d.cost_match_run, seeds or [], self.cost_on) if d.cost_match_run else None
        self.budgets = None if self.mbs_spent is None else {sid: int(m[self.cost_on]) for sid, m in self.mbs_spent.items()}

    def grow(self, seed: Problem) -> Task:
        """Variations of one seed, checked and calibrated against the target.

        Returns:
            ``([root node], qualified problems)``.
        """
        root = TreeNode(node_id=root_id(seed.id), seed_id=seed.id, depth=0,
                        problem=dataclasses.replace(seed, metadata=dict(seed.metadata)), answer=seed.ground_truth)
        tree = SeedTree(seed, root)
        d = self.d
        messages = user_messages(d.variant_template, problem=clip(seed.prompt, self.max_chars),
                                 answer=shown_answer(seed.ground_truth, verifier_for(seed, self.verifier.path)))
        step = d.n_variants
        variants, problems = yield from self.round(tree, root, messages, 0, step)
        if self.budgets is not None:  # cost-matched: go on until the seed has spent what MBS spent on it
            cap = d.cost_match_max_variants
            while self.spent(tree.tally) < self.budgets[seed.id] and len(variants) < cap:
                more, got = yield from self.round(tree, root, messages, len(variants), min(step, cap - len(variants)))
                variants, problems = variants + more, problems + got
        root.variants = variants
        root.status = NodeStatus.SYNTHESIZED if any(v["status"] in (Status.QUALIFIED, Status.UNQUALIFIED) for v in variants) else NodeStatus.EXHAUSTED
        if root.status == NodeStatus.EXHAUSTED:
            c = Counter(reason_kind(v.get("reason")) for v in variants)
            root.reject_reason = "no valid variation: " + ", ".join(f"{n} {k}" for k, n in sorted(c.items()))
        root.problem.metadata["direct"] = tree.tally.as_dict()
        if self.budgets is not None:
            root.problem.metadata["direct"]["cost_match_tokens"] = self.budgets[seed.id]
            root.problem.metadata["direct"]["cost_match_on"] = self.cost_on
        return [root], problems

    def round(self, tree: SeedTree, root: TreeNode, messages: list, first: int, count: int) -> Task:
        """Variations ``first .. first+count-1``: drawn, checked and (the valid ones) calibrated
        against the target.

        Returns:
            ``(variants, qualified problems)``.
        """
        comps = (yield from generate(self.gen, [self.gen.request(messages, first, count)], tree.tally))[0]
        variants = [self.candidate(tree, f"{tree.seed.id}/d{c.sample_index}", "direct", c, [tree.seed.id], node_id=root.node_id)
                    for c in comps]
        yield from self.check(tree, variants)
        for v in variants:
            if v["status"] == Status.VALID:
                v["status"] = Status.KEPT
        problems = yield from self.final(tree, [v for v in variants if v["status"] == Status.KEPT])
        return variants, problems

    def spent(self, tally: Tally) -> int:
        """What a seed has spent in the unit of ``direct.cost_match_on``."""
        return tally.all_tokens if self.cost_on == "all_tokens" else tally.teacher_tokens


#: The costs ``direct.cost_match_on`` can match (keys of a root's ``metadata.mbs``).
COST_UNITS = ("all_tokens", "teacher_tokens")

#: Every cost the cost-matched summary compares.
COSTS = ("teacher_prompt_tokens", "teacher_tokens", "student_rollouts", "student_tokens", "all_tokens")


def mbs_spending(run_dir: str, seeds: list[Problem], on: str = "all_tokens") -> dict[str, dict[str, Any]]:
    """What an MBS run spent on each seed: its root's ``metadata.mbs`` tally (:data:`COSTS`),
    checked to hold ``on``.

    Args:
        run_dir: A finished MBS run directory.
        seeds: The hard seeds to match.
        on: ``all_tokens`` (teacher prompt and completion tokens and student rollout tokens) or
            ``teacher_tokens`` (teacher completion tokens).

    Raises:
        FileNotFoundError: ``run_dir`` has no ``trees.*.jsonl``.
        ValueError: ``on`` is not a cost unit; a seed has no finished tree in ``run_dir``, or its
            tree was written before that cost was recorded (names the run and the seed).
    """
    if on not in COST_UNITS:
        raise ValueError(f"direct.cost_match_on={on!r}: must be one of {', '.join(COST_UNITS)}")
    roots = {n.seed_id: n for n in read_records(run_dir, "trees", TreeNode) if n.depth == 0}
    if not roots:
        raise FileNotFoundError(f"direct.cost_match_run={run_dir}: no trees.*.jsonl records (is it a finished MBS run?)")
    out = {}
    for s in seeds:
        if s.id not in roots or "mbs" not in roots[s.id].problem.metadata:
            raise ValueError(f"direct.cost_match_run={run_dir}: hard seed {s.id!r} has no MBS tree there "
                             "(run MBS on the same calibration_dir, shard and seeds_limit first)")
        spent = roots[s.id].problem.metadata["mbs"]
        if on not in spent:
            raise ValueError(f"direct.cost_match_run={run_dir}: the tree of hard seed {s.id!r} records no {on} "
                             "(written by an older mbs): rerun MBS there, or set direct.cost_match_on=teacher_tokens")
        out[s.id] = dict(spent)
    return out


def summarize(settings: SynthSettings, state: RunState, grower: Direct) -> dict[str, Any]:
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
        n_variants=settings.direct.n_variants,
        cost_match=_cost_match(state, grower, teacher_tokens),
        **setup_summary(settings, grower, state),
        counts={
            "hard_seeds": len(state.seeds),
            "seeds_resumed": state.resumed,
            "variants": len(variants),
            "qualified_problems": len(state.qualified),
            "rollouts": len(state.rollouts),
        },
    )
    return s


def _cost_match(state: RunState, grower: Direct, teacher_tokens: int) -> dict[str, Any] | None:
    """``None``, or the matched run and unit, seeds short of the match, and for every cost
    (:data:`COSTS`) MBS's total over the same seeds, this run's, and their ratio."""
    if grower.mbs_spent is None:
        return None
    on = grower.cost_on
    meta = [n.problem.metadata.get("direct", {}) for n in state.nodes if n.depth == 0]
    mbs_spent = [grower.mbs_spent.get(n.seed_id, {}) for n in state.nodes if n.depth == 0]
    costs = {}
    for key in COSTS:
        a, b = sum(int(m.get(key, 0)) for m in mbs_spent), sum(int(m.get(key, 0)) for m in meta)
        costs[key] = {"mbs": a, "direct": b, "ratio": round(b / a, 3) if a else None}
    return {
        "run": str(grower.d.cost_match_run),
        "on": on,
        "max_variants": grower.d.cost_match_max_variants,
        "mbs_teacher_tokens": costs["teacher_tokens"]["mbs"],
        "teacher_tokens": teacher_tokens,
        "ratio": costs[on]["ratio"],
        "costs": costs,
        "seeds_short": sum(1 for m in meta if m.get(on, 0) < m.get("cost_match_tokens", 0)),
        "variants": sum(int(m.get("teacher_samples", 0)) for m in meta),
    }


def run(settings: SynthSettings, out: RunDir) -> dict[str, Any]:
    """Prompt the teacher for variations of every hard seed of ``calibration_dir``.

    Args:
        settings: The run's settings (``method=direct``).
        out: The run directory.

    Returns:
        The summary (same keys as MBS's); the stage writes it to ``summary.json``.

    Raises:
        ValueError, FileNotFoundError: Bad ``calibration_dir``, teacher pool or student set, or a
            ``direct.cost_match_run`` that lacks a seed.
        mbs.llm.BackendError: A backend failed after its retries (finished seeds are written).
    """
    seeds = load_seeds(settings.inputs)
    grower = Direct(settings, seeds)
    log.info("direct: %d hard seeds, %s from %s", len(seeds),
             f"{settings.direct.n_variants} variations each" if grower.budgets is None else
             f"variations until each seed spent the teacher tokens of {settings.direct.cost_match_run}", grower.gen.name)
    state = run_method(settings, out, seeds, grower)
    return summarize(settings, state, grower)
