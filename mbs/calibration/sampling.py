"""Drawing and grading rollouts: the engine behind calibration, effectivity tests and filters.

A :class:`Group` is one prompt whose N rollouts are drawn at one budget L and graded against
one ground truth (a problem, or a problem shown with in-context worked examples). :func:`draw`
sends every group's missing samples to the (cached) backend in one batched stream, grades
each completion in the worker pool while generation continues, and appends graded
:class:`~mbs.records.Rollout` records through a :class:`RolloutWriter`. With sequential
early stopping, rollouts are drawn in rounds and a group stops once
:func:`mbs.calibration.settled` says the rest cannot change its decision.

Used by ``mbs-calibrate``, MagicBeanStalk (effectivity tests, variant calibration) and
Golden Goose (difficulty filter).
"""

from __future__ import annotations

import concurrent.futures
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig
from tqdm.auto import tqdm

from mbs.calibration import calibrate_group, settled
from mbs.errors import ConfigError
from mbs.io import Shard
from mbs.llm import build_backend
from mbs.llm.base import ChatRequest, index_runs, salted_seed
from mbs.prompts import user_messages
from mbs.reasoning import final_answer, no_answer_reason
from mbs.records import Calibration, Problem, Rollout
from mbs.verify import Grade
from mbs.verify.pool import GradingPool, GradingPoolError
from mbs.verify.sources import verifier_for


@dataclass
class Policy:
    """A student or teacher: a name, where its samples come from, and its budget L in tokens.

    Attributes:
        name: Policy name in records and figures.
        source: ``live`` (sampled from ``backend``) or ``recorded`` (dataset answers).
        backend: Backend config node (``_target_`` and arguments) for live policies.
        budget: Response budget L in tokens (``None`` for recorded policies).
        model: Recorded model name (recorded policies).
    """

    name: str
    source: str
    backend: Any = None
    budget: int | None = None
    model: str | None = None

    @property
    def live_budget(self) -> int:
        """The budget L in tokens of a live policy.

        Raises:
            ConfigError: The policy has none (a recorded policy).
        """
        if self.budget is None:
            raise ConfigError(f"students: policy {self.name!r} has no budget L")
        return int(self.budget)


def policies_from_cfg(students: DictConfig) -> list[Policy]:
    """The student set, in config order (MBS measures which is weakest: :mod:`mbs.synth.students`).

    Raises:
        ValueError: A policy with an unknown source, or a live policy without a backend.
    """
    out = []
    for slot, p in students.policies.items():
        if p.source not in ("live", "recorded"):
            raise ValueError(f"students.policies.{slot}.source={p.source!r}: valid values are live, recorded")
        if p.source == "live" and p.backend is None:
            raise ValueError(f"students.policies.{slot}: a live policy needs a backend")
        out.append(Policy(name=str(p.name), source=p.source, backend=p.backend, budget=p.budget, model=p.model))
    return out


def messages_for(problem: Problem, templates: Mapping[str, str]) -> list[dict[str, str]]:
    """Chat messages of a problem from the template of its answer type.

    Raises:
        KeyError: No template configured for the answer type.
    """
    if problem.answer_type not in templates:
        raise KeyError(f"calibrate.templates has no template for answer type {problem.answer_type!r} ({problem.id})")
    return user_messages(templates[problem.answer_type], problem=problem.prompt)


@dataclass
class Group:
    """One prompt whose rollouts are drawn at one budget and graded against one answer.

    Attributes:
        id: Written as :attr:`Rollout.problem_id` (a problem id, or e.g. ``<id>#cond`` for the
            same problem shown with worked examples).
        budget: Budget L in tokens (``max_tokens``).
        messages: Chat messages.
        ground_truth: What the verifier checks against.
        verifier: Verifier name or import path.
    """

    id: str
    budget: int
    messages: list[dict[str, str]]
    ground_truth: str
    verifier: str

    @classmethod
    def of(cls, problem: Problem, budget: int, templates: Mapping[str, str], verifier_cfg: Any) -> Group:
        """The plain group of a problem: its template prompt, its ground truth and verifier.

        ``templates``: the prompt template per answer type; ``verifier_cfg``: the ``verifier`` node
        (the config's, or synthesis' resolved copy), whose ``path`` is read.
        """
        return cls(
            id=problem.id,
            budget=int(budget),
            messages=messages_for(problem, templates),
            ground_truth=problem.ground_truth or "",
            verifier=verifier_for(problem, verifier_cfg.path),
        )


class RolloutWriter:
    """Grades completions in the worker pool while generation goes on; appends graded rollouts.

    Rollouts are written in the order their gradings finish to an append-only shard (or only
    kept in memory when ``shard`` is ``None``). Finished gradings are written (and flushed to
    disk) at most every ``write_every_s`` seconds while generation runs, and all of them at each
    :meth:`flush` that waits, so a kill loses at most the gradings of the last ``write_every_s``
    seconds and those in flight (their completions are in the LLM cache: a rerun grades them
    again without a backend call). Answers go to the pool in batches of up to ``grade_batch``
    (one worker task each, :meth:`mbs.verify.pool.GradingPool.submit_many`), sent once full or
    ``grade_wait_s`` after the first of them arrived (checked at each :meth:`add`) and at every
    :meth:`flush` that waits. Each :meth:`add` costs O(1), and at most ``max_pending`` rollouts
    wait for their grade: a backend faster than the graders (an instant one, or a cache full of
    samples) waits for them instead of piling up rollouts in memory.

    Args:
        pool: The grading pool.
        shard: Where graded rollouts are appended (``None``: memory only).
        done: Rollouts already finished, by :attr:`Rollout.key` (filled as they are written): a
            dict, or for a stage that streams its rollouts back from ``shard`` a
            :class:`mbs.calibration.grouping.GroupOutcomes`, which keeps three bits per rollout, so memory
            does not grow with the rollouts.
        write_every_s: Seconds between writes while generation runs (0: every finished grading
            is written at the next :meth:`add`).
        grade_batch: Most answers sent to the grading pool as one task (1: one each).
        grade_wait_s: Seconds an answer may wait for its batch to fill.
        max_pending: Most rollouts submitted and not graded yet; :meth:`add` waits beyond it.

    Attributes:
        progress: Called with the number of gradings each :meth:`flush` took in (e.g. a tqdm
            bar's ``update``: answers graded per second while they are graded), or ``None``.
    """

    def __init__(
        self,
        pool: GradingPool,
        shard: Shard | None,
        done: dict[tuple, Any] | None = None,
        write_every_s: float = 1.0,
        grade_batch: int = 16,
        grade_wait_s: float = 0.25,
        max_pending: int = 4096,
    ):
        self.pool = pool
        self.shard = shard
        self.done: dict[tuple, Any] = {} if done is None else done
        self.write_every_s = float(write_every_s)
        self.grade_batch = max(1, int(grade_batch))
        self.grade_wait_s = float(grade_wait_s)
        self.max_pending = max(self.grade_batch, int(max_pending))
        self.pending: dict[int, tuple[Rollout, Future | None]] = {}  # number -> rollout, grading (None: not sent)
        self._unsent: list[tuple[int, tuple[str, str, str]]] = []  # numbers and answers waiting for their batch
        self._unsent_since = 0.0
        self._finished: deque[int] = deque()  # submission numbers, as their gradings finish (any thread)
        self._ready: list[Rollout] = []  # graded, not written yet
        self._submitted = 0
        self._last_write = time.monotonic()
        self.progress: Callable[[int], None] | None = None

    def add(self, rollout: Rollout, ground_truth: str, verifier: str) -> int:
        """Submit ``rollout`` for grading; write the gradings that have finished (see the class).

        The verifier sees the final answer only (:func:`mbs.reasoning.final_answer`); a rollout
        without one (the budget L ran out inside the thinking) is not graded: reward 0 with
        :data:`mbs.reasoning.CUT_OFF_REASON`, whatever ``\\boxed{}`` guesses its thinking holds.

        Returns:
            The rollout's ticket, for :meth:`wait_graded`.

        Raises:
            GradingPoolError: As :meth:`flush`.
        """
        answer = final_answer(rollout.text, "server", reasoning=rollout.reasoning)
        number = self._submitted
        self._submitted += 1
        if answer is None:
            fut: Future = Future()
            fut.set_result(Grade(0.0, None, no_answer_reason(rollout.finish_reason)))
            self._track(number, rollout, fut)
        else:
            self.pending[number] = (rollout, None)
            if not self._unsent:
                self._unsent_since = time.monotonic()
            self._unsent.append((number, (answer, ground_truth, verifier)))
            if len(self._unsent) >= self.grade_batch or time.monotonic() - self._unsent_since >= self.grade_wait_s:
                self._send()
        self.flush(wait=False)
        while len(self.pending) > self.max_pending:  # backpressure: wait for the oldest grading
            if self._unsent:
                self._send()
            concurrent.futures.wait([self._grading(next(iter(self.pending)))], timeout=1.0)
            self.flush(wait=False)
        return number

    def wait_graded(self, tickets: Sequence[int]) -> None:
        """Wait for the gradings of the rollouts ``tickets`` name (from :meth:`add`): on return
        each has its ``reward``, ``extracted`` and ``reason`` (written at a later :meth:`flush`).

        Generation in other threads goes on meanwhile; the other gradings are not waited for.

        Raises:
            GradingPoolError: The grading pool failed on one of them.
        """
        if any(t in self.pending and self.pending[t][1] is None for t in tickets):
            self._send()
        concurrent.futures.wait([self._grading(t) for t in tickets if t in self.pending])
        failed, took = None, 0
        for t in tickets:
            try:
                took += self._take(t)
            except GradingPoolError as err:
                failed = failed or err
        if self.progress is not None and took:
            self.progress(took)
        if failed is not None:
            raise failed

    def _take(self, number: int) -> bool:
        """Put a finished grading's grade into its rollout and queue it for writing (False: taken
        before).

        Raises:
            GradingPoolError: The grading pool failed on it (it is dropped: a rerun grades it again).
        """
        item = self.pending.pop(number, None)
        if item is None:
            return False
        rollout, fut = item
        assert fut is not None, f"rollout {number} taken before it was sent for grading"
        grade = fut.result()
        rollout.reward, rollout.extracted, rollout.reason = grade.score, grade.extracted, grade.reason
        self._ready.append(rollout)
        return True

    def _grading(self, number: int) -> Future:
        """The grading of pending rollout ``number``, which has been sent (callers send the
        unsent answers first)."""
        fut = self.pending[number][1]
        assert fut is not None, f"rollout {number} was not sent for grading"
        return fut

    def _track(self, number: int, rollout: Rollout, fut: Future) -> None:
        self.pending[number] = (rollout, fut)
        fut.add_done_callback(lambda _f: self._finished.append(number))

    def _send(self) -> None:
        """Send the answers waiting for their batch to the grading pool."""
        batch, self._unsent = self._unsent, []
        futures = self.pool.submit_many([item for _, item in batch])
        for (number, _), fut in zip(batch, futures):
            self._track(number, self.pending[number][0], fut)

    def flush(self, wait: bool) -> None:
        """Write finished gradings (all of them, waiting, when ``wait``; else only once
        ``write_every_s`` passed since the last write).

        Raises:
            GradingPoolError: The grading pool failed (e.g. its workers were killed by the
                SIGTERM SLURM sends on ``scancel`` or preemption while this process goes on
                for a few seconds): the gradings that did finish are written, the others
                are not (a rerun grades them again; their completions are in the LLM cache).
                Not raised while another exception propagates (a ``finally`` block), so it
                never masks e.g. the ``SystemExit`` of submitit's requeue.
        """
        failed = None
        propagating = sys.exc_info()[1] is not None  # called from a ``finally`` an exception runs
        if wait:
            if self._unsent:
                try:
                    self._send()
                except Exception:
                    if not propagating:
                        raise
                    for number, _ in self._unsent:  # never graded: a rerun grades them (LLM cache)
                        self.pending.pop(number, None)
                    self._unsent = []
            numbers = list(self.pending)  # every grading, in submission order
            self._finished.clear()
        else:
            numbers = []
            while self._finished:
                numbers.append(self._finished.popleft())
        took = 0
        for number in numbers:
            try:
                if not self._take(number):
                    continue
            except GradingPoolError as err:  # not graded at all: never stored as "could not grade"
                failed = failed or err
                continue
            took += 1
            if self.progress is not None and wait:
                self.progress(1)  # waiting on them in order: the bar moves as each comes in
        if self.progress is not None and not wait and took:
            self.progress(took)
        if self._ready and (wait or time.monotonic() - self._last_write >= self.write_every_s):
            ready, self._ready = self._ready, []
            if self.shard is not None:
                self.shard.append(ready)
            for r in ready:
                self.done[r.key] = r
            self._last_write = time.monotonic()
        if failed is not None and not propagating:
            raise failed  # (in a ``finally`` that an exception runs, e.g. submitit's requeue exit, that one goes on)


def draw(
    policy: Policy,
    groups: Sequence[Group],
    n: int,
    writer: RolloutWriter,
    cache_dir: str | None,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    early_stop: DictConfig | dict | None = None,
    stats: Counter | None = None,
    desc: str = "rollouts",
) -> dict[tuple[str, int], list[Rollout]]:
    """Draw, grade and write ``n`` rollouts per group for a live policy.

    Samples already in ``writer.done`` are not drawn again; the LLM cache serves any sample
    generated before (so a rerun makes no backend call). With ``early_stop`` (``enabled``,
    ``batch``, ``decision``, ``alpha``) rollouts are drawn in rounds of ``batch`` and a group
    stops as soon as :func:`mbs.calibration.settled` holds; sample ``i`` is the same draw either
    way (seeded by index), so decisions are identical to drawing all ``n``.

    Speculative rounds (a backend with ``cancels_requests``, the batched llama.cpp engine): every
    round of every group goes to the backend in one call, rounds first (round 1 of every group,
    then round 2, ...), so the batch stays full while a group's earlier round decodes. A group is
    decided round by round in order, as sequential early stopping decides it, and once settled
    its rounds not yet started are cancelled; the rounds that were already decoding finish into
    the LLM cache but are not recorded (``stats["rollouts_speculated"]`` counts them). The
    rollouts written and the decisions are those of drawing round after round. Other backends
    (servers, vLLM, transformers) get one call per round. Within a round, requests go longest
    budget first (:func:`longest_first`).

    Args:
        policy: A live policy.
        groups: The prompts to sample.
        n: Rollouts N per group.
        writer: Grades and stores rollouts.
        cache_dir: LLM cache folder.
        temperature: Sampling temperature.
        top_p: Nucleus mass.
        seed: Base seed.
        early_stop: Early-stopping settings, or ``None``.
        stats: Counter receiving ``rollouts_saved`` (not drawn thanks to early stopping) and
            ``rollouts_speculated`` (drawn ahead for a group that then settled, not recorded).
        desc: Progress-bar label.

    Returns:
        ``{(group id, budget): rollouts sorted by sample index}`` for every group (what
        ``writer.done`` keeps of them: see :class:`RolloutWriter`).

    Raises:
        mbs.llm.BackendError: The backend failed after its retries (finished work is kept).
    """
    backend = build_backend(policy.backend, cache_dir)
    es = early_stop if early_stop is not None and early_stop["enabled"] else None
    step = int(es["batch"]) if es else n
    stats = stats if stats is not None else Counter()
    bar = tqdm(total=len(groups) * n, desc=desc, unit="rollout", dynamic_ncols=True, leave=False)
    bar.update(sum(1 for g in groups for i in range(n) if (g.id, policy.name, g.budget, i) in writer.done))
    rounds = [(start, min(start + step, n)) for start in range(0, n, step)]
    t0, tokens0 = time.perf_counter(), backend.stats.completion_tokens

    def record(g: Group, completions: Sequence[Any]) -> list[tuple[int, Rollout]]:
        """Write a group's completions as rollouts (graded in the pool); (ticket, rollout) of each."""
        out = []
        for c in completions:
            rollout = Rollout(
                problem_id=g.id, policy=policy.name, budget=g.budget, sample_index=c.sample_index,
                text=c.text, prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens,
                finish_reason=c.finish_reason, latency_s=c.latency_s, cached=c.cached,
                reasoning=c.reasoning, reasoning_tokens=c.reasoning_tokens,
            )
            out.append((writer.add(rollout, g.ground_truth, g.verifier), rollout))
        bar.update(len(completions))
        dt = time.perf_counter() - t0
        if dt > 0:
            bar.set_postfix(tok_s=f"{(backend.stats.completion_tokens - tokens0) / dt:.1f}", refresh=False)
        return out

    def todo(g: Group, start: int, stop: int) -> list[int]:
        return [i for i in range(start, stop) if (g.id, policy.name, g.budget, i) not in writer.done]

    def request(first: int, count: int, g: Group) -> ChatRequest:
        return ChatRequest(messages=g.messages, n=count, max_tokens=g.budget, temperature=float(temperature),
                           top_p=float(top_p), seed=salted_seed(int(seed), g.id), first_index=first)

    if es and len(rounds) > 1 and getattr(backend, "cancels_requests", False):
        _speculate(groups, rounds, n, es, writer, backend, stats, bar, record, todo, request, policy.name)
    else:
        active = list(groups)
        for start, stop in rounds:
            if not active:
                break
            requests, meta = [], []
            for _, g in longest_first(active):
                for first, count in index_runs(todo(g, start, stop)):
                    requests.append(request(first, count, g))
                    meta.append(g)
            for ri, completions in backend.generate_iter(requests):
                record(meta[ri], completions)
            writer.flush(wait=True)
            if es:
                still = []
                for g in active:
                    drawn = [writer.done[(g.id, policy.name, g.budget, i)] for i in range(stop)]
                    if settled(drawn, n, es["decision"], float(es["alpha"])):
                        if stop < n:
                            stats["rollouts_saved"] += n - stop
                            bar.update(n - stop)
                    else:
                        still.append(g)
                active = still
    bar.close()
    out: dict[tuple[str, int], list[Rollout]] = {}
    for g in groups:
        rs = [writer.done[k] for i in range(n) if (k := (g.id, policy.name, g.budget, i)) in writer.done]
        out[(g.id, g.budget)] = rs
    return out


def longest_first(groups: Sequence[Group]) -> list[tuple[int, Group]]:
    """``(position, group)`` pairs, the largest budget L first (stable within a budget).

    A batched backend starts requests in the order given and keeps its batch full while any
    wait; the last to start finish alone. Starting the longest budgets first leaves the short ones
    for that tail. The samples are the same in any order (each depends on its seed and index).
    """
    return sorted(enumerate(groups), key=lambda t: -t[1].budget)


def _speculate(groups, rounds, n, es, writer, backend, stats, bar, record, todo, request, name) -> None:
    """Every round of every group in one backend call, decided round by round (see :func:`draw`)."""
    graded: list[dict[int, Rollout]] = [{} for _ in groups]  # per group: sample index -> rollout recorded here
    nxt = [0] * len(groups)  # per group: the next round to decide
    closed: set[int] = set()  # groups decided (settled, or every round recorded)
    arrived: dict[tuple[int, int], list] = {}  # (group, round) -> completions in, not recorded yet
    missing: dict[tuple[int, int], int] = {}  # (group, round) -> requests of it not in yet
    runs = {(gi, r): index_runs(todo(g, a, b)) for r, (a, b) in enumerate(rounds) for gi, g in enumerate(groups)}
    for key, rs in runs.items():
        missing[key] = len(rs)

    def advance(gi: int) -> None:
        """Record and decide group ``gi``'s rounds in order, as far as they are in."""
        g = groups[gi]
        while gi not in closed and missing[(gi, nxt[gi])] == 0:
            r = nxt[gi]
            comps = sorted(arrived.pop((gi, r), []), key=lambda c: c.sample_index)
            written = record(g, comps)
            writer.wait_graded([t for t, _ in written])
            for _, rollout in written:
                graded[gi][rollout.sample_index] = rollout
            nxt[gi] += 1
            stop = rounds[r][1]
            drawn = [writer.done[k] if (k := (g.id, name, g.budget, i)) in writer.done else graded[gi][i] for i in range(stop)]
            if settled(drawn, n, es["decision"], float(es["alpha"])):
                closed.add(gi)
                if stop < n:
                    stats["rollouts_saved"] += n - stop
                    bar.update(n - stop)
            elif nxt[gi] == len(rounds):
                closed.add(gi)

    drawn0 = backend.stats.samples  # samples the backend drew before this call
    for gi in range(len(groups)):  # rounds written before (a resumed run) decide first
        advance(gi)
    requests, meta = [], []
    for r in range(len(rounds)):  # rounds first, so a group's later rounds start only once every first round has
        for gi, g in longest_first(groups):
            if gi not in closed:
                for first, count in runs[(gi, r)]:
                    requests.append(request(first, count, g))
                    meta.append((gi, r))
    for ri, completions in backend.generate_iter(requests, skip=lambda ri: meta[ri][0] in closed):
        gi, r = meta[ri]
        if gi in closed:  # drawn ahead for a group that has settled since: in the LLM cache, not recorded
            continue
        arrived.setdefault((gi, r), []).extend(completions)
        missing[(gi, r)] -= 1
        advance(gi)
    writer.flush(wait=True)
    # drawn and not recorded: whole requests of settled groups, and the samples a request had
    # started before its group settled and the rest was cancelled (such a request is never yielded)
    recorded = sum(not r.cached for rs in graded for r in rs.values())  # drawn in this call and recorded
    stats["rollouts_speculated"] += backend.stats.samples - drawn0 - recorded


def calibrate(
    policy: Policy,
    groups: Sequence[Group],
    n: int,
    writer: RolloutWriter,
    cache_dir: str | None,
    *,
    decision: str = "band",
    alpha: float = 0.5,
    early_stop: bool = False,
    batch: int = 2,
    **sampling: Any,
) -> dict[tuple[str, int], Calibration]:
    """Draw rollouts (see :func:`draw`) and summarise each group into a :class:`Calibration`.

    Args:
        decision: ``band`` or ``above_alpha`` (what early stopping must keep identical).
        alpha: Threshold of ``above_alpha`` (alpha_leaf, alpha_parent).
        early_stop: Draw in rounds of ``batch`` and stop settled groups.
        batch: Rollouts per round.
        **sampling: ``temperature``, ``top_p``, ``seed``, ``stats``, ``desc`` for :func:`draw`.
    """
    es = {"enabled": early_stop, "batch": batch, "decision": decision, "alpha": alpha}
    drawn = draw(policy, groups, n, writer, cache_dir, early_stop=es, **sampling)
    rounds = batch if early_stop else None  # the rule each group's pass_rate_est is unbiased under
    return {key: calibrate_group(rs, n, decision, alpha, rounds) for key, rs in drawn.items() if rs}
