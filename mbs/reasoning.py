"""Reasoning (thinking) models: where the thinking ends and the final answer begins.

Every grader and parser of model output reads the *final answer* only. This module is the one
place that decides it, from a raw response and the model's reasoning format:

* ``auto`` (the default, where no format is configured): the shapes only a thinking model
  writes are recognised, so a forgotten setting never grades thinking. A model that does not
  think never writes ``<think>`` or harmony channel tokens, so for it this is ``none``. Raw
  harmony channel tokens (or the stripped ``analysis...assistantfinal`` form, or a stripped
  ``analysisWe need...`` with no final channel yet) are split as
  ``harmony``; a closed ``<think>...</think>`` (or a lone ``</think>``: the template opened the
  thinking) is thinking, the text after the last ``</think>`` the answer; an unterminated
  ``<think>`` is a response cut off while thinking (no answer).
* ``none``: no thinking; the whole response is the answer (SmolLM2, Llama, ...). Only where a
  user names it: the whole text is graded, thinking included.
* ``think``: ``<think> ... </think> answer`` (Qwen3 hybrid models). A response without any tag
  is all answer (Qwen3 with ``enable_thinking: false`` emits an empty ``<think>\\n\\n</think>``
  block or none); one that opened ``<think>`` and never closed it was cut off while thinking.
* ``think_open``: the chat template opens the thinking itself (DeepSeek-R1, QwQ, Qwen3-*-Thinking-2507),
  so the output holds only ``... </think> answer``; no ``</think>`` means cut off while thinking.
* ``harmony``: gpt-oss channels, raw
  (``<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>``)
  or decoded with special tokens skipped (``analysis...assistantfinal...``, what vLLM's offline
  engine and verl's ``tokenizer.decode(..., skip_special_tokens=True)`` give). No final channel
  means cut off while thinking.
* ``server``: the server splits the reasoning off itself (vLLM ``--reasoning-parser``, hosted
  reasoning APIs): the text is already the answer.

Whatever the format, a backend that received the reasoning in a separate field
(``reasoning_content`` / ``reasoning``) passes it as ``reasoning=``: the text is then the answer,
and an empty answer after some reasoning means the thinking never finished.

A response with no final answer (budget L spent inside the thinking) is never graded: every
caller turns it into reward 0 with :data:`CUT_OFF_REASON` (:func:`no_answer_reason`), so a
``\\boxed{}`` guess inside the thinking can never be rewarded, in calibration or in verl's
:func:`mbs.rewards.compute_score`.

Example::

    >>> split_response("<think>maybe \\\\boxed{3}?</think>The answer is \\\\boxed{4}.", "think").answer
    'The answer is \\\\boxed{4}.'
    >>> split_response("<think>maybe \\\\boxed{3}", "think").answer is None
    True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CUT_OFF_REASON",
    "DEFAULT_FORMAT",
    "FORMATS",
    "ReasoningConfig",
    "Split",
    "final_answer",
    "no_answer_reason",
    "split_response",
]

#: Reasoning formats understood by :func:`split_response`.
FORMATS = ("auto", "none", "think", "think_open", "harmony", "server")
#: The format where none is configured (compute_score, backends, calibration, training).
DEFAULT_FORMAT = "auto"

#: Grade reason of a response cut off by the budget L while still thinking.
CUT_OFF_REASON = "no answer: cut off while thinking (budget L ran out inside the reasoning)"
#: Grade reason of a response whose thinking ended but which gave no final answer.
EMPTY_REASON = "no answer: the reasoning ended without a final answer"

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
# Raw harmony: a final-channel header (an optional ``<|constrain|>`` before the message).
_H_FINAL = re.compile(r"<\|channel\|>\s*final\b[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>")
_H_MESSAGE = re.compile(r"<\|channel\|>\s*(\w+)[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?=<\|end\|>|<\|start\|>|<\|return\|>|<\|call\|>|$)", re.DOTALL)
_H_END_TOKENS = ("<|return|>", "<|end|>", "<|call|>")
# Stripped harmony: special tokens removed leave ``analysis`` + text + ``assistantfinal`` + answer.
_H_STRIPPED_FINAL = re.compile(r"assistantfinal(?: ?json)?")
_H_STRIPPED_START = re.compile(r"^\s*(?:assistant\s*)?analysis")
# Stripped harmony as ``auto`` recognises it without a final channel: ``analysis`` glued to the
# first word of the thinking ("analysisWe need"), which no prose writes.
_H_STRIPPED_GLUED = re.compile(r"^\s*(?:assistant)?analysis(?=[A-Z])")
# Raw harmony special tokens: only gpt-oss writes them.
_H_RAW = re.compile(r"<\|(?:channel|message|start|end|return|constrain|call)\|>")


@dataclass(frozen=True)
class Split:
    """A response split into its thinking and its final answer.

    Attributes:
        reasoning: The thinking text (``""`` when there is none).
        answer: The final answer text, or ``None`` when the response has none (it ended
            inside the thinking: cut off by the budget L, or the thinking never closed).
    """

    reasoning: str
    answer: str | None

    @property
    def thinking_done(self) -> bool:
        """False when the response ended inside the thinking (no final answer)."""
        return self.answer is not None


def split_response(text: str, fmt: str = DEFAULT_FORMAT, *, reasoning: str | None = None) -> Split:
    """Split a raw response into reasoning and final answer for a reasoning format.

    Args:
        text: The raw response (the message content, or verl's decoded response).
        fmt: One of :data:`FORMATS`.
        reasoning: The reasoning when the server returned it in a separate field; ``text`` is
            then the answer as is (``fmt`` is not applied), and an empty ``text`` after a
            non-empty reasoning means the thinking never finished.

    Returns:
        The :class:`Split`; ``answer`` is ``None`` when the response has no final answer.
        With formats ``none`` and ``server`` (and ``auto`` when the text shows no thinking)
        the answer is ``text`` unchanged; otherwise
        ``reasoning`` and ``answer`` are stripped of surrounding whitespace and of the
        format's markers.

    Raises:
        ValueError: ``fmt`` is not a known format.
    """
    text = text or ""
    if fmt not in FORMATS:
        raise ValueError(f"unknown reasoning format {fmt!r}; valid formats: {', '.join(FORMATS)}")
    if reasoning is not None:
        if not text.strip() and reasoning.strip():
            return Split(reasoning.strip(), None)
        return Split(reasoning.strip(), text.strip())
    if fmt in ("none", "server"):
        return Split("", text)
    if fmt == "auto":
        return _split_auto(text)
    if fmt in ("think", "think_open"):
        return _split_think(text, opened_by_template=fmt == "think_open")
    return _split_harmony(text)


def _split_think(text: str, opened_by_template: bool) -> Split:
    head, closed, tail = text.partition(_THINK_CLOSE)
    if closed:
        thinking = head.strip()
        if thinking.startswith(_THINK_OPEN):
            thinking = thinking[len(_THINK_OPEN):].strip()
        return Split(thinking, tail.strip())
    stripped = text.strip()
    if stripped.startswith(_THINK_OPEN):
        return Split(stripped[len(_THINK_OPEN):].strip(), None)
    if opened_by_template:
        return Split(stripped, None)
    return Split("", stripped)


def _split_auto(text: str) -> Split:
    """The ``auto`` format: recognise the shapes only a thinking model writes (module doc)."""
    if _H_RAW.search(text):
        return _split_harmony(text)
    if _H_STRIPPED_START.match(text) and _H_STRIPPED_FINAL.search(text) or _H_STRIPPED_GLUED.match(text):
        return _split_harmony(text)
    if _THINK_CLOSE in text:
        head, _, tail = text.rpartition(_THINK_CLOSE)
        thinking = head.replace(_THINK_OPEN, "").replace(_THINK_CLOSE, "\n").strip()
        if _THINK_OPEN in tail:  # a new thinking block opened after the last one and never closed
            before, _, after = tail.partition(_THINK_OPEN)
            return Split("\n".join(t for t in (thinking, after.strip()) if t), None)
        return Split(thinking, tail.strip())
    if _THINK_OPEN in text:
        return Split(text.split(_THINK_OPEN, 1)[1].strip(), None)
    return Split("", text)


def _split_harmony(text: str) -> Split:
    if "<|channel|>" in text or "<|message|>" in text:
        finals = list(_H_FINAL.finditer(text))
        thoughts = [m.group(2).strip() for m in _H_MESSAGE.finditer(text) if m.group(1) != "final"]
        if not finals:
            return Split("\n\n".join(t for t in thoughts if t), None)
        answer = text[finals[-1].end():]
        for tok in _H_END_TOKENS:
            answer = answer.split(tok, 1)[0]
        head = text[: finals[-1].start()]
        thoughts = [m.group(2).strip() for m in _H_MESSAGE.finditer(head) if m.group(1) != "final"]
        return Split("\n\n".join(t for t in thoughts if t), answer.strip())
    final = _H_STRIPPED_FINAL.search(text)
    start = _H_STRIPPED_START.match(text)
    if final is None:
        if start is not None:
            return Split(text[start.end():].strip(), None)
        return Split("", text.strip())
    head = text[: final.start()]
    if start is not None and start.end() <= final.start():
        head = head[start.end():]
    return Split(head.strip(), text[final.end():].strip())


def final_answer(text: str, fmt: str = DEFAULT_FORMAT, *, reasoning: str | None = None) -> str | None:
    """The text every grader and parser reads: the final answer, or ``None`` when there is none.

    See :func:`split_response` for the arguments.
    """
    return split_response(text, fmt, reasoning=reasoning).answer


def no_answer_reason(finish_reason: str | None = "length") -> str:
    """Grade reason of a response without a final answer (reward 0).

    Args:
        finish_reason: ``length`` (budget L hit: :data:`CUT_OFF_REASON`) or anything else
            (the thinking ended by itself: :data:`EMPTY_REASON`). verl's reward sees only the
            text, so it passes ``length``: an unclosed thinking block is a cut-off response.
    """
    return CUT_OFF_REASON if finish_reason in (None, "length") else EMPTY_REASON


#: Keys of a ``backend.reasoning`` config node.
_CONFIG_KEYS = ("format", "chat_template_kwargs", "effort")
_EFFORTS = (None, "minimal", "low", "medium", "high")


@dataclass(frozen=True)
class ReasoningConfig:
    """How one model thinks: its output format and the switches that control its thinking.

    Built from a backend's ``reasoning`` config node (``conf/reasoning/*.yaml`` presets).

    Attributes:
        format: One of :data:`FORMATS` (default :data:`DEFAULT_FORMAT`).
        chat_template_kwargs: Extra chat-template variables, e.g. Qwen3's
            ``{"enable_thinking": false}``; sent as ``chat_template_kwargs`` to vLLM (server and
            offline engine).
        effort: Reasoning effort (``minimal``/``low``/``medium``/``high``) for gpt-oss and hosted
            reasoning APIs (``reasoning_effort``), or ``None`` (the model's default).
    """

    format: str = DEFAULT_FORMAT
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    effort: str | None = None

    @classmethod
    def of(cls, node: Mapping[str, Any] | ReasoningConfig | None, where: str = "backend.reasoning") -> ReasoningConfig:
        """Validate a config node (``None`` or no ``format``: :data:`DEFAULT_FORMAT`).

        Raises:
            ValueError: An unknown key, format or effort (names ``where`` and the valid values).
        """
        if node is None:
            return cls()
        if isinstance(node, ReasoningConfig):
            return node
        unknown = sorted(set(node) - set(_CONFIG_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; valid keys: {', '.join(_CONFIG_KEYS)}")
        fmt = node.get("format") or DEFAULT_FORMAT
        if fmt not in FORMATS:
            raise ValueError(f"{where}.format={fmt!r}: valid formats are {', '.join(FORMATS)}")
        effort = node.get("effort")
        if effort not in _EFFORTS:
            raise ValueError(f"{where}.effort={effort!r}: valid values are null, minimal, low, medium, high")
        kwargs = dict(node.get("chat_template_kwargs") or {})
        return cls(format=str(fmt), chat_template_kwargs=kwargs, effort=effort)

    def cache_params(self) -> dict[str, Any]:
        """What of this config changes a model's output or its split (enters the LLM cache key).

        Empty for the default (``auto``, no switches): the key that the default ``none`` had
        before ``auto`` existed, so older caches stay valid (an old entry holds the whole
        response, which ``auto`` splits again on a hit: :mod:`mbs.llm.cache`). An explicit
        ``none`` now has a key of its own (its entries keep the thinking, ``auto``'s do not).
        """
        if self == ReasoningConfig():
            return {}
        return {"format": self.format, "chat_template_kwargs": self.chat_template_kwargs, "effort": self.effort}
