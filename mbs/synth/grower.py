"""What MagicBeanStalk and the direct baseline do with a candidate problem (:class:`SynthBase`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mbs.calibration.estimate import pass_rate_of
from mbs.calibration.sampling import Group, Policy
from mbs.errors import ConfigError
from mbs.llm.base import Completion
from mbs.records import Calibration, Candidate, Problem, Status, Subproblem, TreeNode, to_dict
from mbs.synth.engine import Calibrate, Tally, Task, Verify
from mbs.synth.inputs import live_students
from mbs.synth.judge import judge_variants
from mbs.synth.problems import above, clip, synthetic_problem, variant_type
from mbs.synth.settings import GrowerSettings, SynthSettings
from mbs.synth.structured import StructureError, parse_item, self_reference
from mbs.synth.teacher import generator_teacher, teachers_from_cfg
from mbs.verify import Grade


class SeedTree:
    """The growing state of one seed: its nodes (root first, in creation order) and teacher tally.

    Args:
        seed: The hard seed.
        root: Its root node.
    """

    def __init__(self, seed: Problem, root: TreeNode):
        self.seed = seed
        self.root = root
        self.nodes: dict[str, TreeNode] = {root.node_id: root}
        self.tally = Tally()
        self.seen: dict[str, str] = {_norm(seed.prompt): seed.id}

    def add(self, node: TreeNode) -> None:
        self.nodes[node.node_id] = node
        self.seen.setdefault(_norm(node.problem.prompt), node.node_id)

    def duplicate(self, text: str, vid: str) -> str | None:
        """The id of an earlier problem of this tree with the same text as ``text``, else ``None``
        (and ``text`` is remembered as ``vid``)."""
        key = _norm(text)
        if key in self.seen:
            return self.seen[key]
        self.seen[key] = vid
        return None

    def variants(self) -> list[Candidate]:
        """Every synthetic candidate of the tree (stored in ``TreeNode.variants``)."""
        return [v for n in self.nodes.values() for v in n.variants]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


class SynthBase:
    """Teachers, students and the candidate checks shared by MBS and the direct baseline.

    A candidate problem is a :class:`~mbs.records.Candidate` stored in
    :attr:`TreeNode.variants`; its :class:`~mbs.records.Status` says where it stands.

    Args:
        settings: The run's settings.
        grower: The method's own (``settings.mbs.grower`` or ``settings.direct.grower``).

    Raises:
        ValueError: Bad teacher pool, judge pool or student set (see the builders).
    """

    method = ""

    def __init__(self, settings: SynthSettings, grower: GrowerSettings):
        self.settings = settings
        self.th = settings.thresholds
        self.templates = settings.templates
        self.verifier = settings.verifier
        self.students, self.target = live_students(settings.students)
        self.weakest = self.students[0]
        cache, seed = settings.cache_dir, settings.seed
        self.pool = teachers_from_cfg(settings.teacher_pool, cache, seed)
        self.gen = generator_teacher(self.pool, grower.generator, f"{self.method}.generator")
        jpool = list(grower.judges.pool)
        self.judges = teachers_from_cfg(jpool, cache, seed, f"{self.method}.judges.pool") if jpool else []
        for j in self.judges:
            if not j.live:
                raise ConfigError(f"{self.method}.judges.pool: judge {j.name!r} must be live")
        self.judge_template = grower.judges.template
        self.judge_filter = grower.judges.filter
        self.max_chars = grower.checks.max_chars
        self.max_answer_chars = grower.checks.max_answer_chars
        self.patterns = list(grower.checks.self_reference)
        self.n = int(self.th.N)

    def roles(self) -> list[tuple[str, Any]]:
        """``(name, backend config)`` of every teacher, judge and student (for :class:`BackendMeter`)."""
        return (
            [(f"teacher:{t.name}", t.backend_cfg) for t in self.pool if t.live]
            + [(f"judge:{j.name}", j.backend_cfg) for j in self.judges]
            + [(f"student:{s.name}", s.backend) for s in self.students]
        )

    def grow(self, seed: Problem) -> Task:
        """The coroutine turning one seed into ``(tree nodes, qualified problems)``."""
        raise NotImplementedError

    # -- candidates ------------------------------------------------------------------

    def candidate(self, tree: SeedTree, vid: str, kind: str, comp: Completion, parents: list[str], dedupe: bool = True, *,
                  node_id: str | None = None, children: list[str] | None = None) -> Candidate:
        """Parse one teacher sample into a candidate; structure, self-containedness and novelty checked.

        A candidate whose text repeats the seed, a tree node or an earlier candidate of the
        tree (case and whitespace aside) is rejected as a duplicate (with ``dedupe``). ``node_id``
        and ``children`` (a composed parent's) are stored when given.

        Returns:
            The candidate with status ``pending`` (to verify) or ``rejected`` (reason set).
        """
        v: Candidate = {
            "id": vid, "kind": kind, "index": comp.sample_index, "tokens": comp.completion_tokens,
            "finish_reason": comp.finish_reason, "parents": list(parents),
        }
        if node_id is not None:
            v["node_id"] = node_id
        if children is not None:
            v["children"] = children
        try:
            item = parse_item(comp.text, self.max_answer_chars)
        except StructureError as err:
            v.update({"status": Status.REJECTED, "reason": comp.no_answer_reason or f"parse error: {err}", "raw": clip(comp.text, 600)})
            return v
        v.update({"problem": item.problem, "solution": item.solution, "answer": item.answer})
        ref = self_reference(item.problem, self.patterns)
        dup = tree.duplicate(item.problem, vid) if dedupe and not ref else None
        if ref:
            v.update({"status": Status.REJECTED, "reason": f"self-reference: {ref!r}"})
        elif dup:
            v.update({"status": Status.REJECTED, "reason": f"duplicate: same problem as {dup}"})
        else:
            v["status"] = Status.PENDING
        return v

    def check(self, tree: SeedTree, variants: Sequence[Candidate]) -> Task:
        """Verify each pending candidate's answer against its own solution (status ``valid`` or ``rejected``).

        Graded by the verifier of the seed's :func:`~mbs.synth.problems.variant_type`.
        """
        pending = [v for v in variants if v["status"] == Status.PENDING]
        if not pending:
            return
        kind = variant_type(tree.seed)
        grades = yield Verify([(v["solution"], v["answer"], kind) for v in pending])
        for v, g in zip(pending, grades):
            mark_verified(v, g)

    def problem_of(self, tree: SeedTree, v: Candidate) -> Problem:
        """The :class:`Problem` of a candidate (id = candidate id; provenance in ``parents``).

        ``metadata.pass_rate`` is the target's pass rate unbiased under early stopping
        (:func:`mbs.calibration.estimate.pass_rate_of`; ``target.pass_rate`` is s/k as drawn).
        """
        meta: dict[str, Any] = {"kind": v["kind"], "node_id": v.get("node_id")}
        if "target" in v:
            meta.update(pass_rate=pass_rate_of(Calibration(**v["target"])), target=v["target"])
        if "filter" in v:
            meta["filter"] = v["filter"]
        if "judges" in v:
            meta.update(judges=v["judges"], judge_verdict=v["judge_verdict"])
        if "grounding" in v:
            meta["grounding"] = {k: x for k, x in v["grounding"].items() if k != "original"}
        return synthetic_problem(v["id"], v["problem"], v["answer"], v["solution"], tree.seed, self.method, v["parents"], meta)

    def group(self, tree: SeedTree, v: Candidate, policy: Policy) -> Group:
        """The rollout group of a candidate for ``policy`` at its budget (group id = candidate id)."""
        return Group.of(self.problem_of(tree, v), policy.live_budget, self.templates, self.verifier)

    def filter(self, v: Candidate, c: Calibration, alpha: float, name: str) -> None:
        """Discard a candidate the weakest student solves above ``alpha`` (Stage 3); else keep it."""
        hit = above(c, alpha)
        v["filter"] = {
            "policy": c.policy, "budget": c.budget, "alpha": alpha, "threshold": name, "n": c.n,
            "n_target": c.n_target, "successes": c.successes, "pass_rate": c.pass_rate,
            "pass_rate_est": pass_rate_of(c), "above": hit,
        }
        if hit:
            v.update({"status": Status.DISCARDED, "reason": f"above {name}: {c.policy} solves {c.successes}/{c.n_target} > {alpha:g}"})
        else:
            v["status"] = Status.KEPT

    def final(self, tree: SeedTree, kept: list[Candidate]) -> Task:
        """Calibrate kept candidates against the target policy; judge the qualified ones.

        Qualified = 0 < pass rate < 1 and at least one complete correct response within L
        (:attr:`Calibration.usable`).

        Returns:
            The qualified problems as :class:`Problem` records.
        """
        if not kept:
            return []
        cals = yield Calibrate(self.target, [self.group(tree, v, self.target) for v in kept], self.n, "band", tally=tree.tally)
        for v, c in zip(kept, cals):
            v["target"] = to_dict(c)
            if c.usable:
                v.update({"status": Status.QUALIFIED, "reason": None})
            elif c.band != "goldilocks":
                v.update({"status": Status.UNQUALIFIED, "reason": f"target {c.band}: {c.successes}/{c.n} correct"})
            else:
                v.update({"status": Status.UNQUALIFIED, "reason": f"target incomplete: {c.successes}/{c.n} correct, none complete within L"})
        qualified = [v for v in kept if v["status"] == Status.QUALIFIED]
        if self.judges and qualified:
            yield from judge_variants(qualified, self.judges, self.judge_template, self.max_chars, tree.tally)
            if self.judge_filter:
                for v in qualified:
                    if v["judge_verdict"] == "rejected":
                        v.update({"status": Status.UNQUALIFIED, "reason": "judges: unanimously rejected"})
                qualified = [v for v in qualified if v["status"] == Status.QUALIFIED]
        return [self.problem_of(tree, v) for v in qualified]


def mark_verified(v: Subproblem, g: Grade) -> None:
    """Set a candidate's or a subproblem's status from the grade of its solution against its own answer."""
    if g.score == 1.0:
        v["status"] = Status.VALID
    elif g.score is None:
        v.update({"status": Status.REJECTED, "reason": f"answer not gradable: {g.reason}"})
    else:
        v.update({"status": Status.REJECTED, "reason": f"answer mismatch: solution gives {g.extracted!r} ({g.reason})"})
