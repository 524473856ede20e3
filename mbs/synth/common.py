"""What MagicBeanStalk and the direct baseline share: inputs, batched execution, outputs, accounting.

**Batched execution.** Each hard seed is grown by its own generator function (a coroutine)
that reads like the paper's sequential procedure but never calls a model itself: it *yields*
an operation and receives its result::

    completions = yield Generate(teacher, [request])        # teacher samples
    grades      = yield Verify([(solution, answer, "math")])  # grading pool
    cals        = yield Calibrate(policy, [group], n, ...)    # student rollouts (mbs.sampling)
    results     = yield Gather([sub_coroutine, ...])          # run sub-steps side by side

:func:`run_tasks` advances every seed (and every sub-step gathered inside a seed) until each
is waiting on an operation, then executes all waiting operations of that round together: one
``generate`` call per teacher with every request of the round, one :func:`mbs.sampling.calibrate`
call per (policy, decision), one grading-pool ``map``. So teacher and student backends get
whole batches across seeds and tree nodes, never one request at a time, while the per-seed
logic stays a plain top-down reading of the method. Results depend only on each operation's
inputs (the LLM cache is content-addressed and samples are seeded by index), so batching
never changes what a seed produces.

**Inputs** (:func:`load_seeds`, :func:`load_base_calibrations`): the hard seeds and the
calibrations of a ``mbs-calibrate`` run directory.

**Outputs and resume** (:class:`SeedStore`): ``trees.<shard>.jsonl`` (every
:class:`~mbs.records.TreeNode` of a seed, its root written last) and ``problems.<shard>.jsonl``
(the qualified problems) are appended as each seed finishes. A seed is finished when its
root node is in the trees shard; a rerun skips finished seeds and drops the partial records
of unfinished ones, and the LLM cache serves every teacher and student sample drawn before
the kill, so nothing is paid for twice.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mbs.data import DataError, in_shard
from mbs.errors import ConfigError, InputNotFoundError
from mbs.io import RunDir, Shard, read_records, read_summary, shard_files
from mbs.llm import build_backend
from mbs.llm.base import ChatRequest, Completion
from mbs.prompts import _placeholders, load_template
from mbs.records import Calibration, Problem, Rollout, TreeNode, to_dict
from mbs.sampling import Group, Policy, RolloutWriter, calibrate, policies_from_cfg
from mbs.verify import Grade
from mbs.verify.pool import GradingPool

log = logging.getLogger(__name__)

Task = Generator[Any, Any, Any]


# --------------------------------------------------------------------------------------
# Operations a seed's coroutine yields
# --------------------------------------------------------------------------------------


@dataclass
class Generate:
    """Teacher samples: the result is one list of completions per request."""

    teacher: Any  # mbs.synth.teacher.Teacher
    requests: list[ChatRequest]


@dataclass
class Verify:
    """Gradings ``(response, ground truth, verifier)``: the result is one Grade per item."""

    items: list[tuple[str, str, str]]


@dataclass
class Calibrate:
    """N rollouts of ``policy`` per group, summarised: the result is one Calibration per group.

    Attributes:
        policy: A live policy.
        groups: Prompts to sample (their ids are the rollouts' problem ids).
        n: Rollouts N per group.
        decision: ``band`` or ``above_alpha`` (what early stopping keeps identical).
        alpha: Threshold of ``above_alpha``.
        early_stop: Allow sequential early stopping (``synth.early_stop`` must be on too).
    """

    policy: Policy
    groups: list[Group]
    n: int
    decision: str = "band"
    alpha: float = 0.5
    early_stop: bool = True


@dataclass
class Gather:
    """Run sub-coroutines side by side: the result is the list of their return values."""

    tasks: list[Task]


def one(op: Any) -> Task:
    """A coroutine that yields one operation and returns its result (to :class:`Gather` operations)."""
    return (yield op)


# --------------------------------------------------------------------------------------
# The scheduler
# --------------------------------------------------------------------------------------


class _Node:
    __slots__ = ("gen", "parent", "pending", "results", "slot")

    def __init__(self, gen: Task, parent: _Node | None, slot: int):
        self.gen, self.parent, self.slot = gen, parent, slot
        self.pending = 0
        self.results: list[Any] = []


def run_tasks(tasks: Sequence[Task], engine: Engine, on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """Run coroutines to completion, executing their operations in batched rounds.

    Args:
        tasks: One coroutine per seed.
        engine: Executes a round of operations.
        on_done: Called with ``(task index, return value)`` as soon as a task finishes
            (writes that seed's records while the others go on).

    Returns:
        The tasks' return values, in order.

    Raises:
        TypeError: A coroutine yielded something that is not an operation.
        Exception: Whatever a coroutine or the engine raised (finished seeds are written).
    """
    results: list[Any] = [None] * len(tasks)
    ready: deque[tuple[_Node, Any]] = deque((_Node(t, None, i), None) for i, t in enumerate(tasks))
    rounds = 0

    def finish(node: _Node, value: Any) -> None:
        if node.parent is None:
            results[node.slot] = value
            if on_done is not None:
                on_done(node.slot, value)
            return
        parent = node.parent
        parent.results[node.slot] = value
        parent.pending -= 1
        if parent.pending == 0:
            ready.append((parent, parent.results))

    while ready:
        blocked: list[tuple[_Node, Any]] = []
        while ready:
            node, value = ready.popleft()
            try:
                op = node.gen.send(value)
            except StopIteration as stop:
                finish(node, stop.value)
                continue
            if isinstance(op, Gather):
                if not op.tasks:
                    ready.append((node, []))
                    continue
                node.pending, node.results = len(op.tasks), [None] * len(op.tasks)
                ready.extend((_Node(t, node, j), None) for j, t in enumerate(op.tasks))
            elif isinstance(op, (Generate, Verify, Calibrate)):
                blocked.append((node, op))
            else:
                raise TypeError(f"a synthesis coroutine yielded {type(op).__name__}, not an operation")
        if blocked:
            rounds += 1
            outs = engine.execute([op for _, op in blocked])
            ready.extend((node, out) for (node, _), out in zip(blocked, outs))
    engine.stats["rounds"] += rounds
    return results


class Engine:
    """Executes one round of operations: batched per teacher, per policy and decision, and for grading.

    Args:
        cfg: The composed synthesize config (``paths``, ``synth``, ``seed``).
        pool: The grading pool.
        writer: Grades and stores student rollouts (its ``done`` holds rollouts already drawn).
    """

    def __init__(self, cfg: DictConfig, pool: GradingPool, writer: RolloutWriter):
        self.cfg = cfg
        self.pool = pool
        self.writer = writer
        self.stats: Counter = Counter()

    def execute(self, ops: Sequence[Any]) -> list[Any]:
        """Results of ``ops``, in order (see the operation classes)."""
        out: list[Any] = [None] * len(ops)
        by_teacher: dict[str, list[int]] = defaultdict(list)
        by_cal: dict[tuple, list[int]] = defaultdict(list)
        verifies: list[int] = []
        for i, op in enumerate(ops):
            if isinstance(op, Generate):
                by_teacher[op.teacher.name].append(i)
            elif isinstance(op, Calibrate):
                es = bool(op.early_stop and self.cfg.synth.early_stop)
                by_cal[(op.policy.name, op.n, op.decision, float(op.alpha), es)].append(i)
            else:
                verifies.append(i)
        for name, idx in by_teacher.items():
            teacher = ops[idx[0]].teacher
            requests = [r for i in idx for r in ops[i].requests]
            self.stats["teacher_requests"] += len(requests)
            log.info("teacher %s: %d requests in one batch", name, len(requests))
            comps = teacher.backend.generate(requests)
            pos = 0
            for i in idx:
                k = len(ops[i].requests)
                out[i], pos = comps[pos : pos + k], pos + k
        if verifies:
            items = [it for i in verifies for it in ops[i].items]
            grades = self.pool.map(items) if items else []
            pos = 0
            for i in verifies:
                k = len(ops[i].items)
                out[i], pos = grades[pos : pos + k], pos + k
        for (_, n, decision, alpha, es), idx in by_cal.items():
            policy = ops[idx[0]].policy
            groups: dict[tuple[str, int], Group] = {}
            for i in idx:
                for g in ops[i].groups:
                    prev = groups.setdefault((g.id, g.budget), g)
                    if prev.messages != g.messages:
                        raise ValueError(f"two different prompts share the rollout group id {g.id!r}")
            self.stats["calibrated_groups"] += len(groups)
            cals = calibrate(
                policy, list(groups.values()), n, self.writer, self.cfg.paths.cache_dir,
                decision=decision, alpha=alpha, early_stop=es, batch=int(self.cfg.synth.early_stop_batch),
                temperature=float(self.cfg.synth.temperature), top_p=float(self.cfg.synth.top_p),
                seed=int(self.cfg.seed), stats=self.stats, desc=f"{policy.name} ({decision})",
            )
            for i in idx:
                out[i] = [cals[(g.id, g.budget)] for g in ops[i].groups]
        return out


# --------------------------------------------------------------------------------------
# Per-seed accounting
# --------------------------------------------------------------------------------------


@dataclass
class Tally:
    """Teacher work spent on one seed (cached samples count too: they were paid for once).

    Attributes:
        teacher_tokens: Completion tokens of every teacher sample the seed used.
        teacher_samples: Teacher samples the seed used.
    """

    teacher_tokens: int = 0
    teacher_samples: int = 0

    def add(self, completions: Iterable[Iterable[Completion]]) -> None:
        for comps in completions:
            for c in comps:
                self.teacher_tokens += c.completion_tokens
                self.teacher_samples += 1


def generate(teacher: Any, requests: list[ChatRequest], tally: Tally) -> Task:
    """Yield a :class:`Generate`, add the samples to ``tally``, return the completions."""
    comps = yield Generate(teacher, requests)
    tally.add(comps)
    return comps


# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


def calibration_dir(cfg: DictConfig) -> Path:
    """The calibration run directory named by ``calibration_dir``.

    Raises:
        ValueError: ``calibration_dir`` is not set.
        FileNotFoundError: The folder does not exist or has no ``hard_seeds.*.jsonl``.
    """
    if not cfg.calibration_dir:
        raise ConfigError("calibration_dir is not set: pass calibration_dir=<a mbs-calibrate run directory>")
    path = Path(str(cfg.calibration_dir)).expanduser()
    if not path.is_dir():
        raise InputNotFoundError(f"calibration_dir={path}: no such directory")
    if not shard_files(path, "hard_seeds"):
        raise InputNotFoundError(
            f"calibration_dir={path}: no hard_seeds.*.jsonl (is it a finished mbs-calibrate run directory?)"
        )
    return path


def load_seeds(cfg: DictConfig) -> list[Problem]:
    """The hard seeds of ``calibration_dir`` in this shard, at most ``synth.seeds_limit``.

    Raises:
        ValueError, FileNotFoundError: See :func:`calibration_dir`.
        mbs.records.RecordError: A malformed hard-seed record (names file and line).
        ValueError: Two hard seeds share an id, or a seed has no ground truth.
    """
    path = calibration_dir(cfg)
    seeds = read_records(path, "hard_seeds", Problem)
    seen: set[str] = set()
    for s in seeds:
        if s.id in seen:
            raise DataError(f"{path}: hard seed id {s.id!r} occurs twice in hard_seeds.*.jsonl")
        if s.ground_truth is None:
            raise DataError(f"{path}: hard seed {s.id!r} has no ground_truth (field ground_truth is null)")
        seen.add(s.id)
    seeds = [s for s in seeds if in_shard(s.id, int(cfg.shard.index), int(cfg.shard.count))]
    if cfg.synth.seeds_limit is not None:
        seeds = seeds[: int(cfg.synth.seeds_limit)]
    return seeds


def seed_provenance(cfg: DictConfig, target: Policy) -> dict[str, Any]:
    """Which policy and budget made the seeds hard, against the target synthesis calibrates for.

    Hard seeds are failed_all for the calibration run's target policy at its hard-seed budget;
    synthesis qualifies problems for ``students.target`` at its own budget. When the two
    differ (e.g. seeds from the recorded GPT-4 Turbo study, synthesis for the embedded
    model), a warning says so and the summary records it.

    Returns:
        ``{"calibration_target", "calibration_budget", "same_target"}`` (``None`` values when
        the calibration run has no summary).
    """
    path = calibration_dir(cfg)
    try:
        summary = read_summary(path)
    except FileNotFoundError:
        summary = {}
    cal_target, cal_budget = summary.get("target_policy"), summary.get("hard_seed_budget")
    same = cal_target == target.name and cal_budget == target.budget
    if summary and not same:
        log.warning(
            "hard seeds of %s are failed_all for %s at L=%s; synthesis qualifies problems for %s at L=%s "
            "(set students.target / budget.L to match, if that is not intended)",
            path, cal_target, cal_budget, target.name, target.budget,
        )
    return {"calibration_target": cal_target, "calibration_budget": cal_budget, "same_target": same}


def setup_summary(cfg: DictConfig, grower: Any, state: Any) -> dict[str, Any]:
    """The summary keys MagicBeanStalk and direct synthesis share: thresholds, the student
    set and target (with :func:`seed_provenance`), the teacher pool, the generator, the
    engine and the backend counters of ``state``."""
    return {
        "thresholds": OmegaConf.to_container(cfg.thresholds, resolve=True),
        "students": [p.name for p in grower.students],
        "target": {"policy": grower.target.name, "budget": grower.target.budget, "n": int(cfg.thresholds.N)},
        "seeds_from": seed_provenance(cfg, grower.target),
        "teachers": [t.name for t in grower.pool],
        "generator": grower.gen.name,
        "engine": state.engine,
        "backends": state.backends,
    }


def load_base_calibrations(cfg: DictConfig) -> dict[tuple[str, str, int | None], Calibration]:
    """acc(S, p) measured by the calibration run: ``{(problem id, policy, budget): Calibration}``."""
    path = calibration_dir(cfg)
    if not shard_files(path, "calibrations"):
        log.warning("%s has no calibrations.*.jsonl: acc(S, p) of the seeds will be measured", path)
    return {c.key: c for c in read_records(path, "calibrations", Calibration)}


def live_students(cfg: DictConfig) -> tuple[list[Policy], Policy]:
    """The live students (weakest first) and the target policy.

    Raises:
        ValueError: No live student, or the target is not a live policy of ``students``.
    """
    policies = policies_from_cfg(cfg.students)
    live = [p for p in policies if p.source == "live"]
    skipped = [p.name for p in policies if p.source != "live"]
    if skipped:
        log.warning("students %s are recorded policies: they cannot be sampled, synthesis leaves them out", skipped)
    if not live:
        raise ConfigError("students: synthesis needs at least one live student (recorded policies cannot be sampled)")
    for p in live:
        if p.budget is None:
            raise ConfigError(f"students: live policy {p.name!r} has no budget")
    target = next((p for p in live if p.name == str(cfg.students.target)), None)
    if target is None:
        raise ConfigError(f"students.target={cfg.students.target!r} is not a live policy: {[p.name for p in live]}")
    return live, target


# --------------------------------------------------------------------------------------
# Prompts and problems
# --------------------------------------------------------------------------------------


def fill(template: str, **fields: str) -> list[dict[str, str]]:
    """A one-turn chat from template ``template`` with every ``{field}`` filled in one pass.

    One pass matters: a problem pasted into the prompt may itself contain ``{k}`` or
    ``{answer}`` (LaTeX), which must stay as written.

    Raises:
        FileNotFoundError: Unknown template.
        KeyError: The template has a placeholder that ``fields`` lacks.
    """
    missing = sorted(_placeholders(template) - set(fields))
    if missing:
        raise KeyError(f"template {template!r} needs field(s) {missing}")
    text = re.sub(r"\{([a-z_]+)\}", lambda m: fields.get(m.group(1), m.group(0)), load_template(template))
    return [{"role": "user", "content": text}]


def clip(text: str | None, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters (marked with ``[...]``), so prompts fit the context window."""
    text = text or ""
    return text if len(text) <= max_chars else text[: max(0, max_chars - 5)].rstrip() + " [...]"


def origin_of(seed: Problem) -> str:
    """The origin of a seed's data source (``mbs/math/champ`` -> ``champ``)."""
    return seed.data_source.rstrip("/").split("/")[-1] or "unknown"


def synthetic_problem(pid: str, text: str, answer: str, solution: str, seed: Problem, method: str, parents: list[str], meta: dict[str, Any]) -> Problem:
    """A synthetic :class:`Problem` with data source ``mbs/math/<origin>-<method>`` and provenance."""
    return Problem(
        id=pid,
        data_source=f"mbs/math/{origin_of(seed)}-{method}",
        prompt=text,
        ground_truth=answer,
        answer_type="math",
        reference_solution=solution,
        metadata={"seed_id": seed.id, "method": method, **meta},
        parents=list(parents),
    )


def reason_kind(reason: str | None) -> str:
    """The category of a rejection reason (the text before its first colon)."""
    return (reason or "none").split(":")[0].strip() or "none"


def above(c: Calibration, alpha: float) -> bool:
    """Pass rate over N above ``alpha``: exact with early stopping too (successes > alpha * N)."""
    return c.successes > alpha * c.n_target


# --------------------------------------------------------------------------------------
# Outputs and resume
# --------------------------------------------------------------------------------------


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
            _rewrite(self.trees, self.nodes)
        if len(self.qualified) < len(problems):
            _rewrite(self.problems, self.qualified)
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


def _rewrite(shard: Shard, records: list[Any]) -> None:
    """Replace a shard's content with ``records`` (temporary file and rename)."""
    import json

    from mbs.io import _json_default

    tmp = shard.path.with_name(f".{shard.path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(to_dict(r), ensure_ascii=False, default=_json_default) + "\n" for r in records)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, shard.path)
    log.info("%s: dropped the records of unfinished seeds (%d kept)", shard.path.name, len(records))


def read_rollouts(out: RunDir) -> dict[tuple, Rollout]:
    """Rollouts already graded in this run directory, by key (resume)."""
    done: dict[tuple, Rollout] = {}
    for r in out.shard("rollouts", Rollout).read():
        done.setdefault(r.key, r)
    return done


# --------------------------------------------------------------------------------------
# Backends and summary
# --------------------------------------------------------------------------------------


class BackendMeter:
    """Calls, samples, cache hits and tokens of each backend used by a run (deltas over the run).

    A student and a teacher that share one model share one backend (built once by
    :func:`mbs.llm.build_backend`); they are reported once, under both names.

    Args:
        roles: ``(role name, backend config)`` for every teacher, judge and student.
        cache_dir: The LLM cache folder.
    """

    KEYS = ("calls", "samples", "cache_hits", "prompt_tokens", "completion_tokens", "seconds")

    def __init__(self, roles: Sequence[tuple[str, Any]], cache_dir: str | None):
        self.by_id: dict[int, tuple[Any, list[str], dict[str, Any]]] = {}
        for name, backend_cfg in roles:
            if backend_cfg is None:
                continue
            b = build_backend(backend_cfg, cache_dir)
            if id(b) not in self.by_id:
                self.by_id[id(b)] = (b, [], b.stats.as_dict())
            self.by_id[id(b)][1].append(name)

    def report(self) -> dict[str, dict[str, Any]]:
        out = {}
        for b, names, before in self.by_id.values():
            after = b.stats.as_dict()
            row = {k: after[k] - before[k] for k in self.KEYS}
            row["seconds"] = round(row["seconds"], 3)
            row["model_id"] = b.model_id
            out["+".join(dict.fromkeys(names))] = row
        return out


def histogram(values: Iterable[int]) -> dict[str, int]:
    """``{value: how many}`` with string keys, in increasing value order."""
    c = Counter(values)
    return {str(k): c[k] for k in sorted(c)}


def per_qualified(total: int, qualified: int) -> float | None:
    """``total / qualified``, or ``None`` when nothing qualified."""
    return round(total / qualified, 1) if qualified else None


def base_summary(
    method: str,
    seeds: Sequence[Problem],
    nodes: Sequence[TreeNode],
    qualified: Sequence[Problem],
    rollouts: Iterable[Rollout],
    teacher_tokens: int,
) -> dict[str, Any]:
    """The summary keys every synthesis method reports (contract of ``summary.json``).

    Args:
        method: ``mbs`` or ``direct``.
        seeds: The hard seeds of this run (after shard and limit).
        nodes: Every tree node of the finished seeds.
        qualified: The qualified problems.
        rollouts: Every student rollout drawn by the run.
        teacher_tokens: Teacher completion tokens spent over all seeds.

    Returns:
        ``hard_seeds``, ``seeds_qualified``, ``yield``, ``qualified_problems``,
        ``qualified_per_seed`` (a list in seed order), ``qualified_per_seed_histogram``,
        ``teacher_tokens``, ``student_tokens`` and both per qualified problem.
    """
    per_seed = Counter(p.metadata.get("seed_id") for p in qualified)
    counts = [per_seed.get(s.id, 0) for s in seeds]
    student_tokens = sum(r.completion_tokens for r in rollouts)
    n_q = len(qualified)
    seeds_q = sum(1 for c in counts if c > 0)
    return {
        "hard_seeds": len(seeds),
        "seeds_finished": len({n.seed_id for n in nodes}),
        "seeds_qualified": seeds_q,
        "yield": seeds_q / len(seeds) if seeds else 0.0,
        "qualified_problems": n_q,
        "qualified_per_seed": counts,
        "qualified_per_seed_histogram": histogram(counts),
        "teacher_tokens": teacher_tokens,
        "student_tokens": student_tokens,
        "teacher_tokens_per_qualified": per_qualified(teacher_tokens, n_q),
        "student_tokens_per_qualified": per_qualified(student_tokens, n_q),
    }


def write_figures(cfg: DictConfig, out: RunDir, summary: dict[str, Any]) -> None:
    """Draw the run's figures into ``out/figures`` when ``synth.figures`` is on.

    The stage writes ``summary.json`` after the method returns, so the figures are drawn from
    a provisional summary written here first (the stage overwrites it with the same numbers).
    """
    if not cfg.synth.figures:
        return
    from mbs.figures.synthesis import synthesis_figures

    t0 = time.perf_counter()
    out.write_summary({"method": cfg.method, **summary})
    drawn = synthesis_figures(out.path, out.path / "figures")
    out.timings["figures"] = time.perf_counter() - t0
    if drawn.get("skipped"):
        log.info("figures skipped: %s", drawn["skipped"])




# --------------------------------------------------------------------------------------
# What both methods do with a candidate problem, and the run skeleton
# --------------------------------------------------------------------------------------


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

    def variants(self) -> list[dict[str, Any]]:
        """Every synthetic candidate of the tree (dicts stored in ``TreeNode.variants``)."""
        return [v for n in self.nodes.values() for v in n.variants]


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


class SynthBase:
    """Teachers, students and the candidate checks shared by MBS and the direct baseline.

    A candidate problem is a dict stored in :attr:`TreeNode.variants`::

        {"id", "kind", "index" (teacher sample index), "tokens", "finish_reason", "parents",
         "problem", "solution", "answer",
         "status": rejected | discarded | kept | qualified | unqualified, "reason",
         "filter": {...} (weakest-student check), "target": Calibration dict, "judges": {...}}

    Args:
        cfg: The synthesize config.
        mcfg: The method's config node (``cfg.mbs`` or ``cfg.direct``).

    Raises:
        ValueError: Bad teacher pool, judge pool or student set (see the builders).
    """

    method = ""

    def __init__(self, cfg: DictConfig, mcfg: DictConfig):
        from mbs.synth.teacher import generator_teacher, teachers_from_cfg

        self.cfg = cfg
        self.mcfg = mcfg
        self.th = cfg.thresholds
        self.templates = cfg.synth.templates
        self.students, self.target = live_students(cfg)
        self.weakest = self.students[0]
        cache = cfg.paths.cache_dir
        self.pool = teachers_from_cfg(cfg.teacher.pool, cache, int(cfg.seed))
        self.gen = generator_teacher(self.pool, mcfg.generator, f"{self.method}.generator")
        jpool = list(mcfg.judges.pool)
        self.judges = teachers_from_cfg(jpool, cache, int(cfg.seed), f"{self.method}.judges.pool") if jpool else []
        for j in self.judges:
            if not j.live:
                raise ConfigError(f"{self.method}.judges.pool: judge {j.name!r} must be live")
        self.max_chars = int(mcfg.max_chars)
        self.max_answer_chars = int(mcfg.max_answer_chars)
        self.patterns = [str(p) for p in mcfg.self_reference]
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

    def candidate(self, tree: SeedTree, vid: str, kind: str, comp: Completion, parents: list[str], dedupe: bool = True, **extra: Any) -> dict[str, Any]:
        """Parse one teacher sample into a candidate; structure, self-containedness and novelty checked.

        A candidate whose text repeats the seed, a tree node or an earlier candidate of the
        tree (case and whitespace aside) is rejected as a duplicate (with ``dedupe``).

        Returns:
            The candidate dict with status ``pending`` (to verify) or ``rejected`` (reason set).
        """
        from mbs.synth.structured import StructureError, parse_item, self_reference

        v: dict[str, Any] = {
            "id": vid, "kind": kind, "index": comp.sample_index, "tokens": comp.completion_tokens,
            "finish_reason": comp.finish_reason, "parents": list(parents), **extra,
        }
        try:
            item = parse_item(comp.text, self.max_answer_chars)
        except StructureError as err:
            v.update(status="rejected", reason=f"parse error: {err}", raw=clip(comp.text, 600))
            return v
        v.update(problem=item.problem, solution=item.solution, answer=item.answer)
        ref = self_reference(item.problem, self.patterns)
        dup = tree.duplicate(item.problem, vid) if dedupe and not ref else None
        if ref:
            v.update(status="rejected", reason=f"self-reference: {ref!r}")
        elif dup:
            v.update(status="rejected", reason=f"duplicate: same problem as {dup}")
        else:
            v["status"] = "pending"
        return v

    def check(self, variants: Sequence[dict[str, Any]]) -> Task:
        """Verify each pending candidate's answer against its own solution (status ``valid`` or ``rejected``)."""
        pending = [v for v in variants if v["status"] == "pending"]
        if not pending:
            return
        grades = yield Verify([(v["solution"], v["answer"], "math") for v in pending])
        for v, g in zip(pending, grades):
            mark_verified(v, g)

    def problem_of(self, tree: SeedTree, v: dict[str, Any]) -> Problem:
        """The :class:`Problem` of a candidate (id = candidate id; provenance in ``parents``)."""
        meta = {"kind": v["kind"], "node_id": v.get("node_id")}
        if "target" in v:
            meta.update(pass_rate=v["target"]["pass_rate"], target=v["target"])
        if "filter" in v:
            meta["filter"] = v["filter"]
        if "judges" in v:
            meta.update(judges=v["judges"], judge_verdict=v["judge_verdict"])
        if "grounding" in v:
            meta["grounding"] = {k: x for k, x in v["grounding"].items() if k != "original"}
        return synthetic_problem(v["id"], v["problem"], v["answer"], v["solution"], tree.seed, self.method, v["parents"], meta)

    def group(self, tree: SeedTree, v: dict[str, Any], policy: Policy) -> Group:
        """The rollout group of a candidate for ``policy`` at its budget (group id = candidate id)."""
        return Group.of(self.problem_of(tree, v), int(policy.budget), self.templates, self.cfg.verifier)

    def filter(self, v: dict[str, Any], c: Calibration, alpha: float, name: str) -> None:
        """Discard a candidate the weakest student solves above ``alpha`` (Stage 3); else keep it."""
        hit = above(c, alpha)
        v["filter"] = {
            "policy": c.policy, "budget": c.budget, "alpha": alpha, "threshold": name, "n": c.n,
            "n_target": c.n_target, "successes": c.successes, "pass_rate": c.pass_rate, "above": hit,
        }
        if hit:
            v.update(status="discarded", reason=f"above {name}: {c.policy} solves {c.successes}/{c.n_target} > {alpha:g}")
        else:
            v["status"] = "kept"

    def final(self, tree: SeedTree, kept: list[dict[str, Any]]) -> Task:
        """Calibrate kept candidates against the target policy; judge the qualified ones.

        Qualified = 0 < pass rate < 1 and at least one complete correct response within L
        (:attr:`Calibration.usable`).

        Returns:
            The qualified problems as :class:`Problem` records.
        """
        from mbs.synth.judge import judge_variants

        if not kept:
            return []
        cals = yield Calibrate(self.target, [self.group(tree, v, self.target) for v in kept], self.n, "band")
        for v, c in zip(kept, cals):
            v["target"] = to_dict(c)
            if c.usable:
                v.update(status="qualified", reason=None)
            elif c.band != "goldilocks":
                v.update(status="unqualified", reason=f"target {c.band}: {c.successes}/{c.n} correct")
            else:
                v.update(status="unqualified", reason=f"target incomplete: {c.successes}/{c.n} correct, none complete within L")
        qualified = [v for v in kept if v["status"] == "qualified"]
        if self.judges and qualified:
            yield from judge_variants(qualified, self.judges, self.mcfg.templates.judge, self.max_chars, tree.tally)
            if self.mcfg.judges.filter:
                for v in qualified:
                    if v["judge_verdict"] == "rejected":
                        v.update(status="unqualified", reason="judges: unanimously rejected")
                qualified = [v for v in qualified if v["status"] == "qualified"]
        return [self.problem_of(tree, v) for v in qualified]


def mark_verified(v: dict[str, Any], g: Grade) -> None:
    """Set a candidate's status from the grade of its solution against its own answer."""
    if g.score == 1.0:
        v["status"] = "valid"
    elif g.score is None:
        v.update(status="rejected", reason=f"answer not gradable: {g.reason}")
    else:
        v.update(status="rejected", reason=f"answer mismatch: solution gives {g.extracted!r} ({g.reason})")


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


def run_method(cfg: DictConfig, out: RunDir, seeds: list[Problem], grower: SynthBase) -> RunState:
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
    meter = BackendMeter(grower.roles(), cfg.paths.cache_dir)
    shard = out.shard("rollouts", Rollout)
    done = read_rollouts(out)

    def on_done(i: int, result: tuple[list[TreeNode], list[Problem]]) -> None:
        nodes, problems = result
        store.write(nodes, problems)
        log.info("seed %s: %s, %d qualified problem(s)", todo[i].id, nodes[0].status, len(problems))

    t0 = time.perf_counter()
    with GradingPool.from_config(cfg.verifier) as pool, shard:
        writer = RolloutWriter(pool, shard, done)
        engine = Engine(cfg, pool, writer)
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
