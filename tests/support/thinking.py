"""Reasoning models without a model: recorded output shapes and a local chat-completions server.

Shapes (what each family really emits; see mbs/reasoning.py for the formats):

* Qwen3 thinking (``think``): ``<think>\\n...\\n</think>\\n\\nanswer``; with ``enable_thinking:
  false`` an empty ``<think>\\n\\n</think>\\n\\n`` block before the answer.
* DeepSeek-R1 / Qwen3-*-Thinking-2507 (``think_open``): the template opened ``<think>``, so the
  output is ``...\\n</think>\\n\\nanswer``.
* gpt-oss (``harmony``): raw ``<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>answer<|return|>``,
  or with special tokens skipped ``analysis...assistantfinalanswer``.

Every thinking below is long, mentions the tags mbs's parsers look for (``<problem>``,
``<solution>``, ``<answer>``, ``<subproblem>``, ``<span>``, ``<distractor>``, ``<verdict>``) and holds
wrong ``\\boxed{}`` guesses, so a parser that reads the thinking breaks visibly.

:func:`chat_server` serves ``POST /v1/chat/completions`` on 127.0.0.1 in three response shapes:
``raw`` (a server without a reasoning parser: the whole text in ``content``),
``reasoning_content`` / ``reasoning`` (vLLM's reasoning parser, before / from 0.11: thinking in
that field, the answer in ``content``, ``null`` content when cut off while thinking) and
``openai`` (a hosted reasoning API: the answer only, ``usage.completion_tokens_details.reasoning_tokens``,
and a 400 for ``max_tokens``, ``temperature`` or ``top_p`` as OpenAI's reasoning models answer).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler

from support.loopback import serving

#: Tags of every mbs teacher/judge/Goose output format, mentioned by the thinking drafts.
TAGS = ("<problem>", "</problem>", "<solution>", "<answer>", "</answer>", "<subproblem>", "</subproblem>",
        "<span>", "<distractor>", "<verdict>", "<passage>")


def thinking(wrong: str = "3", words: int = 120) -> str:
    """A long draft that mentions every tag and boxes a wrong guess twice."""
    filler = " ".join(["Let me double-check the arithmetic once more."] * max(1, words // 8))
    return (
        f"The user wants the output in tags: {' '.join(TAGS)}. First guess: \\boxed{{{wrong}}}. "
        f"Hmm, draft:\n<problem>a draft problem</problem>\n<solution>draft, so \\boxed{{{wrong}}}</solution>\n"
        f"<answer>{wrong}</answer>\nThat draft is wrong. {filler} Now write the real output."
    )


def qwen3(answer: str, wrong: str = "3") -> str:
    """Qwen3 in thinking mode (format ``think``)."""
    return f"<think>\n{thinking(wrong)}\n</think>\n\n{answer}"


def qwen3_no_thinking(answer: str) -> str:
    """Qwen3 with ``enable_thinking: false``: an empty thinking block, then the answer."""
    return f"<think>\n\n</think>\n\n{answer}"


def r1(answer: str, wrong: str = "3") -> str:
    """DeepSeek-R1 / Thinking-2507: the template opened ``<think>`` (format ``think_open``)."""
    return f"{thinking(wrong)}\n</think>\n\n{answer}"


def harmony_raw(answer: str, wrong: str = "3") -> str:
    """gpt-oss, special tokens kept."""
    return (f"<|channel|>analysis<|message|>{thinking(wrong)}<|end|>"
            f"<|start|>assistant<|channel|>final<|message|>{answer}<|return|>")


def harmony_stripped(answer: str, wrong: str = "3") -> str:
    """gpt-oss decoded with ``skip_special_tokens=True`` (vLLM offline, verl)."""
    return f"analysis{thinking(wrong)}assistantfinal{answer}"


def cut_off(family: str, guess: str = "4") -> str:
    """A response cut off by the budget while thinking, whose thinking boxes ``guess``
    (the correct answer in the tests: it must still never be rewarded)."""
    draft = f"{thinking('3')} Maybe it is \\boxed{{{guess}}}, let me verify by"
    return {
        "think": f"<think>\n{draft}",
        "think_open": draft,
        "harmony_raw": f"<|channel|>analysis<|message|>{draft}",
        "harmony_stripped": f"analysis{draft}",
    }[family]


#: family -> (reasoning format, builder of a complete thinking response)
FAMILIES: dict[str, tuple[str, Callable[[str], str]]] = {
    "qwen3": ("think", qwen3),
    "qwen3_no_thinking": ("think", qwen3_no_thinking),
    "r1": ("think_open", r1),
    "harmony_raw": ("harmony", harmony_raw),
    "harmony_stripped": ("harmony", harmony_stripped),
}


#: family -> the family key of its cut-off shape (:func:`cut_off`)
CUT_FAMILY = {"qwen3": "think", "qwen3_no_thinking": "think", "r1": "think_open",
              "harmony_raw": "harmony_raw", "harmony_stripped": "harmony_stripped"}


@dataclass
class Reply:
    """One choice a responder returns: the final answer, the thinking, and how it ended.

    ``answer=None`` means the response was cut off while thinking.
    """

    answer: str | None
    reasoning: str = ""
    finish_reason: str = "stop"
    completion_tokens: int | None = None


@dataclass
class Seen:
    """What the server received: request bodies, in arrival order."""

    bodies: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _raw_text(r: Reply) -> str:
    if r.answer is None:
        return f"<think>\n{r.reasoning}"
    return f"<think>\n{r.reasoning}\n</think>\n\n{r.answer}" if r.reasoning else r.answer


def _message(shape: str, r: Reply) -> dict:
    if shape == "raw":
        return {"role": "assistant", "content": _raw_text(r)}
    if shape in ("reasoning_content", "reasoning"):
        return {"role": "assistant", "content": r.answer, shape: r.reasoning or None}
    if shape == "openai":  # hosted: the reasoning stays on the server
        return {"role": "assistant", "content": r.answer or "", "refusal": None}
    raise ValueError(shape)


_REJECT = {
    "max_tokens": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
    "temperature": "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is supported.",
    "top_p": "Unsupported parameter: 'top_p' is not supported with this model.",
}


@contextlib.contextmanager
def chat_server(respond: Callable[[dict, int], list[Reply]], shape: str = "reasoning_content") -> Iterator[tuple[str, Seen]]:
    """Serve chat completions on 127.0.0.1 from ``respond(body, n) -> n replies``.

    Yields:
        ``(base_url, seen)``.
    """
    seen = Seen()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            with seen.lock:
                seen.bodies.append(body)
            if shape == "openai":
                bad = next((k for k in _REJECT if k in body and not (k == "temperature" and body[k] == 1)), None)
                if bad:
                    err = {"error": {"message": _REJECT[bad], "type": "invalid_request_error", "param": bad,
                                     "code": "unsupported_parameter" if "parameter" in _REJECT[bad] else "unsupported_value"}}
                    return self._send(400, err)
            n = int(body.get("n") or 1)
            replies = respond(body, n)
            budget = int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
            choices, total, thought = [], 0, 0
            for j, r in enumerate(replies):
                toks = r.completion_tokens if r.completion_tokens is not None else (
                    budget if r.finish_reason == "length" else len(_raw_text(r).split()))
                total += toks
                thought += toks if r.answer is None else len(r.reasoning.split())
                choices.append({"index": j, "message": _message(shape, r), "finish_reason": r.finish_reason, "logprobs": None})
            usage = {"prompt_tokens": 11, "completion_tokens": total, "total_tokens": 11 + total}
            if shape == "openai":
                usage["completion_tokens_details"] = {"reasoning_tokens": thought}
            self._send(200, {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model"),
                             "choices": choices, "usage": usage})

        def _send(self, status: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    with serving(Handler) as base_url:
        yield base_url, seen
