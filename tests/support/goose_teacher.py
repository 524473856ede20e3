"""Scripted stand-ins for the Golden Goose teacher and an MCQ-answering student.

Both satisfy :class:`mbs.llm.base.Backend` and are selected by ``_target_`` like
:class:`support.fakes.FakeBackend`:

* :class:`ScriptedTeacher` answers each prompt with the reply scripted for the first key found
  in it (a list of replies gives one per sample index, i.e. per teacher attempt), so tests can
  feed deliberately bad teacher output (span not in the passage, duplicate distractors, ...).
* :class:`ChoiceStudent` reads the lettered options of a Goose question and picks the option
  containing a configured text with a configured probability (else a uniformly random other
  option); with no matching key it guesses uniformly, a policy at chance.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from mbs.llm.base import BackendError, BackendStats, ChatRequest, Completion, split_completion


def _unit(*parts: object) -> float:
    h = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:8], "little") / 2**64


#: A scripted reply that makes a thinking backend run out of budget while still thinking.
CUT = "<<cut off while thinking>>"


class _Scripted:
    """``think``: a family of :data:`support.thinking.FAMILIES` (``qwen3``, ``r1``, ``harmony_raw``,
    ...): each reply is written after a long thinking that mentions every tag, and split back with
    the family's reasoning format, as the vLLM and llama.cpp backends do."""

    preferred_batch = 4

    def __init__(self, fail_after: int | None, name: str, think: str | None = None):
        self.fail_after = fail_after
        self.name = name
        self.think = think
        self.stats = BackendStats()
        self.requests: list[ChatRequest] = []

    def _thought(self, text: str, cut: bool = False) -> tuple[str, str]:
        """The raw response of a thinking model whose final answer is ``text`` (``cut``: cut off
        while thinking, ``text`` said only inside the thinking), and its reasoning format."""
        from support.thinking import CUT_FAMILY, FAMILIES, cut_off

        fmt, build = FAMILIES[self.think]
        if cut:
            return cut_off(CUT_FAMILY[self.think], guess="4").replace("\\boxed{4}", text), fmt
        return build(text), fmt

    def _reply(self, prompt: str, req: ChatRequest, idx: int) -> str:
        raise NotImplementedError

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        out = []
        for req in requests:
            self.requests.append(req)
            prompt = req.messages[-1]["content"]
            comps = []
            for idx in req.indices:
                if self.fail_after is not None and self.stats.samples >= self.fail_after:
                    raise BackendError(f"{self.name}: killed")
                text = self._reply(prompt, req, idx)
                comp = Completion(text=text, prompt_tokens=len(prompt.split()), completion_tokens=len(text.split()), sample_index=idx)
                if self.think:
                    comp.text, fmt = self._thought("", cut=True) if text == CUT else self._thought(text)
                    comp.finish_reason = "length" if text == CUT else "stop"
                    split_completion(comp, fmt)
                comps.append(comp)
                self.stats.samples += 1
            self.stats.calls += 1
            out.append(comps)
        return out

    def close(self) -> None:
        pass


class ScriptedTeacher(_Scripted):
    """Replies scripted by prompt substring.

    Args:
        replies: prompt substring -> reply text, or a list of replies (sample index i gets
            ``replies[min(i, len - 1)]``); the first key found in the prompt wins.
        default: Reply for prompts matching no key.
        fail_after: Raise :class:`BackendError` once this many samples were produced (a kill).
        name: Backend kind.
    """

    def __init__(self, replies: dict | None = None, default: str = "no idea", fail_after: int | None = None,
                 name: str = "scripted-teacher", think: str | None = None):
        super().__init__(fail_after, name, think)
        self.replies = dict(replies or {})
        self.default = default

    @property
    def model_id(self) -> str:
        return f"scripted-teacher@{hashlib.sha256(repr((sorted(self.replies.items()), self.think)).encode()).hexdigest()[:12]}"

    def _reply(self, prompt: str, req: ChatRequest, idx: int) -> str:
        for key, reply in self.replies.items():
            if key in prompt:
                if isinstance(reply, (list, tuple)):
                    return str(reply[min(idx, len(reply) - 1)])
                return str(reply)
        return self.default


_OPTION = re.compile(r"^([A-J])\. (.*)$")


def parse_options(prompt: str) -> dict[str, str]:
    """Letter -> option text of a Goose question (continuation lines un-indented)."""
    body = prompt.split("\nOptions:\n", 1)[-1]
    options: dict[str, str] = {}
    last = None
    for line in body.splitlines():
        m = _OPTION.match(line)
        if m:
            last = m.group(1)
            options[last] = m.group(2)
        elif last is not None and line.startswith("   "):
            options[last] += "\n" + line[3:]
    return options


class ChoiceStudent(_Scripted):
    """Answers Goose questions with ``Answer: X``.

    Args:
        picks: option text -> probability of choosing the option that contains it.
        truncate: With this probability a sample ends on the budget without an answer.
        fail_after: Raise :class:`BackendError` once this many samples were produced.
        name: Backend kind.
    """

    def __init__(self, picks: dict | None = None, truncate: float = 0.0, fail_after: int | None = None,
                 name: str = "choice-student", think: str | None = None):
        super().__init__(fail_after, name, think)
        self.picks = dict(picks or {})
        self.truncate = truncate

    @property
    def model_id(self) -> str:
        return f"choice-student@{hashlib.sha256(repr((sorted(self.picks.items()), self.think)).encode()).hexdigest()[:12]}"

    def _reply(self, prompt: str, req: ChatRequest, idx: int) -> str:
        options = parse_options(prompt)
        letters = sorted(options)
        if not letters:
            return "I cannot find any options."
        u, v = _unit(prompt, req.seed, idx, "pick"), _unit(prompt, req.seed, idx, "other")
        target = next((L for key, _ in self.picks.items() for L in letters if key in options[L]), None)
        rate = next((r for key, r in self.picks.items() if target and key in options[target]), None)
        if target is not None and rate is not None:
            others = [L for L in letters if L != target]
            letter = target if u < rate or not others else others[int(v * len(others))]
        else:
            letter = letters[int(u * len(letters))]
        return f"Let me compare the options.\nAnswer: {letter}"

    def generate(self, requests: Sequence[ChatRequest]) -> list[list[Completion]]:
        out = super().generate(requests)
        for req, comps in zip(requests, out):
            for c in comps:
                if _unit(req.messages[-1]["content"], req.seed, c.sample_index, "cut") < self.truncate:
                    c.text, c.finish_reason, c.completion_tokens = "Let me compare the", "length", req.max_tokens
                    if self.think:  # cut off while thinking, after naming the right option in the thinking
                        right = next((L for key in self.picks for L, o in parse_options(req.messages[-1]["content"]).items() if key in o), "A")
                        c.text, fmt = self._thought(f"Answer: {right}", cut=True)
                        split_completion(c, fmt)
        return out


def student_overrides(**extra: str) -> list[str]:
    """Overrides that make :class:`ChoiceStudent` the default student (and teacher pool's first backend)."""
    return [
        "~backend",
        "+backend._target_=support.goose_teacher.ChoiceStudent",
        "+backend.label=student",
        *[f"+backend.{k}={v}" for k, v in extra.items()],
    ]
