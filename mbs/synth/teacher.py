"""The teacher pool and Stage 1 of MagicBeanStalk: rejection-sampled verified traces.

The pool is ``teacher.pool``: an ordered list T_1..T_M of entries ``{name, source, backend,
max_tokens, temperature}``. A ``live`` teacher samples from its backend (built through
:func:`mbs.llm.build_backend`, so every sample goes through the LLM cache); a ``reference``
teacher serves the dataset's own reference solution (CHAMP's step-wise solutions) as the
verified trace.

Stage 1 (seed paper): for a hard seed (p, a*), try T_1..T_M in order; draw up to N_t traces
(tau, a) from each and accept the first whose final answer verifies against a*. A seed with
no verified trace after |T| x N_t attempts is discarded, with the reason recorded.

A thinking teacher's trace is verified on its final answer only (its drafts never count), a trace
cut off while thinking is rejected unread, and the accepted trace keeps its reasoning beside the
written solution (:mod:`mbs.synth.traces`). A trace cut by the token limit (finish reason
``length``) is rejected unread too, thinking or not: an early boxed answer of a solution that
never finished is no verified trace (issue 41, item 5; :data:`CUT_BY_LENGTH_REASON`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mbs.errors import ConfigError
from mbs.llm import CachedBackend, build_backend
from mbs.llm.base import ChatRequest, salted_seed
from mbs.prompts import user_messages
from mbs.reasoning import no_answer_reason
from mbs.records import Problem
from mbs.synth.engine import Tally, Task, Verify, generate
from mbs.synth.problems import clip
from mbs.verify import Grade

SOURCES = ("live", "reference")
#: Grade reason of a Stage-1 trace that ended at the token limit with its answer written.
CUT_BY_LENGTH_REASON = "cut by the token limit (finish reason length): not a full solution (raise teacher.pool.*.max_tokens)"


@dataclass
class Teacher:
    """One entry of the teacher (or judge) pool.

    Attributes:
        name: Name in records (``teacher.pool[i].name``).
        source: ``live`` or ``reference``.
        backend_cfg: Backend config node (live teachers).
        max_tokens: Generation budget in tokens.
        temperature: Sampling temperature.
        seed: Base seed of its requests (the run's ``seed``).
        backend: The cached backend (live teachers; ``None`` for ``reference``).
    """

    name: str
    source: str
    backend_cfg: Any
    max_tokens: int
    temperature: float
    seed: int = 0
    backend: CachedBackend | None = field(default=None, repr=False)

    @property
    def live(self) -> bool:
        return self.source == "live"

    def request(self, messages: list[dict[str, str]], index: int = 0, n: int = 1) -> ChatRequest:
        """Samples ``index .. index+n-1`` of ``messages`` (the same index gives the same sample),
        seeded with the run's seed salted by the prompt (:func:`mbs.llm.base.salted_seed`)."""
        return ChatRequest(
            messages=messages, n=n, max_tokens=self.max_tokens, temperature=self.temperature,
            top_p=1.0, seed=salted_seed(self.seed, json.dumps(messages, sort_keys=True)), first_index=index,
        )


def teachers_from_cfg(pool: Sequence[Any], cache_dir: str | None, seed: int, where: str = "teacher.pool") -> list[Teacher]:
    """Build the pool's teachers in order.

    Raises:
        ValueError: An entry with an unknown source, a live entry without a backend, two
            entries with one name, or an empty pool.
    """
    out: list[Teacher] = []
    for i, entry in enumerate(pool):
        if entry.source not in SOURCES:
            raise ConfigError(f"{where}[{i}].source={entry.source!r}: valid values are {', '.join(SOURCES)}")
        if entry.source == "live" and entry.backend is None:
            raise ConfigError(f"{where}[{i}] ({entry.name}): a live teacher needs a backend")
        if any(t.name == str(entry.name) for t in out):
            raise ConfigError(f"{where}[{i}]: two entries are named {entry.name!r}")
        t = Teacher(
            name=str(entry.name), source=str(entry.source), backend_cfg=entry.backend,
            max_tokens=int(entry.max_tokens), temperature=float(entry.temperature), seed=int(seed),
        )
        if t.live:
            t.backend = build_backend(entry.backend, cache_dir)
        out.append(t)
    if not out:
        raise ConfigError(f"{where} is empty")
    return out


def generator_teacher(pool: Sequence[Teacher], name: str | None, key: str) -> Teacher:
    """The live teacher that decomposes, writes variants and composes (``name``, or the first live one).

    Raises:
        ValueError: ``name`` is not a live teacher of the pool, or the pool has none.
    """
    live = [t for t in pool if t.live]
    if name is not None:
        match = [t for t in live if t.name == str(name)]
        if not match:
            raise ConfigError(f"{key}={name!r} is not a live teacher of teacher.pool: {[t.name for t in live]}")
        return match[0]
    if not live:
        raise ConfigError(f"teacher.pool has no live teacher: {key} needs one to write problems")
    return live[0]


@dataclass
class TraceResult:
    """Outcome of Stage 1 for one seed.

    Attributes:
        trace: The accepted trace, or ``None``.
        teacher: Name of the teacher that produced it.
        index: Sample index of the accepted trace (``None`` for a reference).
        attempts: Every attempt: ``{"teacher", "index", "score", "extracted", "reason"}``.
        reason: Why the seed was discarded (``None`` when accepted).
        reasoning: The accepted trace's thinking when the teacher is a reasoning model, else ``None``.
    """

    trace: str | None
    teacher: str | None
    index: int | None
    attempts: list[dict[str, Any]]
    reason: str | None = None
    reasoning: str | None = None


def find_trace(
    seed: Problem, pool: Sequence[Teacher], n_t: int, template: str, max_chars: int, verifier: str, tally: Tally, batch: int = 1
) -> Task:
    """Stage 1 for one seed: the first verified trace from T_1..T_M, N_t tries each.

    A coroutine (see :mod:`mbs.synth.engine`): samples are drawn ``batch`` at a time per
    round, so one round sends one request per still-unverified seed to the teacher. A sample
    that ended at the token limit (finish reason ``length``) is not verified: its attempt gets
    score 0 and :data:`CUT_BY_LENGTH_REASON` (or the cut-off-while-thinking reason).

    Args:
        seed: The hard seed (p, a*).
        pool: The teacher pool, in order.
        n_t: N_t, traces drawn from each live teacher.
        template: Trace prompt template.
        max_chars: Longest problem text pasted into the prompt (characters).
        verifier: Verifier name for a*.
        tally: Teacher-token tally of the seed.
        batch: Traces drawn per round.

    Returns:
        A :class:`TraceResult`.
    """
    attempts: list[dict[str, Any]] = []
    for t in pool:
        if not t.live:
            if seed.reference_solution:
                # verified like every teacher's trace: a reference whose conclusion the verifier does not
                # grade equal to a* (another form, a typo, no final answer) is not a verified trace
                (g,) = yield Verify([(seed.reference_solution, seed.ground_truth or "", verifier)])
                attempts.append({"teacher": t.name, "index": None, "score": g.score, "extracted": g.extracted,
                                 "reason": f"reference solution shipped with the dataset: {g.reason}"})
                if g.score == 1.0:
                    return TraceResult(seed.reference_solution, t.name, None, attempts)
                continue
            attempts.append({"teacher": t.name, "index": None, "score": None, "extracted": None,
                             "reason": "no reference solution"})
            continue
        messages = user_messages(template, problem=clip(seed.prompt, max_chars))
        for start in range(0, n_t, max(1, batch)):
            count = min(max(1, batch), n_t - start)
            comps = (yield from generate(t, [t.request(messages, start, count)], tally))[0]
            # cut off while thinking, or cut by the token limit after an early answer: rejected unread
            full = [c for c in comps if c.answered and c.finish_reason != "length"]
            graded = iter((yield Verify([(c.text, seed.ground_truth or "", verifier) for c in full])) if full else [])
            for c in comps:
                if not c.answered:
                    g = Grade(0.0, None, no_answer_reason(c.finish_reason))
                elif c.finish_reason == "length":
                    g = Grade(0.0, None, CUT_BY_LENGTH_REASON)
                else:
                    g = next(graded)
                attempts.append({"teacher": t.name, "index": c.sample_index, "score": g.score,
                                 "extracted": g.extracted, "reason": g.reason,
                                 "finish_reason": c.finish_reason, "tokens": c.completion_tokens,
                                 "reasoning_tokens": c.reasoning_tokens})
                if g.score == 1.0:
                    return TraceResult(c.text, t.name, c.sample_index, attempts, reasoning=c.reasoning or None)
    n_live = sum(1 for t in pool if t.live)
    wrong = sum(1 for a in attempts if a["index"] is not None)
    reason = f"no verified trace: {wrong} traces from {n_live} live teacher(s) x N_t={n_t} did not verify"
    if any(not t.live for t in pool):
        ref = [a for a in attempts if a["index"] is None and a["score"] is not None]
        reason += "; the reference solution did not verify" if ref else "; no reference solution"
    return TraceResult(None, None, None, attempts, reason)
