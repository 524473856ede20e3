"""Deterministic stand-ins for unit tests (the real backends are tested against real models).

``FakeBackend`` satisfies :class:`mbs.llm.base.Backend`. Sample ``i`` of a prompt is correct
iff ``u_i`` falls below the pass rate configured for the first ``rates`` key found in the prompt,
where ``u_i`` is a golden-ratio sequence started at a stable hash of (prompt, seed)
(:func:`_stratified`): any 4 consecutive samples hit both halves of [0, 1), so a problem at rate
0.5 is Goldilocks at N >= 4 whatever its (problem-salted) seed, and every test can aim for
solved_all, Goldilocks or failed_all problems and get the same samples on every run.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Sequence

from mbs.llm.base import BackendError, BackendStats, ChatRequest, Completion

#: The golden ratio's fractional part: consecutive samples step around [0, 1) by it.
_PHI = 0.6180339887498949


def _stratified(prompt: str, seed: int, index: int) -> float:
    """Sample ``index``'s uniform number in [0, 1): a start hashed from (prompt, seed), then ``index``
    golden-ratio steps (4 consecutive points leave no gap of 0.5 or more)."""
    start = int.from_bytes(hashlib.sha256(f"{prompt}|{seed}".encode()).digest()[:8], "little") / 2**64
    return (start + index * _PHI) % 1.0


class FakeBackend:
    """A scripted backend.

    Args:
        answers: prompt substring -> correct answer written in ``\\boxed{}``.
        rates: prompt substring -> probability (0..1) that a sample is correct.
        default_rate: pass rate for prompts matching no key.
        truncate: prompt substrings whose samples end with finish reason ``length``.
        fail_after: raise :class:`BackendError` once this many samples were produced (a kill).
        name: backend kind.
        wrong: the boxed answer of an incorrect sample, formatted with ``h`` (0..96, from the
            sample's hash): ``wrong{h}`` by default (sympy reads it as a product of symbols,
            ~7 ms a grading); ``1{h:02d}`` gives numbers (100..196) graded in ~0.1 ms, as a
            real policy's wrong numbers are.
    """

    preferred_batch = 4

    def __init__(
        self,
        answers: dict | None = None,
        rates: dict | None = None,
        default_rate: float = 0.0,
        truncate: Sequence[str] = (),
        fail_after: int | None = None,
        name: str = "fake",
        wrong: str = "wrong{h}",
    ):
        self.answers = dict(answers or {})
        self.rates = dict(rates or {})
        self.default_rate = default_rate
        self.truncate = tuple(truncate)
        self.fail_after = fail_after
        self.name = name
        self.wrong = wrong
        self.stats = BackendStats()
        self.requests: list[ChatRequest] = []

    @property
    def model_id(self) -> str:
        return f"fake@{sorted(self.rates.items())}"

    def _lookup(self, table: dict, prompt: str, default):
        for key, value in table.items():
            if key in prompt:
                return value
        return default

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            self.requests.append(req)
            prompt = req.messages[-1]["content"]
            rate = self._lookup(self.rates, prompt, self.default_rate)
            answer = self._lookup(self.answers, prompt, "0")
            comps = []
            for idx in req.indices:
                if self.fail_after is not None and self.stats.samples >= self.fail_after:
                    raise BackendError("fake backend: killed")
                h = int.from_bytes(hashlib.sha256(f"{prompt}|{req.seed}|{idx}".encode()).digest()[:8], "little")
                correct = _stratified(prompt, req.seed, idx) < rate
                text = f"Working... so the answer is \\boxed{{{answer if correct else self.wrong.format(h=h % 97)}}}."
                length = any(t in prompt for t in self.truncate)
                comps.append(
                    Completion(
                        text=text,
                        prompt_tokens=len(prompt.split()),
                        completion_tokens=req.max_tokens if length else 12,
                        finish_reason="length" if length else "stop",
                        sample_index=idx,
                    )
                )
                self.stats.samples += 1
            self.stats.calls += 1
            out.append(comps)
        return out

    def close(self) -> None:
        pass


class StreamingFakeBackend(FakeBackend):
    """:class:`FakeBackend` as the batched llama.cpp engine serves a call: every request of it at
    once (``preferred_batch``), each sample handed to ``on_sample`` as it is made, and ``skip``
    asked before each sample (``cancels_requests``). ``pause_s`` seconds pass before each sample
    (the consumer decides meanwhile). ``skipped`` lists the requests it cancelled.
    """

    preferred_batch = 1 << 20
    streams_samples = cancels_requests = True

    def __init__(self, *args, pause_s: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.pause_s = float(pause_s)
        self.skipped: list[ChatRequest] = []

    def generate(self, requests: Sequence[ChatRequest], on_sample: Callable | None = None,
                 skip: Callable[[int], bool] | None = None) -> list[list[Completion | None]]:
        import time

        out: list[list[Completion | None]] = []
        for k, req in enumerate(requests):
            comps: list[Completion | None] = [None] * req.n
            for j, idx in enumerate(req.indices):
                time.sleep(self.pause_s)
                if skip is not None and skip(k):
                    self.skipped.append(req)
                    break
                comps[j] = comp = super().generate([req.split([idx])[0]])[0][0]
                if on_sample is not None:
                    on_sample(k, comp)
            out.append(comps)
        return out


def fake_backend_overrides(**extra: str) -> list[str]:
    """Overrides that point the default student at :class:`support.fakes.FakeBackend`."""
    return [
        "~backend",
        "+backend._target_=support.fakes.FakeBackend",
        "+backend.label=fake",
        "+backend.answers={EASY: '2', MIXED: '5', HARD: '56', CUT: '5'}",
        "+backend.rates={EASY: 1.0, MIXED: 0.5, HARD: 0.0, CUT: 0.5}",
        "+backend.truncate=[CUT]",
        *[f"+backend.{k}={v}" for k, v in extra.items()],
    ]
