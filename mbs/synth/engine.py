"""Batched execution of the per-seed synthesis coroutines: operations, scheduler, engine, tally.

Each hard seed is grown by its own generator function (a coroutine)
that reads like the paper's sequential procedure but never calls a model itself: it *yields*
an operation and receives its result::

    completions = yield Generate(teacher, [request])        # teacher samples
    grades      = yield Verify([(solution, answer, "math")])  # grading pool
    cals        = yield Calibrate(policy, [group], n, ...)    # student rollouts (mbs.calibration.sampling)
    results     = yield Gather([sub_coroutine, ...])          # run sub-steps side by side

:func:`run_tasks` advances every seed (and every sub-step gathered inside a seed) until each
is waiting on an operation, then executes all waiting operations of that round together: one
``generate`` call per teacher with every request of the round, one :func:`mbs.calibration.sampling.calibrate`
call per (policy, decision), one grading-pool ``map``. So teacher and student backends get
whole batches across seeds and tree nodes, never one request at a time, while the per-seed
logic stays a plain top-down reading of the method. Results depend only on each operation's
inputs (the LLM cache is content-addressed and samples are seeded by index), so batching
never changes what a seed produces.

Bottom of the ``mbs.synth`` ladder: imports no other ``mbs.synth`` module but its settings.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from mbs.calibration.sampling import Group, Policy, RolloutWriter, calibrate
from mbs.llm.base import ChatRequest, Completion
from mbs.synth.settings import Sampling
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
        tally: The seed's :class:`Tally`: the rollouts drawn and their tokens are added to it.
    """

    policy: Policy
    groups: list[Group]
    n: int
    decision: str = "band"
    alpha: float = 0.5
    early_stop: bool = True
    tally: Tally | None = None


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
        sampling: How student rollouts are drawn (every round uses the same settings).
        pool: The grading pool.
        writer: Grades and stores student rollouts (its ``done`` holds rollouts already drawn).
    """

    def __init__(self, sampling: Sampling, pool: GradingPool, writer: RolloutWriter):
        self.early_stop = sampling.early_stop
        self.early_stop_batch = sampling.early_stop_batch
        self.temperature = sampling.temperature
        self.top_p = sampling.top_p
        self.seed = sampling.seed
        self.cache_dir = sampling.cache_dir
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
                es = bool(op.early_stop and self.early_stop)
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
                policy, list(groups.values()), n, self.writer, self.cache_dir,
                decision=decision, alpha=alpha, early_stop=es, batch=self.early_stop_batch,
                temperature=self.temperature, top_p=self.top_p,
                seed=self.seed, stats=self.stats, desc=f"{policy.name} ({decision})",
            )
            for i in idx:
                out[i] = [cals[(g.id, g.budget)] for g in ops[i].groups]
                if ops[i].tally is not None:
                    ops[i].tally.add_rollouts(out[i])
        return out


# --------------------------------------------------------------------------------------
# Per-seed accounting
# --------------------------------------------------------------------------------------


@dataclass
class Tally:
    """The work spent on one seed, teachers (judges included) and students (cached samples count
    too: they were paid for once). What a cost-matched comparison matches (issue 29).

    Attributes:
        teacher_tokens: Completion tokens of every teacher sample the seed used.
        teacher_samples: Teacher samples the seed used.
        teacher_prompt_tokens: Prompt tokens of the teacher requests (once per request: the
            ``n`` samples of one request share their prompt).
        student_rollouts: Student rollouts drawn for the seed (effectivity tests, leaf and
            parent filters, the target's qualification).
        student_tokens: Completion tokens of those rollouts.
    """

    teacher_tokens: int = 0
    teacher_samples: int = 0
    teacher_prompt_tokens: int = 0
    student_rollouts: int = 0
    student_tokens: int = 0

    def add(self, completions: Iterable[Iterable[Completion]]) -> None:
        """Add teacher samples: one list of completions per request."""
        for comps in completions:
            comps = list(comps)
            if comps:
                self.teacher_prompt_tokens += max(c.prompt_tokens for c in comps)
            for c in comps:
                self.teacher_tokens += c.completion_tokens
                self.teacher_samples += 1

    def add_rollouts(self, calibrations: Iterable[Any]) -> None:
        """Add the rollouts of student calibrations (:class:`mbs.records.Calibration`)."""
        for c in calibrations:
            self.student_rollouts += int(c.n)
            self.student_tokens += int(c.completion_tokens)

    @property
    def all_tokens(self) -> int:
        """Every token spent: teacher prompt and completion tokens and student completion tokens.
        Student prompt tokens are left out: a group's prompt is evaluated once for its N rollouts."""
        return self.teacher_prompt_tokens + self.teacher_tokens + self.student_tokens

    def as_dict(self) -> dict[str, int]:
        """The counts, for a root's metadata (``metadata.mbs`` / ``metadata.direct``)."""
        return {"teacher_tokens": self.teacher_tokens, "teacher_samples": self.teacher_samples,
                "teacher_prompt_tokens": self.teacher_prompt_tokens, "student_rollouts": self.student_rollouts,
                "student_tokens": self.student_tokens, "all_tokens": self.all_tokens}


def generate(teacher: Any, requests: list[ChatRequest], tally: Tally) -> Task:
    """Yield a :class:`Generate`, add the samples to ``tally``, return the completions."""
    comps = yield Generate(teacher, requests)
    tally.add(comps)
    return comps
