"""MagicBeanStalk (MBS): grow hard seeds into calibrated problem families (seed paper, Stages 1-3).

Run: ``mbs-synthesize method=mbs calibration_dir=CAL hydra.run.dir=DIR`` (CAL: a ``mbs-calibrate``
run directory; its ``hard_seeds`` are the seeds, its ``calibrations`` give acc(S, p)).

For each hard seed (p, a*):

* **Stage 1** (:func:`mbs.synth.teacher.find_trace`): the first trace of T_1..T_M (N_t tries
  each, or a dataset's reference solution) whose final answer verifies against a*. None: the
  seed is discarded (root status ``no_trace``, reason recorded).
* **Stage 2** (:meth:`Beanstalk.decompose`): the teacher, given (p, tau, a*), writes at most K
  self-contained subproblems with solutions and answers (``mbs_decompose_v1``). Subproblems
  that do not parse, refer to "the original problem"/"above", lack an answer, or whose answer
  does not verify against their own solution are rejected, and so are subproblems that
  restate the parent (text too similar to it, or answer equal to a*; :mod:`mbs.synth.restate`).
  Effectivity test: the decomposition passes if for at least one live student S,
  acc_cond(S, p | the valid subproblems as worked examples) > acc(S, p), both over all N
  rollouts at S's budget, both unbiased under early stopping (:mod:`mbs.calibration.estimate`: a
  seed's acc is the calibration run's; a subproblem's is measured with all N). A failed
  decomposition is re-prompted: the first try and up to N_d retries, as
  in the paper (1 + N_d prompts at most, sample indices 0..N_d). Children recurse down to
  depth D. A node at depth D, or whose 1 + N_d decompositions all failed, is a leaf.
* **Stage 3** (:meth:`Beanstalk.synthesize`): each leaf gets N_l harder variants
  (``mbs_leaf_v1``); a variant the weakest student (the live student with the lowest mean
  pass rate in the calibration run, :mod:`mbs.synth.students`) solves above alpha_leaf is
  discarded. Each internal node whose every child kept a synthetic problem composes a new
  parent from one synthetic problem per child, shown the original parent and its children
  B(G_n) with their solutions and answers as the demonstration, and the new children with
  their verified solutions (``mbs_compose_v2``); a node with a child that kept nothing is not
  composed (never fewer children than the demonstration shows). A parent the weakest student
  solves above alpha_parent is discarded; up to N_c trials per node, until
  ``mbs.parents_per_node`` are kept; continuing up to the root.
* **Grounding** (optional, :mod:`mbs.synth.grounding`): every kept synthetic problem of the
  tree is rewritten on the seed's top-K_d unused documents.
* **Final calibration**: every kept synthetic problem against the target policy at its
  budget: qualified = 0 < pass rate < 1 and >= 1 complete correct response within L. The
  optional judge pool then reports on the qualified ones (:mod:`mbs.synth.judge`).

Outputs in the run directory: ``trees.*.jsonl`` (every :class:`~mbs.records.TreeNode`, root
last per seed), ``problems.*.jsonl`` (the qualified problems, data source
``mbs/math/<origin>-mbs``), ``rollouts.*.jsonl`` (every student rollout), ``figures/``.

Where each decision is recorded:

* root ``problem.metadata["mbs"]``: Stage-1 attempts (teacher, sample index, grade reason),
  the accepted teacher, teacher tokens and samples of the seed, grounding documents;
* ``TreeNode.effectivity`` (:class:`~mbs.records.Effectivity`): ``{"passed", "students" (of the deciding attempt: acc,
  acc_source, acc_cond, n, successes, passed), "attempts" (each: subproblems with status and
  reason, per-student results, reason), "leaf_reason"}``;
* ``TreeNode.variants`` (:class:`~mbs.records.Candidate`): every candidate (see :class:`mbs.synth.grower.SynthBase`) with its
  weakest-student filter, target calibration and judge verdicts;
* ``TreeNode.status`` (:class:`~mbs.records.NodeStatus`): ``no_trace``, ``synthesized`` (kept >= 1 synthetic problem) or
  ``exhausted`` (``reject_reason`` says why: no variant kept, parent trials exhausted, no
  synthetic children).

Every teacher prompt is free of alpha_leaf and alpha_parent, samples are seeded by index, so
a threshold sweep reuses every cached call the threshold does not affect, and an identical
rerun makes no backend call. A killed run resumes (see :mod:`mbs.synth.engine`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Any

from mbs.calibration.estimate import pass_rate_of
from mbs.calibration.sampling import Group, Policy, messages_for
from mbs.io import RunDir
from mbs.prompts import user_messages
from mbs.records import (
    KEPT,
    Candidate,
    EffectivityAttempt,
    NodeStatus,
    Problem,
    Status,
    StudentEffect,
    Subproblem,
    TreeNode,
    reason_kind,
)
from mbs.synth.engine import Calibrate, Gather, Tally, Task, Verify, generate, one
from mbs.synth.grounding import assign_documents, documents_block
from mbs.synth.grower import SeedTree, SynthBase, mark_verified
from mbs.synth.inputs import load_base_calibrations, load_seeds
from mbs.synth.judge import judge_summary
from mbs.synth.paths import path_details, yield_by_path
from mbs.synth.problems import above, clip, variant_type
from mbs.synth.restate import restatement, same_answer_reason
from mbs.synth.run import RunState, run_method, setup_summary
from mbs.synth.settings import SynthSettings
from mbs.synth.store import root_id
from mbs.synth.structured import StructureError, parse_items, self_reference
from mbs.synth.students import weakest_student
from mbs.synth.summary import base_summary, effectivity_summary, rejections
from mbs.synth.teacher import find_trace
from mbs.synth.traces import blueprint, trace_for_prompt
from mbs.verify.gold import answer_as_response, shown_answer
from mbs.verify.sources import data_source, origin_of, verifier_for

log = logging.getLogger(__name__)


#: Order of the stage funnel in summaries and figures.
FUNNEL = (
    "hard_seeds",
    "seeds_with_trace",
    "seeds_decomposed",
    "decomposition_attempts",
    "decompositions_passed",
    "subproblems_proposed",
    "subproblems_valid",
    "leaves",
    "leaf_variants_proposed",
    "leaf_variants_valid",
    "leaf_variants_kept",
    "composition_trials",
    "parents_valid",
    "parents_kept",
    "synthetic_problems",
    "qualified_problems",
    "seeds_qualified",
)


class Beanstalk(SynthBase):
    """MagicBeanStalk's per-seed procedure as coroutines (see :mod:`mbs.synth.engine`).

    Args:
        settings: The run's settings (``settings.mbs`` its own).
        seeds: The hard seeds (for document assignment when grounding is on).

    Raises:
        ValueError: Bad teacher pool, student set or grounding settings.
    """

    method = "mbs"

    def __init__(self, settings: SynthSettings, seeds: list[Problem]):
        super().__init__(settings, settings.mbs.grower)
        self.m = settings.mbs
        self.base = load_base_calibrations(settings.inputs, {(s.name, s.budget) for s in self.students})
        self.weakest, self.weakest_report = weakest_student(self.students, self.base)
        self.docs: dict[str, list[Any]] = {}
        if self.m.grounding.enabled:
            self.docs = assign_documents(self.m.grounding, seeds)
        self.trace_context = self.m.trace_context
        blueprint("", None, self.trace_context)  # a bad mbs.trace_context fails here, not mid-run

    def trace_text(self, node: TreeNode) -> str:
        """The node's verified trace as Stage-2/3 prompts receive it (``mbs.trace_context``;
        clipped to ``mbs.max_chars`` keeping the conclusion)."""
        return trace_for_prompt(node.trace, node.trace_reasoning, self.trace_context, self.max_chars)

    def shown(self, node: TreeNode) -> str:
        """The node's answer as Stage-2/3 prompts show it: the answer alone (a Reasoning Gym gold is a
        JSON entry with generator metadata, :func:`mbs.verify.gold.shown_answer`)."""
        return shown_answer(node.answer, verifier_for(node.problem, self.verifier.path))

    # -- one seed ----------------------------------------------------------------------

    def grow(self, seed: Problem) -> Task:
        """Stages 1-3, grounding and final calibration for one seed.

        Returns:
            ``(nodes, qualified problems)``; nodes in creation order, the root first.
        """
        root_problem = dataclasses.replace(seed, metadata=dict(seed.metadata))
        root = TreeNode(node_id=root_id(seed.id), seed_id=seed.id, depth=0, problem=root_problem)
        tree = SeedTree(seed, root)
        m = self.m
        res = yield from find_trace(
            seed, self.pool, int(self.th.N_t), m.templates["trace"], self.max_chars,
            verifier_for(seed, self.verifier.path), tree.tally, m.trace_batch,
        )
        info: dict[str, Any] = {"trace_teacher": res.teacher, "trace_index": res.index, "trace_attempts": res.attempts}
        root.problem.metadata["mbs"] = info
        problems: list[Problem] = []
        if res.trace is None:
            root.status, root.reject_reason = NodeStatus.NO_TRACE, res.reason
        else:
            root.trace, root.answer, root.status = res.trace, seed.ground_truth, NodeStatus.VERIFIED
            root.trace_reasoning = res.reasoning
            yield from self.decompose(tree, root)
            kept = yield from self.synthesize(tree, root)
            everything = [v for v in tree.variants() if v["status"] == Status.KEPT]
            if self.docs:
                info["documents"] = [d.id for d in self.docs.get(seed.id, [])]
                everything = yield from self.ground(tree, everything)
            problems = yield from self.final(tree, everything)
            log.debug("seed %s: %d kept at the root, %d qualified", seed.id, len(kept), len(problems))
        info.update(tree.tally.as_dict())
        return list(tree.nodes.values()), problems

    # -- Stage 2 -----------------------------------------------------------------------

    def base_acc(self, node: TreeNode, tally: Tally | None = None) -> Task:
        """acc(S, p) of every live student: the calibration run's pass rate of a seed, unbiased under
        its early stopping (:func:`mbs.calibration.estimate.pass_rate_of`), or measured here with all
        N (subproblems, and a stopped group of an old record: its successes / drawn is biased).

        Returns:
            ``{student: {"acc", "source", "n"}}``.
        """
        out: dict[str, dict[str, Any]] = {}
        todo: list[Policy] = []
        for s in self.students:
            c = self.base.get((node.problem.id, s.name, s.budget)) if node.depth == 0 else None
            if c is not None and (rate := pass_rate_of(c)) is not None:
                out[s.name] = {"acc": rate, "source": "calibration", "n": c.n}
            else:
                todo.append(s)
        if todo:
            groups = [Group.of(node.problem, s.live_budget, self.templates, self.verifier) for s in todo]
            res = yield Gather([one(Calibrate(s, [g], self.n, "band", early_stop=False, tally=tally)) for s, g in zip(todo, groups)])
            for s, (c,) in zip(todo, res):
                out[s.name] = {"acc": pass_rate_of(c), "source": "measured", "n": c.n}
        return out

    def conditioned(self, node: TreeNode, valid: list[Subproblem], s: Policy, attempt: int) -> Group:
        """The problem shown after the valid subproblems as worked examples (multi-turn chat)."""
        messages: list[dict[str, str]] = []
        for sub in valid:
            ex = Problem(id="", data_source="", prompt=clip(sub["problem"], self.max_chars), ground_truth=sub["answer"])
            messages += messages_for(ex, self.templates)
            messages.append({"role": "assistant", "content": clip(sub["solution"], self.max_chars)})
        messages += messages_for(node.problem, self.templates)
        return Group(
            id=f"{node.problem.id}#cond{attempt}", budget=s.live_budget, messages=messages,
            ground_truth=node.answer or "", verifier=verifier_for(node.problem, self.verifier.path),
        )

    def decompose(self, tree: SeedTree, node: TreeNode) -> Task:
        """Stage 2 at one node: a decomposition and up to N_d retries, effectivity-tested; recurse to depth D."""
        th, m = self.th, self.m
        depth_max, k_max, n_d = int(th.D), int(th.K), int(th.N_d)
        if node.depth >= depth_max:
            node.effectivity = {"passed": None, "students": {}, "attempts": [], "leaf_reason": f"depth limit D={depth_max}"}
            return
        accs = yield from self.base_acc(node, tree.tally)
        messages = user_messages(
            m.templates["decompose"], problem=clip(node.problem.prompt, self.max_chars),
            solution=self.trace_text(node), answer=self.shown(node), k=str(k_max),
        )
        attempts: list[EffectivityAttempt] = []
        accepted: list[Subproblem] | None = None
        for k in range(1 + n_d):  # the first try and up to N_d retries (paper)
            comp = (yield from generate(self.gen, [self.gen.request(messages, k)], tree.tally))[0][0]
            att: EffectivityAttempt = {"attempt": k, "tokens": comp.completion_tokens, "finish_reason": comp.finish_reason}
            attempts.append(att)
            try:
                parsed = parse_items(comp.text, k_max, max_answer_chars=self.max_answer_chars)
            except StructureError as err:
                att.update({"passed": False, "reason": comp.no_answer_reason or f"parse error: {err}", "raw": clip(comp.text, 600)})
                continue
            subs: list[Subproblem] = []
            for i, item in enumerate(parsed):
                if isinstance(item, StructureError):
                    why = str(item) if str(item).startswith("beyond K") else f"parse error: {item}"
                    subs.append({"index": i, "status": Status.REJECTED, "reason": why})
                    continue
                sub: Subproblem = {"index": i, "problem": item.problem, "solution": item.solution, "answer": item.answer, "status": Status.PENDING}
                ref = self_reference(item.problem, self.patterns)
                if ref:
                    sub.update({"status": Status.REJECTED, "reason": f"self-reference: {ref!r}"})
                subs.append(sub)
            pending = [s for s in subs if s["status"] == Status.PENDING]
            if pending:
                # "is its answer the parent's a*?" is graded by the parent's own verifier (a Reasoning Gym
                # gold is a JSON entry that only its score_answer reads)
                parent_verifier = verifier_for(node.problem, self.verifier.path)
                grades = yield Verify([(s["solution"], s["answer"], variant_type(tree.seed)) for s in pending]
                                      + [(answer_as_response(s["answer"], parent_verifier), node.answer or "", parent_verifier)
                                         for s in pending])
                for sub, g, same in zip(pending, grades, grades[len(pending):]):
                    mark_verified(sub, g)
                    restated = restatement(sub["problem"], node.problem.prompt, m.restate_similarity) or (
                        same_answer_reason(sub["answer"], self.shown(node)) if same.score == 1.0 else None)
                    if sub["status"] == Status.VALID and restated:
                        sub.update({"status": Status.REJECTED, "reason": restated})
            att["subproblems"] = subs
            valid = [s for s in subs if s["status"] == Status.VALID]
            if not valid:
                att.update({"passed": False, "reason": "no valid subproblem"})
                continue
            res = yield Gather([
                one(Calibrate(s, [self.conditioned(node, valid, s, k)], self.n, "above_alpha", accs[s.name]["acc"], tally=tree.tally))
                for s in self.students
            ])
            per: dict[str, StudentEffect] = {}
            for s, (c,) in zip(self.students, res):
                a = accs[s.name]
                per[s.name] = {
                    "acc": a["acc"], "acc_source": a["source"], "acc_n": a["n"], "acc_cond": pass_rate_of(c),
                    "n": c.n, "n_target": c.n_target, "successes": c.successes, "passed": above(c, a["acc"]),
                }
            att["students"] = per
            att["passed"] = any(p["passed"] for p in per.values())
            if att["passed"]:
                accepted = valid
                break
            att["reason"] = "effectivity failed: no student's acc_cond exceeds its acc"
        node.effectivity = {
            "passed": accepted is not None,
            "students": attempts[-1].get("students", {}) if attempts else {},
            "attempts": attempts,
            "leaf_reason": None if accepted is not None else f"decomposition failed 1 + N_d={n_d} times",
        }
        if accepted is None:
            return
        children = []
        for j, sub in enumerate(accepted):
            cid = f"{node.node_id}.{j}"
            problem = Problem(
                id=cid, data_source=data_source(variant_type(tree.seed), f"{origin_of(tree.seed)}-mbs-subproblem"),
                prompt=sub["problem"], ground_truth=sub["answer"], answer_type=variant_type(tree.seed),
                reference_solution=sub["solution"], metadata={"seed_id": tree.seed.id}, parents=[node.node_id],
            )
            child = TreeNode(node_id=cid, seed_id=tree.seed.id, depth=node.depth + 1, problem=problem,
                             trace=sub["solution"], answer=sub["answer"], status=NodeStatus.VERIFIED)
            tree.add(child)
            children.append(child)
        node.children = [c.node_id for c in children]
        yield Gather([self.decompose(tree, c) for c in children])

    # -- Stage 3 -----------------------------------------------------------------------

    def synthesize(self, tree: SeedTree, node: TreeNode) -> Task:
        """Stage 3 below and at ``node``: leaf variants, then compositions up to ``node``.

        Returns:
            The node's kept synthetic problems (candidate dicts).
        """
        if not node.children:
            return (yield from self.leaf(tree, node))
        kids = [tree.nodes[c] for c in node.children]
        kept_lists = yield Gather([self.synthesize(tree, c) for c in kids])
        return (yield from self.compose(tree, node, kids, kept_lists))

    def leaf(self, tree: SeedTree, node: TreeNode) -> Task:
        """N_l harder variants of a leaf; those the weakest student solves above alpha_leaf are discarded."""
        th, m = self.th, self.m
        messages = user_messages(
            m.templates["leaf"], problem=clip(node.problem.prompt, self.max_chars),
            solution=self.trace_text(node), answer=self.shown(node),
        )
        comps = (yield from generate(self.gen, [self.gen.request(messages, 0, int(th.N_l))], tree.tally))[0]
        variants = [
            self.candidate(tree, f"{node.node_id}/v{c.sample_index}", "leaf_variant", c, [node.node_id], node_id=node.node_id)
            for c in comps
        ]
        yield from self.check(tree, variants)
        valid = [v for v in variants if v["status"] == Status.VALID]
        if valid:
            alpha = float(th.alpha_leaf)
            cals = yield Calibrate(self.weakest, [self.group(tree, v, self.weakest) for v in valid], self.n, "above_alpha", alpha,
                                   tally=tree.tally)
            for v, c in zip(valid, cals):
                self.filter(v, c, alpha, "alpha_leaf")
        node.variants.extend(variants)
        kept = [v for v in variants if v["status"] == Status.KEPT]
        if kept:
            node.status = NodeStatus.SYNTHESIZED
        else:
            node.status = NodeStatus.EXHAUSTED
            node.reject_reason = f"no leaf variant kept of N_l={int(th.N_l)}: {_why(variants)}"
        return kept

    def compose(self, tree: SeedTree, node: TreeNode, kids: list[TreeNode], kept_lists: list[list[Candidate]]) -> Task:
        """Up to N_c compositions of a new parent from the children's kept synthetic problems.

        Trial t shows the original parent with its trace and answer, all its children (B(G_n))
        with their solutions and answers, and of each child its ``t mod count``-th kept
        synthetic problem with its verified solution and answer. A node is composed only when
        every child kept a synthetic problem: a new parent never combines fewer children than
        the demonstration shows. Parents the weakest student solves above alpha_parent are
        discarded.
        """
        th, m = self.th, self.m
        missing = [k.node_id for k, kl in zip(kids, kept_lists) if not kl]
        if len(missing) == len(kids):
            node.status, node.reject_reason = NodeStatus.EXHAUSTED, "no synthetic children: no child kept a synthetic problem"
            return []
        if missing:
            node.status = NodeStatus.EXHAUSTED
            node.reject_reason = (f"incomplete children: {len(missing)} of {len(kids)} children kept no synthetic problem "
                                  f"({', '.join(missing)}); a parent is never composed from fewer children than B(G_n) shows")
            return []
        avail = list(zip(kids, kept_lists))
        parent = clip(node.problem.prompt, self.max_chars)
        originals = _blocks([(k.problem.prompt, self.trace_text(k), self.shown(k)) for k in kids], self.max_chars)
        alpha, n_c, want = float(th.alpha_parent), int(th.N_c), m.parents_per_node
        kept: list[Candidate] = []
        trials: list[Candidate] = []
        for t in range(n_c):
            chosen = [kl[t % len(kl)] for _, kl in avail]
            new = _blocks([(v["problem"], v["solution"], v["answer"]) for v in chosen], self.max_chars)
            messages = user_messages(m.templates["compose"], parent=parent, parent_solution=self.trace_text(node),
                                     parent_answer=self.shown(node), count=str(len(kids)), children=originals, new_children=new)
            comp = (yield from generate(self.gen, [self.gen.request(messages, t)], tree.tally))[0][0]
            used = [v["id"] for v in chosen]
            v = self.candidate(tree, f"{node.node_id}/c{t}", "composed", comp, [node.node_id, *used], node_id=node.node_id, children=used)
            yield from self.check(tree, [v])
            if v["status"] == Status.VALID:
                (c,) = yield Calibrate(self.weakest, [self.group(tree, v, self.weakest)], self.n, "above_alpha", alpha, tally=tree.tally)
                self.filter(v, c, alpha, "alpha_parent")
            trials.append(v)
            if v["status"] == Status.KEPT:
                kept.append(v)
                if len(kept) >= want:
                    break
        node.variants.extend(trials)
        if kept:
            node.status = NodeStatus.SYNTHESIZED
        else:
            node.status = NodeStatus.EXHAUSTED
            node.reject_reason = f"parent trials exhausted: all N_c={n_c} composition trials rejected ({_why(trials)})"
        return kept

    # -- grounding ---------------------------------------------------------------------

    def ground(self, tree: SeedTree, kept: list[Candidate]) -> Task:
        """Rewrite each kept synthetic problem on the seed's documents (grounding on).

        A grounded problem gets a new id (``<id>g``: its rollouts differ); one that fails to
        parse or verify keeps its ungrounded text, with the reason in ``v["grounding"]``.

        Returns:
            The candidates to calibrate against the target.
        """
        docs = self.docs.get(tree.seed.id, [])
        if not docs or not kept:
            for v in kept:
                v["grounding"] = {"status": "skipped", "reason": "no documents left in the corpus"}
            return kept
        block = documents_block(docs, self.max_chars)
        reqs = [
            self.gen.request(user_messages(self.m.templates["ground"], problem=clip(v["problem"], self.max_chars),
                                  solution=clip(v["solution"], self.max_chars), answer=v["answer"], documents=block))
            for v in kept
        ]
        comps = yield from generate(self.gen, reqs, tree.tally)
        cands = [self.candidate(tree, v["id"] + "g", v["kind"], c[0], v["parents"], dedupe=False) for v, c in zip(kept, comps)]
        yield from self.check(tree, cands)
        for v, c in zip(kept, cands):
            doc_ids = [d.id for d in docs]
            if c["status"] == Status.VALID:
                v["grounding"] = {"status": "grounded", "documents": doc_ids,
                                  "original": {"id": v["id"], "problem": v["problem"], "solution": v["solution"], "answer": v["answer"]}}
                v.update({"id": c["id"], "problem": c["problem"], "solution": c["solution"], "answer": c["answer"]})
            else:
                v["grounding"] = {"status": "failed", "documents": doc_ids, "reason": c.get("reason")}
        return kept


def _blocks(items: list[tuple[str, str | None, str | None]], max_chars: int) -> str:
    """Numbered ``Problem / Solution / Answer`` blocks of a composition prompt."""
    return "\n\n".join(
        f"{i}. Problem: {clip(p, max_chars)}\nSolution: {clip(sol, max_chars)}\nAnswer: {a or ''}"
        for i, (p, sol, a) in enumerate(items, 1)
    )


def _why(cands: list[Candidate]) -> str:
    """Counts of rejection reasons, e.g. ``2 parse error, 1 above alpha_leaf``."""
    c = Counter(reason_kind(v.get("reason")) for v in cands if v["status"] not in KEPT)
    return ", ".join(f"{n} {k}" for k, n in sorted(c.items())) or "none proposed"


# --------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------


def funnel(state: RunState) -> dict[str, int]:
    """Counts through each stage (keys in :data:`FUNNEL` order)."""
    nodes = state.nodes
    roots = [n for n in nodes if n.depth == 0]
    attempts = [a for n in nodes for a in n.effectivity.get("attempts", [])]
    subs = [s for a in attempts for s in a.get("subproblems", [])]
    leaves = [n for n in nodes if not n.children and n.status != NodeStatus.NO_TRACE]
    lv = [v for n in nodes for v in n.variants if v["kind"] == "leaf_variant"]
    cp = [v for n in nodes for v in n.variants if v["kind"] == "composed"]
    kept = [v for n in nodes for v in n.variants if v["status"] in KEPT]
    seeds_q = {p.metadata.get("seed_id") for p in state.qualified}
    out = {
        "hard_seeds": len(state.seeds),
        "seeds_with_trace": sum(1 for r in roots if r.status != NodeStatus.NO_TRACE),
        "seeds_decomposed": sum(1 for r in roots if r.children),
        "decomposition_attempts": len(attempts),
        "decompositions_passed": sum(1 for a in attempts if a.get("passed")),
        "subproblems_proposed": len(subs),
        "subproblems_valid": sum(1 for s in subs if s["status"] == Status.VALID),
        "leaves": len(leaves),
        "leaf_variants_proposed": len(lv),
        "leaf_variants_valid": sum(1 for v in lv if v["status"] != Status.REJECTED),
        "leaf_variants_kept": sum(1 for v in lv if v["status"] in KEPT),
        "composition_trials": len(cp),
        "parents_valid": sum(1 for v in cp if v["status"] != Status.REJECTED),
        "parents_kept": sum(1 for v in cp if v["status"] in KEPT),
        "synthetic_problems": len(kept),
        "qualified_problems": len(state.qualified),
        "seeds_qualified": len(seeds_q),
    }
    return {k: out[k] for k in FUNNEL}


def summarize(settings: SynthSettings, state: RunState, grower: Beanstalk) -> dict[str, Any]:
    """The MBS summary: contract keys, funnel, rejections, effectivity, tokens, judges, backends,
    and ``traces_cut_by_length`` (Stage-1 traces refused because they ended at the token limit).

    ``yield`` is the paper's (share of hard seeds with >= 1 qualified problem);
    ``yield_by_path`` splits it into ``decomposed`` and ``root_only`` (they sum to ``yield``;
    :mod:`mbs.synth.paths`), ``paths`` holds the counts and teacher tokens behind them, and
    ``weakest_by`` how the weakest student was chosen.
    """
    roots = [n for n in state.nodes if n.depth == 0]
    teacher_tokens = sum(r.problem.metadata.get("mbs", {}).get("teacher_tokens", 0) for r in roots)
    s = base_summary("mbs", state.seeds, state.nodes, state.qualified, state.rollouts, teacher_tokens)
    f = funnel(state)
    s.update(
        seeds_with_trace=f["seeds_with_trace"],
        funnel=f,
        funnel_order=list(FUNNEL),
        rejections=rejections(state.nodes),
        effectivity=effectivity_summary(state.nodes),
        trace_teachers=dict(Counter(r.problem.metadata.get("mbs", {}).get("trace_teacher") or "none" for r in roots)),
        # Stage-1 traces refused unread because they ended at the token limit (finish reason length)
        traces_cut_by_length=sum(a.get("finish_reason") == "length" for r in roots for a in r.problem.metadata.get("mbs", {}).get("trace_attempts", [])),
        judges=judge_summary([v for n in state.nodes for v in n.variants], grower.judges),
        **setup_summary(settings, grower, state),
        weakest=grower.weakest.name,
        weakest_by=grower.weakest_report,
        yield_by_path=yield_by_path(state.seeds, state.nodes, state.qualified),
        paths=path_details(state.seeds, state.nodes, state.qualified),
        grounding=({"enabled": True, "seeds_with_documents": sum(1 for d in grower.docs.values() if d)}
                   if settings.mbs.grounding.enabled else {"enabled": False}),
        counts={
            "hard_seeds": len(state.seeds),
            "seeds_resumed": state.resumed,
            "tree_nodes": len(state.nodes),
            "synthetic_problems": f["synthetic_problems"],
            "qualified_problems": len(state.qualified),
            "rollouts": len(state.rollouts),
        },
    )
    return s


def run(settings: SynthSettings, out: RunDir) -> dict[str, Any]:
    """Grow every hard seed of ``calibration_dir`` into a calibrated problem family.

    Args:
        settings: The run's settings (``method=mbs``).
        out: The run directory.

    Returns:
        The summary (see :func:`summarize`); the stage writes it to ``summary.json``.

    Raises:
        ValueError: ``calibration_dir`` unset, bad teacher pool, student set or grounding settings.
        FileNotFoundError: ``calibration_dir`` is not a calibration run directory.
        mbs.records.RecordError: A malformed record in ``calibration_dir`` (names file and line).
        mbs.llm.BackendError: A backend failed after its retries (finished seeds are written).
    """
    seeds = load_seeds(settings.inputs)
    grower = Beanstalk(settings, seeds)
    log.info("MBS: %d hard seeds, teachers %s (generator %s), students %s, target %s",
             len(seeds), [t.name for t in grower.pool], grower.gen.name, [p.name for p in grower.students], grower.target.name)
    state = run_method(settings, out, seeds, grower)
    return summarize(settings, state, grower)
